package broker

import "context"

// Prober is implemented by a Publisher that can tell, cheaply and without
// publishing, whether its broker answers. The outbox's relay asks when
// publications fail and none succeeded: a broker that answers refused
// the messages themselves (their failures count towards parking them);
// one that does not is down (an outage, which parks nothing). Every
// adapter's Publisher implements it.
type Prober interface {
	// Probe returns nil when the broker answers, else why not: a lost
	// connection, refused credentials, ctx's end.
	Probe(ctx context.Context) error
}
