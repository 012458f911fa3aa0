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

// noLeader is the error of a publish to subject that stream captures but
// did not answer: it has no leader, as while a cluster elects one.
func noLeader(id, subject, stream string, err error) error {
	return fmt.Errorf("natsjs: publish %q to %q: stream %s captures the subject but did not answer: it has no leader at the moment, "+
		"as while a cluster elects one after a server failed; publish again: %w", id, subject, stream, err)
}

// noAnswer is the error of a publish that no stream answered, when
// JetStream could not tell which stream captures subject either.
func noAnswer(id, subject string, lookup, err error) error {
	return fmt.Errorf("natsjs: publish %q to %q: no stream answered, and JetStream could not tell which stream captures the subject (%v): "+
		"a cluster electing leaders after a server failed answers so, and a later publish succeeds; otherwise create a stream "+
		"whose subjects include %q: %w", id, subject, lookup, subject, err)
}
