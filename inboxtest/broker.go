package inboxtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// DefaultAckWait is the default of [BrokerConfig.AckWait].
const DefaultAckWait = 30 * time.Second

var (
	// ErrNoSubject is wrapped by Publish's error for a subject outside
	// BrokerConfig.Subjects.
	ErrNoSubject = errors.New("inboxtest: no queue takes the subject")
	// ErrStaleDelivery is returned by a Delivery's Ack, Nack, Term and
	// InProgress once it is no longer the message's current delivery. It was
	// settled already, or its lease expired and the message was delivered
	// again.
	ErrStaleDelivery = errors.New("inboxtest: the delivery is no longer current")
)

// BrokerConfig configures a Broker. The zero value means the defaults.
type BrokerConfig struct {
	// Subjects are the subjects the broker takes. Publish refuses any other with
	// an error wrapping [ErrNoSubject]. Default every subject.
	Subjects []string

	// AckWait is how long a delivery may stay unsettled before the message is
	// delivered again. It plays the part of JetStream's AckWait, or SQS's
	// visibility timeout. InProgress starts it again. A Source tells the
	// consumer runtime to call InProgress every AckWait/3, as a
	// broker.LeaseSource does.
	//
	// A negative AckWait means never. An unsettled delivery then comes back only
	// when its Source closes, as on RabbitMQ, and Sources are not
	// broker.LeaseSources. With an AckWait, a closed Source's deliveries come
	// back when it expires. Default [DefaultAckWait], 30 s.
	AckWait time.Duration

	// MaxPayload refuses a payload longer than this many bytes, with an error
	// wrapping broker.ErrInvalidMessage. Default 0, no limit.
	MaxPayload int

	// LoseAck decides, for every Ack, whether the ack is lost. Ack then returns
	// nil, but the message is delivered again at once. It is as if the consumer
	// crashed between its COMMIT and its ack. LoseAck sees the message as
	// delivered, with Deliveries counting from 1. This one loses every first
	// ack.
	//
	//	LoseAck: func(m *broker.Message) bool { return m.Deliveries == 1 }
	//
	// Default nil, which loses no ack.
	LoseAck func(m *broker.Message) bool

	// Duplicate decides, for every message published, whether the broker keeps
	// it twice. Both copies are delivered, possibly at once to two consumers,
	// and each must be settled. That is a redelivery racing with the first
	// delivery, as after a rebalance. Default nil, which duplicates none.
	Duplicate func(m *broker.Message) bool
}

// Broker is an in-memory broker with one queue, for tests of a consumer
// built on inbox.Consume.
//
// It is a broker.Publisher. Its Sources redeliver what is not acked. They
// can lose acks and duplicate messages. The Broker records what was acked,
// nacked and termed. It is safe for concurrent use.
//
// It is stricter than some brokers. A delivery settled after its lease, its
// AckWait, expired gets [ErrStaleDelivery]. JetStream accepts such a late
// ack.
type Broker struct {
	cfg BrokerConfig

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	queue   []*entry      // unsettled messages, in publish order
	seq     int64
	acked   []string
	lost    []string
	nacks   []Nack
	terms   []Term
}

// Nack records a Nack. It holds the message's ID, which delivery of it was
// nacked, counting from 1, and the delay asked for.
type Nack struct {
	ID       string
	Delivery int
	Delay    time.Duration
}

// Term records a Term, with the message's ID and the reason given.
type Term struct {
	ID     string
	Reason string
}

// entry is one unsettled message in the queue.
type entry struct {
	seq     int64
	msg     broker.Message // Deliveries counts the deliveries so far
	readyAt time.Time      // not delivered before (after a Nack)
	holder  *source        // the source of the current delivery; nil when none
	lease   time.Time      // when the current delivery expires; zero: never
	token   int64          // numbers the deliveries, so that a stale one is told apart
}

// NewBroker returns an empty Broker. cfg may be nil.
func NewBroker(cfg *BrokerConfig) *Broker {
	b := &Broker{changed: make(chan struct{})}
	if cfg != nil {
		b.cfg = *cfg
	}
	if b.cfg.AckWait == 0 {
		b.cfg.AckWait = DefaultAckWait
	}
	return b
}

// signal wakes every waiter; b.mu is held.
func (b *Broker) signal() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Publish queues a copy of msg. The copy's Message.Time is the time of
// Publish, and its Message.System is [System], unless msg has them.
//
// Publish refuses a message without ID, or over BrokerConfig.MaxPayload,
// with an error wrapping broker.ErrInvalidMessage. It refuses a message to
// a subject outside BrokerConfig.Subjects with an error wrapping
// [ErrNoSubject].
func (b *Broker) Publish(ctx context.Context, msg *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case msg == nil:
		return fmt.Errorf("%w: nil message", broker.ErrInvalidMessage)
	case msg.ID == "":
		return fmt.Errorf("%w: a message to %q without ID", broker.ErrInvalidMessage, msg.Subject)
	case b.cfg.Subjects != nil && !slices.Contains(b.cfg.Subjects, msg.Subject):
		return fmt.Errorf("inboxtest: publish %q to %q: %w (it takes %q)", msg.ID, msg.Subject, ErrNoSubject, b.cfg.Subjects)
	case b.cfg.MaxPayload > 0 && len(msg.Payload) > b.cfg.MaxPayload:
		return fmt.Errorf("inboxtest: publish %q to %q: %w: payload of %d bytes, over the limit of %d",
			msg.ID, msg.Subject, broker.ErrInvalidMessage, len(msg.Payload), b.cfg.MaxPayload)
	}
	b.Enqueue(msg)
	return nil
}

// System is the Message.System of what a Broker delivers, unless the
// message published had one.
const System = "inboxtest"

// Enqueue queues a copy of msg without Publish's checks. It fills in System
// and Time as Publish does. It is for a message that a real producer could
// not publish, such as one without ID, but that a broker may still
// deliver.
func (b *Broker) Enqueue(msg *broker.Message) {
	if msg == nil {
		return
	}
	n := 1
	if b.cfg.Duplicate != nil && b.cfg.Duplicate(clone(msg)) {
		n = 2
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for range n {
		b.seq++
		m := *clone(msg)
		m.Deliveries = 0
		if m.System == "" {
			m.System = System
		}
		if m.Time.IsZero() {
			m.Time = now
		}
		b.queue = append(b.queue, &entry{seq: b.seq, msg: m})
	}
	b.signal()
}

func clone(m *broker.Message) *broker.Message {
	c := *m
	c.Payload = slices.Clone(m.Payload)
	c.Headers = maps.Clone(m.Headers)
	return &c
}

// Source returns a new consumer of the queue. It shares the queue with the
// Broker's other Sources. It is a broker.Source, and a broker.LeaseSource
// unless BrokerConfig.AckWait is negative. Its unsettled deliveries come
// back after AckWait. Without an AckWait, they come back when it closes.
func (b *Broker) Source() broker.Source {
	s := &source{b: b}
	if b.cfg.AckWait > 0 {
		return &leaseSource{s}
	}
	return s
}

// Acked returns the IDs acked, in the order of the acks. A lost ack is not
// among them.
func (b *Broker) Acked() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.acked)
}

// LostAcks returns the IDs whose ack BrokerConfig.LoseAck lost, in order.
func (b *Broker) LostAcks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lost)
}

// Nacks returns the Nacks, in order.
func (b *Broker) Nacks() []Nack {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.nacks)
}

// Terms returns the Terms, in order.
func (b *Broker) Terms() []Term {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.terms)
}

// Unsettled returns the IDs of the messages neither acked nor termed, in
// publish order. They are queued, in flight, or waiting after a Nack. They
// are what would be lost if the test ended now.
func (b *Broker) Unsettled() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, len(b.queue))
	for i, e := range b.queue {
		ids[i] = e.msg.ID
	}
	return ids
}

// WaitSettled blocks until every message is acked or termed, or ctx is
// done. It then returns ctx's error, naming what is unsettled.
func (b *Broker) WaitSettled(ctx context.Context) error {
	return b.wait(ctx, func() bool { return len(b.queue) == 0 })
}

// wait blocks until cond, called with b.mu held, holds, or ctx is done.
func (b *Broker) wait(ctx context.Context, cond func() bool) error {
	for {
		b.mu.Lock()
		ok, ch := cond(), b.changed
		b.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("inboxtest: unsettled %q: %w", b.Unsettled(), ctx.Err())
		}
	}
}

// source is a consumer of a Broker's queue.
type source struct {
	b      *Broker
	closed bool // under b.mu
}

// leaseSource is a source whose deliveries expire after AckWait.
type leaseSource struct{ *source }

// LeaseInterval is a third of AckWait, so that a lease is renewed twice
// before it would expire.
func (s *leaseSource) LeaseInterval() time.Duration { return s.b.cfg.AckWait / 3 }

// Next returns the first message of the queue that is ready: not in
// flight (or in flight past its lease), and past its Nack's delay.
func (s *source) Next(ctx context.Context) (broker.Delivery, error) {
	b := s.b
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.mu.Lock()
		if s.closed {
			b.mu.Unlock()
			return nil, broker.ErrSourceClosed
		}
		now := time.Now()
		var wake time.Time
		for _, e := range b.queue {
			if e.holder != nil && !e.lease.IsZero() && !now.Before(e.lease) {
				e.holder = nil // expired: deliver it again
			}
			switch {
			case e.holder != nil:
				wake = earliest(wake, e.lease)
			case now.Before(e.readyAt):
				wake = earliest(wake, e.readyAt)
			default:
				d := b.deliver(s, e, now)
				b.mu.Unlock()
				return d, nil
			}
		}
		ch := b.changed
		b.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = time.NewTimer(time.Until(wake))
			fire = timer.C
		}
		select {
		case <-ch:
		case <-fire:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// earliest returns the earlier of a and b, ignoring a zero b; a zero a is
// none yet.
func earliest(a, b time.Time) time.Time {
	if b.IsZero() || (!a.IsZero() && a.Before(b)) {
		return a
	}
	return b
}

// deliver hands e to s; b.mu is held.
func (b *Broker) deliver(s *source, e *entry, now time.Time) *delivery {
	e.holder = s
	e.token++
	e.msg.Deliveries++
	e.readyAt = time.Time{}
	e.lease = time.Time{}
	if b.cfg.AckWait > 0 {
		e.lease = now.Add(b.cfg.AckWait)
	}
	return &delivery{s: s, e: e, token: e.token, msg: clone(&e.msg)}
}

// Close ends s: Next returns broker.ErrSourceClosed, its deliveries'
// Acks fail, and their messages are delivered again to other Sources:
// when their AckWait expires (JetStream's behaviour), or at once without
// one (RabbitMQ's).
func (s *source) Close() error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s.closed = true
	for _, e := range b.queue {
		if e.holder == s && e.lease.IsZero() {
			e.holder = nil
		}
	}
	b.signal()
	return nil
}

// delivery is one delivery of a message.
type delivery struct {
	s     *source
	e     *entry
	token int64
	msg   *broker.Message
}

func (d *delivery) Message() *broker.Message { return d.msg }

// current checks, with b.mu held, that d is its message's current
// delivery and may be settled.
func (d *delivery) current(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case d.s.closed:
		return fmt.Errorf("inboxtest: %s of %q: %w", op, d.msg.ID, broker.ErrSourceClosed)
	case d.e.holder != d.s || d.e.token != d.token || !d.s.b.queued(d.e):
		return fmt.Errorf("inboxtest: %s of %q (delivery %d): %w", op, d.msg.ID, d.msg.Deliveries, ErrStaleDelivery)
	}
	return nil
}

// queued reports whether e is still unsettled; b.mu is held.
func (b *Broker) queued(e *entry) bool {
	_, ok := slices.BinarySearchFunc(b.queue, e.seq, func(x *entry, seq int64) int { return cmp.Compare(x.seq, seq) })
	return ok
}

// remove settles e; b.mu is held.
func (b *Broker) remove(e *entry) {
	b.queue = slices.DeleteFunc(b.queue, func(x *entry) bool { return x == e })
	b.signal()
}

func (d *delivery) Ack(ctx context.Context) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := d.current(ctx, "ack"); err != nil {
		return err
	}
	if b.cfg.LoseAck != nil && b.cfg.LoseAck(clone(d.msg)) {
		b.lost = append(b.lost, d.msg.ID)
		d.e.holder = nil // delivered again at once
		b.signal()
		return nil
	}
	b.acked = append(b.acked, d.msg.ID)
	b.remove(d.e)
	return nil
}

func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := d.current(ctx, "nack"); err != nil {
		return err
	}
	b.nacks = append(b.nacks, Nack{ID: d.msg.ID, Delivery: d.msg.Deliveries, Delay: delay})
	d.e.holder = nil
	d.e.readyAt = time.Now().Add(max(delay, 0))
	b.signal()
	return nil
}

func (d *delivery) Term(ctx context.Context, reason string) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := d.current(ctx, "term"); err != nil {
		return err
	}
	b.terms = append(b.terms, Term{ID: d.msg.ID, Reason: reason})
	b.remove(d.e)
	return nil
}

func (d *delivery) InProgress(ctx context.Context) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := d.current(ctx, "in progress"); err != nil {
		return err
	}
	if b.cfg.AckWait > 0 {
		d.e.lease = time.Now().Add(b.cfg.AckWait)
		b.signal() // a waiting Next recomputes its wake-up time
	}
	return nil
}
