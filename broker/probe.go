package broker

import "context"

// Prober is implemented by a Publisher that can tell, cheaply and without
// publishing, whether its broker answers. Every adapter's Publisher
// implements it.
//
// The outbox's relay asks when publications fail and none succeeded. A
// broker that answers refused the messages themselves. Their failures count
// towards parking them. A broker that does not answer is down. That is an
// outage, which parks nothing.
type Prober interface {
	// Probe returns nil when the broker answers. Otherwise it returns why not,
	// such as a lost connection, refused credentials or ctx's end.
	Probe(ctx context.Context) error
}
