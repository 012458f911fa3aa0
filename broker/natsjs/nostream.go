package natsjs

import "fmt"

// noStream is the error for stream, which does not exist: natsjs does
// not create streams, so it says how to.
func noStream(stream string, err error) error {
	return fmt.Errorf("natsjs: stream %s not found: natsjs does not create streams; create it first with "+
		"jetstream.JetStream.CreateStream or `nats stream add %s --subjects ...`: %w", stream, stream, err)
}

// noStreamFor is the error of a publish to subject that no stream
// captures.
func noStreamFor(id, subject string, err error) error {
	return fmt.Errorf("natsjs: publish %q to %q: no stream captures the subject, and natsjs does not create streams; "+
		"create one whose subjects include %q with jetstream.JetStream.CreateStream or `nats stream add NAME --subjects %q`: %w",
		id, subject, subject, subject, err)
}
