package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

// The defaults of [Options], for its fields of the same names.
const (
	DefaultRedeliveries = 2
	DefaultConcurrent   = 2
	DefaultTimeout      = 30 * time.Second
)

// Options configures Check and CheckBatch. The zero value of every field
// but State means its default.
type Options struct {
	// State reads the business state that the handler changes from the
	// database, outside any transaction of the handler's. It may be a row, a sum
	// or a count of rows. Check compares its values with reflect.DeepEqual, so a
	// string, a number, a struct or a slice of rows all do. Required.
	State func(ctx context.Context) (any, error)

	// Redeliveries is the number of redeliveries one after the other, after each
	// message was processed. Default [DefaultRedeliveries], 2.
	Redeliveries int

	// Concurrent is the number of redeliveries at once, after the sequential
	// ones. Default [DefaultConcurrent], 2.
	Concurrent int

	// Timeout bounds the delivery of each message through inbox.Consume, the one
	// whose ack is lost. Default [DefaultTimeout], 30 s.
	Timeout time.Duration

	// AllowUnchanged lets a message's processing leave the state as it was. Set
	// it for messages that rightly change nothing, such as a delete of what is
	// not there. Without it, Check reports an unchanged state as an error. A
	// handler that did nothing, or whose write State cannot see, would otherwise
	// pass every other check unseen. Default false.
	AllowUnchanged bool
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Redeliveries <= 0 {
		out.Redeliveries = DefaultRedeliveries
	}
	if out.Concurrent <= 0 {
		out.Concurrent = DefaultConcurrent
	}
	if out.Timeout <= 0 {
		out.Timeout = DefaultTimeout
	}
	return out
}

// consumeWorkers take the two copies of each message at once.
const consumeWorkers = 2

// errCrash is the error with which Check makes a transaction roll back
// after the handler returned, as a crash before COMMIT would. It is
// marked transient, so that it does not count towards MaxAttempts.
type errCrash struct{}

func (errCrash) Error() string   { return "inboxtest: simulated crash before COMMIT" }
func (errCrash) Retryable() bool { return true }

// Check runs h, the handler under test, on ib for each of msgs. ib is an
// inbox on the database the handler writes to. Check reports through t,
// with Errorf and Logf, every way in which msgs' effects do not happen once.
//
// Each message, in turn, goes through three steps.
//  1. It is delivered, and its transaction is rolled back after h returned,
//     as by a crash before COMMIT. The state, read by opts.State, must not
//     change. A handler that writes outside its transaction fails here.
//  2. It is delivered through inbox.Consume and a Broker. The Broker delivers
//     it twice at once to two workers, as a rebalance does. It loses the
//     first ack of each copy, as a crash between COMMIT and ack does. h must
//     run once, and the redeliveries must be acked as duplicates. The state
//     must change, unless opts.AllowUnchanged is set.
//  3. It is delivered opts.Redeliveries more times one after the other, then
//     opts.Concurrent more times at once. Each must be a Duplicate. h must
//     not run, and the state must stay as it was after step 2.
//
// A handler's error or panic is reported with the delivery it happened in.
// msgs need distinct, non-empty IDs that ib has not seen. Use a fresh
// consumer name or database schema per test. Check returns whether it
// reported nothing.
func Check[TTx any](ctx context.Context, t testing.TB, ib *inbox.Inbox[TTx], h inbox.Handler[TTx], msgs []inbox.Message, opts *Options) bool {
	t.Helper()
	if h == nil {
		t.Errorf("inboxtest.Check: nil handler")
		return false
	}
	c, ok := newChecker(t, ib, msgs, opts)
	if !ok {
		return false
	}
	for i := range msgs {
		unit := msgs[i : i+1]
		c.check(ctx, fmt.Sprintf("message %q", unit[0].ID), unit, target[TTx]{
			process: func(ctx context.Context, crash bool) ([]inbox.Outcome, error) {
				out, err := ib.Process(ctx, unit[0], c.watch(h, crash))
				return []inbox.Outcome{out}, err
			},
			consume: func(ctx context.Context, src broker.Source) error {
				return inbox.Consume(ctx, ib, src, c.watch(h, false), &inbox.ConsumerConfig{Workers: consumeWorkers})
			},
		})
	}
	return !c.failed
}

// CheckBatch is [Check] for a batch handler, as given to
// inbox.ProcessBatchFunc and inbox.ConsumeBatch.
//
// msgs are delivered together as one batch, in each of Check's ways. The
// state is compared after each batch. ib's store must claim batches.
// Otherwise CheckBatch reports inbox.ErrNoBatch.
func CheckBatch[TTx any](ctx context.Context, t testing.TB, ib *inbox.Inbox[TTx], h inbox.BatchHandler[TTx], msgs []inbox.Message, opts *Options) bool {
	t.Helper()
	if h == nil {
		t.Errorf("inboxtest.CheckBatch: nil handler")
		return false
	}
	c, ok := newChecker(t, ib, msgs, opts)
	if !ok {
		return false
	}
	c.check(ctx, fmt.Sprintf("batch of %d messages", len(msgs)), msgs, target[TTx]{
		process: func(ctx context.Context, crash bool) ([]inbox.Outcome, error) {
			return ib.ProcessBatchFunc(ctx, msgs, c.watchBatch(h, crash))
		},
		consume: func(ctx context.Context, src broker.Source) error {
			return inbox.ConsumeBatch(ctx, ib, src, c.watchBatch(h, false),
				&inbox.ConsumerConfig{Workers: consumeWorkers, BatchSize: len(msgs), BatchLinger: 100 * time.Millisecond})
		},
	})
	return !c.failed
}

// target delivers one unit (a message, or the batch) through the inbox
// under test: process once (with crash: rolled back after the handler),
// or consume from src until ctx is done.
type target[TTx any] struct {
	process func(ctx context.Context, crash bool) ([]inbox.Outcome, error)
	consume func(ctx context.Context, src broker.Source) error
}

// checker holds what Check saw of the handler and what it reported.
type checker[TTx any] struct {
	t      testing.TB
	opts   Options
	failed bool

	mu    sync.Mutex
	runs  map[string]int // handler runs per message ID that returned nil
	herrs []string       // the handler's errors and panics, described
}

func newChecker[TTx any](t testing.TB, ib *inbox.Inbox[TTx], msgs []inbox.Message, opts *Options) (*checker[TTx], bool) {
	t.Helper()
	c := &checker[TTx]{t: t, opts: opts.withDefaults()}
	if ib == nil {
		c.errorf("inboxtest: nil *inbox.Inbox")
	}
	if c.opts.State == nil {
		c.errorf("inboxtest: Options.State is required: it reads the state that the handler changes")
	}
	if len(msgs) == 0 {
		c.errorf("inboxtest: no messages to check")
	}
	seen := map[string]int{}
	for i, m := range msgs {
		if m.ID == "" {
			c.errorf("inboxtest: msgs[%d] has no ID: Check needs messages that the inbox processes", i)
		}
		if j, ok := seen[m.ID]; ok {
			c.errorf("inboxtest: msgs[%d] and msgs[%d] share the ID %q: Check makes the duplicates itself", j, i, m.ID)
		}
		seen[m.ID] = i
	}
	return c, !c.failed
}

func (c *checker[TTx]) errorf(format string, args ...any) {
	c.t.Helper()
	c.failed = true
	c.t.Errorf(format, args...)
}

// reset forgets what the handler did, for the next delivery.
func (c *checker[TTx]) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs, c.herrs = map[string]int{}, nil
}

// seen returns the handler's successful runs per ID, and its failures.
func (c *checker[TTx]) seen() (map[string]int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs, c.herrs
}

// ran records a run of the handler on ids that ended with err.
func (c *checker[TTx]) ran(ids []string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		for _, id := range ids {
			c.runs[id]++
		}
		return
	}
	var p *inbox.PanicError
	if errors.As(err, &p) {
		c.herrs = append(c.herrs, fmt.Sprintf("the handler panicked on %q: %v\n%s", ids, p.Value, p.Stack))
		return
	}
	c.herrs = append(c.herrs, fmt.Sprintf("the handler returned an error on %q: %v", ids, err))
}

// guard runs fn, turning a panic into an *inbox.PanicError with its stack.
func guard(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &inbox.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// watch wraps h so that c sees its runs; with crash, a run that succeeds
// returns errCrash, which rolls its transaction back.
func (c *checker[TTx]) watch(h inbox.Handler[TTx], crash bool) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, m *inbox.Message) error {
		err := guard(func() error { return h(ctx, tx, m) })
		c.ran([]string{m.ID}, err)
		if err == nil && crash {
			return errCrash{}
		}
		return err
	}
}

func (c *checker[TTx]) watchBatch(h inbox.BatchHandler[TTx], crash bool) inbox.BatchHandler[TTx] {
	return func(ctx context.Context, tx TTx, ms []*inbox.Message) error {
		err := guard(func() error { return h(ctx, tx, ms) })
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		c.ran(ids, err)
		if err == nil && crash {
			return errCrash{}
		}
		return err
	}
}

func (c *checker[TTx]) state(ctx context.Context, what string) (any, bool) {
	c.t.Helper()
	s, err := c.opts.State(ctx)
	if err != nil {
		c.errorf("inboxtest: Options.State %s: %v", what, err)
		return nil, false
	}
	return s, true
}

// check runs the deliveries of one unit, named what.
func (c *checker[TTx]) check(ctx context.Context, what string, msgs []inbox.Message, tg target[TTx]) {
	c.t.Helper()
	before, ok := c.state(ctx, "before "+what)
	if !ok {
		return
	}
	if before, ok = c.crashBeforeCommit(ctx, what, tg, before); !ok {
		return
	}
	after, ok := c.lostAck(ctx, what, msgs, tg)
	if !ok {
		return
	}
	if reflect.DeepEqual(before, after) && !c.opts.AllowUnchanged {
		c.errorf("inboxtest: %s: the state stayed %s when it was processed, want it changed: either the handler changed nothing, or Options.State does not see what it changes, and Check cannot tell whether it changes twice (set Options.AllowUnchanged if nothing is right)", what, show(before))
	}
	for i := range c.opts.Redeliveries {
		c.reset()
		outs, err := tg.process(ctx, false)
		if !c.redelivered(ctx, what, fmt.Sprintf("redelivery %d of %d (one after the other)", i+1, c.opts.Redeliveries), msgs, outs, err, after) {
			return
		}
	}
	c.reset()
	var wg sync.WaitGroup
	start := make(chan struct{})
	outs := make([][]inbox.Outcome, c.opts.Concurrent)
	errs := make([]error, c.opts.Concurrent)
	for i := range c.opts.Concurrent {
		wg.Go(func() {
			<-start
			outs[i], errs[i] = tg.process(ctx, false)
		})
	}
	close(start)
	wg.Wait()
	for i := range c.opts.Concurrent {
		if !c.redelivered(ctx, what, fmt.Sprintf("redelivery %d of %d at once", i+1, c.opts.Concurrent), msgs, outs[i], errs[i], after) {
			return
		}
	}
}

// crashBeforeCommit delivers the unit and rolls its transaction back after
// the handler returned: the state must stay before. It returns the state
// after, to go on from.
func (c *checker[TTx]) crashBeforeCommit(ctx context.Context, what string, tg target[TTx], before any) (any, bool) {
	c.t.Helper()
	const delivery = "a delivery rolled back after the handler returned (a crash before COMMIT)"
	c.reset()
	outs, err := tg.process(ctx, true)
	runs, herrs := c.seen()
	for i, out := range outs {
		if out.Status != inbox.Retry {
			why := "did the handler end its transaction itself?"
			if len(herrs) > 0 {
				why = strings.Join(herrs, "; ")
			}
			c.errorf("inboxtest: %s, %s: outcome %v (error %v) of message %d, want retry: %s",
				what, delivery, out.Status, errors.Join(err, out.Err), i+1, why)
		}
	}
	if len(runs) == 0 && len(herrs) == 0 {
		c.errorf("inboxtest: %s, %s: the handler did not run (error %v), want it run once: has the inbox seen the message before?", what, delivery, err)
	}
	for _, e := range herrs {
		c.t.Logf("inboxtest: %s, %s: %s", what, delivery, e)
	}
	after, ok := c.state(ctx, "after "+what+", "+delivery)
	if !ok {
		return nil, false
	}
	if !reflect.DeepEqual(before, after) {
		c.errorf("inboxtest: %s, %s: the state changed from %s to %s, want it unchanged: the handler writes outside the transaction it is given (write through tx, or send the effect through the outbox)",
			what, delivery, show(before), show(after))
	}
	return after, true
}

// lostAck delivers the unit through inbox.Consume and a Broker that
// delivers each message twice, to two workers at once (a rebalance), and
// loses the first ack of each copy: the handler must run once per message,
// each redelivery must be acked, nothing nacked. It returns the state
// after.
func (c *checker[TTx]) lostAck(ctx context.Context, what string, msgs []inbox.Message, tg target[TTx]) (any, bool) {
	c.t.Helper()
	const delivery = "the first delivery, through inbox.Consume, twice at once, whose ack is lost (a crash between COMMIT and ack)"
	c.reset()
	b := NewBroker(&BrokerConfig{AckWait: -1,
		Duplicate: func(*broker.Message) bool { return true },
		LoseAck:   func(m *broker.Message) bool { return m.Deliveries == 1 }})
	for _, m := range msgs {
		b.Enqueue(&broker.Message{ID: m.ID, Subject: m.Subject, Type: m.Type, Payload: m.Payload, Headers: m.Headers})
	}
	cctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	src := b.Source()
	done := make(chan error, 1)
	go func() { done <- tg.consume(cctx, src) }()
	// Until every message is acked, or one is nacked or termed: Consume
	// would retry it after a backoff that Check does not wait for.
	werr := b.wait(cctx, func() bool { return len(b.queue) == 0 || len(b.nacks) > 0 || len(b.terms) > 0 })
	cancel()
	cerr := <-done
	src.Close()
	runs, herrs := c.seen()
	ok := true
	fail := func(format string, args ...any) {
		c.t.Helper()
		ok = false
		c.errorf("inboxtest: %s, %s: "+format, append([]any{what, delivery}, args...)...)
	}
	if cerr != nil && !errors.Is(cerr, context.Canceled) && !errors.Is(cerr, context.DeadlineExceeded) {
		fail("inbox.Consume returned %v", cerr)
	}
	for _, n := range b.Nacks() {
		why := "though the handler returned nil: its COMMIT failed (see the inbox's log)"
		if len(herrs) > 0 {
			why = strings.Join(herrs, "; ")
		}
		fail("%q was not processed (nacked at delivery %d, to retry after %v): %s", n.ID, n.Delivery, n.Delay, why)
	}
	for _, tm := range b.Terms() {
		fail("%q was termed: %s", tm.ID, tm.Reason)
	}
	if werr != nil && len(b.Nacks()) == 0 {
		fail("not settled within %v (Options.Timeout): %v", c.opts.Timeout, werr)
	}
	if !ok {
		return nil, false
	}
	// Processed: what follows is reported, and the redeliveries go on.
	acks := map[string]int{}
	for _, id := range b.Acked() {
		acks[id]++
	}
	for _, m := range msgs {
		switch {
		case runs[m.ID] == 0:
			fail("the handler did not run for %q, want it run once: the inbox took it for a duplicate (did the delivery rolled back before commit something?)", m.ID)
		case runs[m.ID] != 1:
			fail("the handler ran %d times for %q without error, want once: its redelivery was not a duplicate", runs[m.ID], m.ID)
		case acks[m.ID] != 2:
			fail("%q acked %d times after its lost acks, want twice: once for each of its two copies", m.ID, acks[m.ID])
		}
	}
	for _, e := range herrs { // failures retried within the delivery (a batch's savepoint pass)
		c.t.Logf("inboxtest: %s, %s: %s", what, delivery, e)
	}
	return c.state(ctx, "after "+what+", "+delivery)
}

// redelivered checks one redelivery of the unit: a Duplicate for each
// message, the handler not run, the state still want.
func (c *checker[TTx]) redelivered(ctx context.Context, what, delivery string, msgs []inbox.Message, outs []inbox.Outcome, err error, want any) bool {
	c.t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		c.t.Helper()
		ok = false
		c.errorf("inboxtest: %s, %s: "+format, append([]any{what, delivery}, args...)...)
	}
	for i, out := range outs {
		if out.Status != inbox.Duplicate {
			fail("%q: outcome %v (error %v), want duplicate", msgs[i].ID, out.Status, errors.Join(err, out.Err))
		}
	}
	runs, herrs := c.seen()
	for _, m := range msgs {
		if runs[m.ID] > 0 {
			fail("the handler ran for %q, want it not run: the inbox did not recognize the redelivery", m.ID)
		}
	}
	for _, e := range herrs {
		fail("%s", e)
	}
	got, sok := c.state(ctx, "after "+what+", "+delivery)
	if !sok {
		return false
	}
	if !reflect.DeepEqual(got, want) {
		fail("the state changed from %s to %s, want it unchanged", show(want), show(got))
	}
	return ok
}

// show formats a state for a message: strings quoted, others with
// their field names.
func show(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%+v", v)
}
