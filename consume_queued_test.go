package inbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/store"
)

// plainStore is a driver that New accepts and nothing else. It cannot
// run queued statements. Its other methods are nil and must not be called.
type plainStore struct{ store.Driver[struct{}] }

func (plainStore) Migrations() []store.Migration                        { return nil }
func (plainStore) SchemaVersion(context.Context) (int, error)           { return 1, nil }
func (plainStore) DurabilityWarnings(context.Context) ([]string, error) { return nil, nil }
func (plainStore) Retryable(error) bool                                 { return false }

// errTablesGone is a store error that no retry fixes.
var errTablesGone = errors.New("relation inbox does not exist")

func (plainStore) Unrecoverable(err error) bool { return errors.Is(err, errTablesGone) }

// queuedStore is a store.QueuedClaimer in memory: a claim and its
// statements commit together, a claimed ID's next claim is a duplicate.
type queuedStore struct {
	plainStore
	fail func(id string) error // the error of ClaimAndRun for id, if any

	mu        sync.Mutex
	committed map[string]bool
	applied   []string // the first argument of every statement applied
}

func (s *queuedStore) ClaimAndRun(_ context.Context, p *store.ClaimParams, stmts []store.Statement) (*store.ClaimResult, error) {
	id := string(p.MessageID)
	if s.fail != nil {
		if err := s.fail(id); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed[id] {
		return &store.ClaimResult{}, nil
	}
	s.committed[id] = true
	for _, st := range stmts {
		s.applied = append(s.applied, st.Args[0].(string))
	}
	return &store.ClaimResult{Claimed: true}, nil
}

func (s *queuedStore) isCommitted(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed[id]
}

// settlement is how a delivery was settled, and whether its ID had
// committed when it was acked.
type settlement struct {
	id                string
	acked, nacked     bool
	ackedBeforeCommit bool
	settledTwice      bool
}

// queueSource hands out its deliveries in order, then waits for ctx.
type queueSource struct {
	st       *queuedStore
	ds       chan *queueDelivery
	ackDelay time.Duration // how long each Ack takes
	nexts    atomic.Int32

	mu      sync.Mutex
	settled []settlement
	all     chan struct{} // closed when every delivery is settled
	left    int
}

func newQueueSource(st *queuedStore, ids ...string) *queueSource {
	s := &queueSource{st: st, ds: make(chan *queueDelivery, len(ids)), all: make(chan struct{}), left: len(ids)}
	for _, id := range ids {
		s.ds <- &queueDelivery{src: s, msg: &broker.Message{ID: id}}
	}
	return s
}

func (s *queueSource) Next(ctx context.Context) (broker.Delivery, error) {
	s.nexts.Add(1)
	select {
	case d := <-s.ds:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *queueSource) Close() error { return nil }

func (s *queueSource) settle(d *queueDelivery, acked bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.settled {
		s.settled = append(s.settled, settlement{id: d.msg.ID, settledTwice: true})
		return nil
	}
	d.settled = true
	s.settled = append(s.settled, settlement{id: d.msg.ID, acked: acked, nacked: !acked,
		ackedBeforeCommit: acked && s.st != nil && !s.st.isCommitted(d.msg.ID)})
	if s.left--; s.left == 0 {
		close(s.all)
	}
	return nil
}

type queueDelivery struct {
	src     *queueSource
	msg     *broker.Message
	settled bool // under src.mu
}

func (d *queueDelivery) Message() *broker.Message { return d.msg }
func (d *queueDelivery) Ack(context.Context) error {
	time.Sleep(d.src.ackDelay)
	return d.src.settle(d, true)
}
func (d *queueDelivery) Nack(context.Context, time.Duration) error { return d.src.settle(d, false) }
func (d *queueDelivery) Term(context.Context, string) error        { return d.src.settle(d, true) }
func (d *queueDelivery) InProgress(context.Context) error          { return nil }

func quietInbox[TTx any](t *testing.T, d store.Driver[TTx], hooks ...Hook) *Inbox[TTx] {
	t.Helper()
	ib, err := New(context.Background(), d, &Config{Consumer: "queued", Hooks: hooks, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// queueID queues one statement whose argument is the message's ID.
func queueID(_ context.Context, q *Queue, m *Message) error {
	q.Add("INSERT INTO ledger (id) VALUES ($1)", m.ID)
	return nil
}

// ConsumeQueued refuses, before it takes a delivery, what it cannot run.
func TestConsumeQueuedRejects(t *testing.T) {
	t.Parallel()
	piped := quietInbox[struct{}](t, &queuedStore{committed: map[string]bool{}})
	plain := quietInbox[struct{}](t, plainStore{})
	var nilSource *queueSource
	tests := []struct {
		name     string
		ib       *Inbox[struct{}]
		src      func() broker.Source // nil: a fresh queueSource
		h        QueuedHandler
		cfg      *ConsumerConfig
		noQueued bool // the error wraps ErrNoQueued too
	}{
		{name: "nil inbox", h: queueID},
		{name: "nil handler", ib: piped},
		{name: "nil source", ib: piped, h: queueID, src: func() broker.Source { return nil }},
		{name: "typed nil source", ib: piped, h: queueID, src: func() broker.Source { return nilSource }},
		{name: "store without queued statements", ib: plain, h: queueID, noQueued: true},
		{name: "batch size 2", ib: piped, h: queueID, cfg: &ConsumerConfig{BatchSize: 2}},
		{name: "batch size 100", ib: piped, h: queueID, cfg: &ConsumerConfig{BatchSize: 100}},
		{name: "negative batch size", ib: piped, h: queueID, cfg: &ConsumerConfig{BatchSize: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			qs := newQueueSource(nil, "m-1")
			var src broker.Source = qs
			if tc.src != nil {
				src = tc.src()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := ConsumeQueued(ctx, tc.ib, src, tc.h, tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ConsumeQueued returned %v, want an error wrapping ErrInvalidConfig", err)
			}
			if got := errors.Is(err, ErrNoQueued); got != tc.noQueued {
				t.Fatalf("error %q wraps ErrNoQueued: %v, want %v", err, got, tc.noQueued)
			}
			if n := qs.nexts.Load(); n != 0 {
				t.Fatalf("the source's Next ran %d times before the error, want 0", n)
			}
		})
	}
}

// Each delivery is acked after its claim and statements committed, a
// redelivery's statements apply nothing, and a failed round trip is nacked.
func TestConsumeQueuedAcksAfterCommit(t *testing.T) {
	t.Parallel()
	st := &queuedStore{committed: map[string]bool{}, fail: func(id string) error {
		if id == "lost" {
			return store.Retryable(errors.New("connection reset"))
		}
		return nil
	}}
	ib := quietInbox[struct{}](t, st)
	src := newQueueSource(st, "a", "b", "a", "lost", "c")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ConsumeQueued(ctx, ib, src, queueID, &ConsumerConfig{Workers: 1, Retention: -1}) }()
	select {
	case <-src.all:
	case <-time.After(10 * time.Second):
		t.Fatal("after 10 s: not every delivery was settled")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ConsumeQueued returned %v, want nil after its context was canceled", err)
	}
	want := []settlement{{id: "a", acked: true}, {id: "b", acked: true}, {id: "a", acked: true}, {id: "lost", nacked: true}, {id: "c", acked: true}}
	if !slices.Equal(src.settled, want) {
		t.Fatalf("settled %+v, want %+v", src.settled, want)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(st.applied, want) {
		t.Fatalf("statements applied for %q, want %q: once per message", st.applied, want)
	}
}

// A database that no retry fixes stops ConsumeQueued, which returns its
// error; the delivery is nacked.
func TestConsumeQueuedUnrecoverable(t *testing.T) {
	t.Parallel()
	st := &queuedStore{committed: map[string]bool{}, fail: func(string) error { return errTablesGone }}
	ib := quietInbox[struct{}](t, st)
	src := newQueueSource(st, "m-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := ConsumeQueued(ctx, ib, src, queueID, &ConsumerConfig{Workers: 1, Retention: -1})
	if !errors.Is(err, ErrUnrecoverable) || !errors.Is(err, errTablesGone) {
		t.Fatalf("ConsumeQueued returned %v, want an error wrapping ErrUnrecoverable and the store's", err)
	}
	if want := []settlement{{id: "m-1", nacked: true}}; !slices.Equal(src.settled, want) {
		t.Fatalf("settled %+v, want %+v", src.settled, want)
	}
}

// onProcessed calls fn after each Processed outcome: after the commit,
// before the ack.
type onProcessed func()

func (fn onProcessed) OnProcessed(context.Context, *Event) { fn() }

// ConsumeQueued stopped right after a commit returns only once that
// delivery's ack, however slow, has been sent: the caller may then close
// the source.
func TestConsumeQueuedReturnsAfterAcks(t *testing.T) {
	t.Parallel()
	st := &queuedStore{committed: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ib := quietInbox[struct{}](t, st, onProcessed(cancel))
	src := newQueueSource(st, "m-1")
	src.ackDelay = 50 * time.Millisecond
	if err := ConsumeQueued(ctx, ib, src, queueID, &ConsumerConfig{Workers: 1, Retention: -1}); err != nil {
		t.Fatalf("ConsumeQueued returned %v, want nil after its context was canceled", err)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if want := []settlement{{id: "m-1", acked: true}}; !slices.Equal(src.settled, want) {
		t.Fatalf("settled %+v when ConsumeQueued returned, want %+v", src.settled, want)
	}
}
