package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/store"
)

// The defaults of [ConsumerConfig].
const (
	DefaultWorkers         = 4
	DefaultShutdownTimeout = 30 * time.Second
	DefaultAckTimeout      = 10 * time.Second
	DefaultBatchSize       = 100
	DefaultBatchLinger     = 5 * time.Millisecond
)

// ConsumerConfig configures [Consume]. Zero values mean the defaults.
type ConsumerConfig struct {
	// Workers is the number of deliveries processed at once. Give the
	// broker a prefetch, such as QoS or MaxAckPending, of at least this.
	// Default DefaultWorkers, 4.
	Workers int

	// ShutdownTimeout is how long deliveries in flight may take to finish
	// after Consume's context is done. Then their handlers' contexts are
	// canceled, and what did not commit is not acked. Default
	// DefaultShutdownTimeout, 30 s.
	ShutdownTimeout time.Duration

	// ID extracts the message ID from a delivered message. An empty or
	// invalid ID makes the message a dead letter that keeps its payload.
	// Then it is acked. Default the broker's producer ID,
	// broker.Message.ID.
	ID func(*broker.Message) string

	// LeaseInterval is how often a delivery still being processed is
	// reported InProgress. The broker then does not redeliver it to another
	// consumer meanwhile. Negative means never. Default the LeaseInterval
	// of a broker.LeaseSource, or else never.
	LeaseInterval time.Duration

	// AckTimeout bounds each Ack and Nack. Default DefaultAckTimeout, 10 s.
	AckTimeout time.Duration

	// BatchSize, above 1, processes deliveries in batches, each in one
	// transaction as [Inbox.ProcessBatch] does.
	//
	// A worker takes up to BatchSize deliveries. It waits at most
	// BatchLinger after the first for more. It acks or nacks each by its
	// own outcome. A broker.BatchSource such as Kafka makes the batches
	// itself. It takes up to BatchSize records of one partition in offset
	// order, without linger.
	//
	// Give the broker a prefetch of at least Workers × BatchSize. Consume
	// warns at start when a broker.Prefetcher source holds fewer.
	//
	// Default 1 for Consume, one message per transaction. Default
	// DefaultBatchSize, 100, for [ConsumeBatch].
	BatchSize int
	// BatchLinger is how long a worker waits for a batch to fill, unless
	// the source is a broker.BatchSource. Default DefaultBatchLinger, 5 ms.
	BatchLinger time.Duration
	// FixedBatchSize, when true, keeps every batch at BatchSize, run by
	// every worker at once. Otherwise batches adapt to lock conflicts, as
	// the package's section "Batches" tells. Default false.
	FixedBatchSize bool

	// Retention is how long the inbox keeps processed IDs. It is the
	// pruner's [PrunerConfig.Retention]. Consume compares it at start with
	// the redelivery window of a broker.RedeliveryWindower source. It logs
	// a warning when the window is longer, as [CheckRetention] tells.
	// Negative means no check. Default DefaultRetention, 7 days.
	Retention time.Duration

	// Logger receives failed acks and nacks and the error that stops
	// Consume. What becomes of each message is for [Config.Logger] to say.
	// Default slog.Default().
	Logger *slog.Logger

	missingID func(*broker.Message) string // why an ID is empty, set by withDefaults
}

// CheckRetention compares the inbox's retention with src's redelivery
// window.
//
// The retention is how long the inbox keeps processed IDs, as in
// [PrunerConfig.Retention]. The window is how long the broker may redeliver
// a message, as a broker.RedeliveryWindower tells.
//
// CheckRetention returns a warning when the window is longer. A redelivery
// after its row was pruned is processed again. It returns a note when the
// broker keeps messages without a time limit. Then only a consumer reset can
// bring back a message older than the retention. A new consumer reading from
// the start is such a reset, and so is an offset moved back. Both are empty
// when src cannot tell, or when the window is within the retention.
//
// A retention of 0 means DefaultRetention, as in
// [ConsumerConfig.Retention]. A negative one is compared as it is, so any
// window is longer. A nil src is an error wrapping [ErrInvalidConfig]. So
// is a typed nil, such as a nil *natsjs.Source.
func CheckRetention(ctx context.Context, src broker.Source, retention time.Duration) (warning, note string, err error) {
	if isNil(src) {
		return "", "", fmt.Errorf("%w: nil source (%T)", ErrInvalidConfig, src)
	}
	if retention == 0 {
		retention = DefaultRetention
	}
	w, ok := src.(broker.RedeliveryWindower)
	if !ok {
		return "", "", nil
	}
	window, err := w.RedeliveryWindow(ctx)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("inbox: reading the broker's redelivery window: %w", err)
	case window == 0:
		return "", fmt.Sprintf("the broker keeps messages without a time limit: a message older than the inbox's retention (%v) that comes back (a consumer reset to the start, an offset moved back) is processed again", retention), nil
	case window > retention:
		return fmt.Sprintf("the broker may redeliver a message for %v, longer than the inbox's retention of %v: a redelivery after its ID was pruned is processed again; set the pruner's Retention (and ConsumerConfig.Retention) to at least %v, or shorten the broker's", window, retention, window), "", nil
	}
	return "", "", nil
}

func logRetention(ctx context.Context, log *slog.Logger, consumer string, src broker.Source, retention time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	warning, note, err := CheckRetention(cctx, src, retention)
	switch {
	case err != nil:
		log.WarnContext(ctx, "inbox: could not compare the retention with the broker's redelivery window", "consumer", consumer, "error", err)
	case warning != "":
		log.WarnContext(ctx, "inbox: "+warning, "consumer", consumer)
	case note != "":
		log.InfoContext(ctx, "inbox: "+note, "consumer", consumer)
	}
}

// logPrefetch warns when a broker.Prefetcher source holds fewer deliveries
// ahead than Workers × BatchSize. A broker.BatchSource making batches
// itself (Kafka) is not asked.
func logPrefetch(ctx context.Context, log *slog.Logger, consumer string, src broker.Source, c *ConsumerConfig) {
	p, ok := src.(broker.Prefetcher)
	if !ok {
		return
	}
	if _, ok := src.(broker.BatchSource); ok && c.BatchSize > 1 {
		return
	}
	if n, want := p.Prefetch(), c.Workers*c.BatchSize; n < want {
		log.WarnContext(ctx, "inbox: the source holds fewer deliveries ahead than Workers × BatchSize, so workers wait for deliveries (and batches for BatchLinger) while the broker has more: raise the source's prefetch (natsjs PullBatch, rabbitmq Prefetch, sqs MaxMessages up to 10) or lower Workers or BatchSize",
			"consumer", consumer, "prefetch", n, "workers", c.Workers, "batch_size", c.BatchSize)
	}
}

func (c *ConsumerConfig) withDefaults(src broker.Source) ConsumerConfig {
	var out ConsumerConfig
	if c != nil {
		out = *c
	}
	if out.Workers <= 0 {
		out.Workers = DefaultWorkers
	}
	if out.ShutdownTimeout <= 0 {
		out.ShutdownTimeout = DefaultShutdownTimeout
	}
	out.missingID = func(*broker.Message) string { return "ConsumerConfig.ID returned an empty string" }
	if out.ID == nil {
		out.ID = func(m *broker.Message) string { return m.ID }
		out.missingID = missingID(src)
	}
	if ls, ok := src.(broker.LeaseSource); ok && out.LeaseInterval == 0 {
		out.LeaseInterval = ls.LeaseInterval()
	}
	if out.BatchLinger <= 0 {
		out.BatchLinger = DefaultBatchLinger
	}
	if out.Retention == 0 {
		out.Retention = DefaultRetention
	}
	if out.AckTimeout <= 0 {
		out.AckTimeout = DefaultAckTimeout
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

// Consume processes the deliveries of src through ib and h.
//
// It runs until ctx is done or src fails for good. It acks each delivery
// only after its outcome committed.
//
//   - Processed, Duplicate and DeadLettered are acked. A message whose ID is
//     missing or invalid is dead-lettered with its payload.
//   - Retry is nacked with the outcome's delay. The broker redelivers later.
//
// A handler's panic is a handler error.
//
// When ctx is done, Consume stops fetching. It lets deliveries in flight
// finish for up to [ConsumerConfig.ShutdownTimeout]. Then it cancels them,
// without acking them, and returns nil. A terminal error of src, such as a
// deleted consumer, stops every worker the same way and is returned. So
// does a database error that no retry fixes, which wraps
// [ErrUnrecoverable].
//
// A nil ib, src or h is an error wrapping [ErrInvalidConfig]. So is a src
// that holds a nil pointer, such as a nil *natsjs.Source. Such errors come
// before anything starts.
//
// [ConsumeQueued] is Consume for a [QueuedHandler], in one round trip per
// message.
func Consume[TTx any](ctx context.Context, ib *Inbox[TTx], src broker.Source, h Handler[TTx], cfg *ConsumerConfig) error {
	if err := checkArgs(ib, h); err != nil {
		return err
	}
	cs, err := newConsuming(ctx, ib, src, cfg, 1)
	if err != nil {
		return err
	}
	run := ib.eachRun(h)
	process := func(ctx context.Context, msg Message) (Outcome, error) { return ib.Process(ctx, msg, h) }
	return cs.run(ctx, func(ctx context.Context, ds []broker.Delivery) error {
		if len(ds) == 1 {
			return cs.deliver(ctx, ds[0], process)
		}
		return cs.deliverBatch(ctx, ds, run)
	})
}

// ConsumeBatch is Consume in batches, with one handler for all the new
// messages of a batch.
//
// It suits a multi-row business write per batch, as [Inbox.ProcessBatchFunc]
// does. [ConsumerConfig.BatchSize] defaults to DefaultBatchSize here.
func ConsumeBatch[TTx any](ctx context.Context, ib *Inbox[TTx], src broker.Source, h BatchHandler[TTx], cfg *ConsumerConfig) error {
	if err := checkArgs(ib, h); err != nil {
		return err
	}
	cs, err := newConsuming(ctx, ib, src, cfg, DefaultBatchSize)
	if err != nil {
		return err
	}
	run := ib.batchFuncRun(h)
	return cs.run(ctx, func(ctx context.Context, ds []broker.Delivery) error {
		return cs.deliverBatch(ctx, ds, run)
	})
}

// consuming is one Consume call, shared by its workers.
type consuming[TTx any] struct {
	ib    *Inbox[TTx]
	src   broker.Source
	c     ConsumerConfig
	limit *batchLimit // nil when the batch size is fixed
}

// newConsuming checks src and cfg, with batchSize for a zero BatchSize. It
// logs what the retention and the prefetch make worth a warning.
func newConsuming[TTx any](ctx context.Context, ib *Inbox[TTx], src broker.Source, cfg *ConsumerConfig, batchSize int) (*consuming[TTx], error) {
	if isNil(src) {
		return nil, fmt.Errorf("%w: nil source (%T)", ErrInvalidConfig, src)
	}
	c := cfg.withDefaults(src)
	if c.BatchSize < 0 {
		return nil, fmt.Errorf("%w: negative ConsumerConfig.BatchSize %d", ErrInvalidConfig, c.BatchSize)
	}
	if c.BatchSize == 0 {
		c.BatchSize = batchSize
	}
	if c.BatchSize > 1 {
		if _, ok := ib.driver.(store.BatchClaimer[TTx]); !ok {
			return nil, fmt.Errorf("%w: ConsumerConfig.BatchSize %d: %w (%T)", ErrInvalidConfig, c.BatchSize, ErrNoBatch, ib.driver)
		}
	}
	if c.Retention >= 0 {
		logRetention(ctx, c.Logger, ib.Consumer(), src, c.Retention)
	}
	logPrefetch(ctx, c.Logger, ib.Consumer(), src, &c)
	cs := &consuming[TTx]{ib: ib, src: src, c: c}
	if c.BatchSize > 1 && !c.FixedBatchSize {
		cs.limit = newBatchLimit(c.Workers, c.BatchSize)
	}
	return cs, nil
}

// run runs the workers. Each hands process the deliveries it took.
func (cs *consuming[TTx]) run(ctx context.Context, process func(ctx context.Context, ds []broker.Delivery) error) error {
	// Work outlives ctx by ShutdownTimeout, so that a commit in progress
	// can finish and be acked.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopAfter := context.AfterFunc(ctx, func() { time.AfterFunc(cs.c.ShutdownTimeout, cancelWork) })
	defer stopAfter()

	fetch, stopFetching := context.WithCancel(ctx)
	defer stopFetching()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		terminal error
	)
	// stop ends consumption for good: every worker finishes its delivery
	// and returns, and Consume returns err.
	stop := func(err error, msg string) {
		once.Do(func() {
			terminal = err
			cs.c.Logger.ErrorContext(ctx, msg, "consumer", cs.ib.Consumer(), "error", err)
		})
		stopFetching()
	}
	for range cs.c.Workers {
		wg.Go(func() {
			for {
				size := cs.c.BatchSize
				if cs.limit != nil {
					size = cs.limit.next()
				}
				ds, serr := gather(fetch, cs.src, &cs.c, size)
				if len(ds) == 0 {
					if fetch.Err() == nil { // the source failed for good
						stop(serr, "inbox: the message source failed; stopping")
					}
					return
				}
				if err := process(work, ds); err != nil {
					stop(err, "inbox: the database cannot be used; stopping")
					return
				}
				if serr != nil {
					stop(serr, "inbox: the message source failed; stopping")
					return
				}
			}
		})
	}
	wg.Wait()
	return terminal
}

// startBatch waits until the limit lets a batch of n messages run, and
// returns the batch's splitFunc and the function that ends it. A nil
// limit (a fixed batch size) does not wait, nor split.
func (cs *consuming[TTx]) startBatch(n int) (splitFunc, func()) {
	limit := cs.limit
	if limit == nil {
		return nil, func() {}
	}
	epoch, end := limit.start(n)
	return func(ctx context.Context, n int, err error) int {
		next, width, size := limit.conflicted(&epoch, n)
		cs.ib.split(ctx, &SplitEvent{Consumer: cs.ib.Consumer(), Size: n, Next: next, Width: width, Limit: size, Err: err})
		// Wait again, under the new width: the batches that met the
		// conflict must not go on side by side.
		end()
		epoch, end = limit.start(next)
		return next
	}, func() { end() }
}

// gather waits for a delivery, then takes up to n in all, waiting at most
// c.BatchLinger after the first for more; the source's error, if it failed
// for good meanwhile, comes back with the deliveries taken before. A
// broker.BatchSource makes the batch itself, in the order its broker
// keeps (a Kafka partition's).
func gather(fetch context.Context, src broker.Source, c *ConsumerConfig, n int) ([]broker.Delivery, error) {
	// A source may hand out a ready delivery even when fetch has ended.
	if err := fetch.Err(); err != nil {
		return nil, err
	}
	if bs, ok := src.(broker.BatchSource); ok && c.BatchSize > 1 {
		ds, err := bs.NextBatch(fetch, n)
		if len(ds) == 0 && err == nil { // against the contract: do not spin on it
			err = fmt.Errorf("inbox: %T.NextBatch returned no delivery and no error", src)
		}
		return ds, err
	}
	first, err := src.Next(fetch)
	if err != nil {
		return nil, err
	}
	ds := []broker.Delivery{first}
	if n <= 1 {
		return ds, nil
	}
	lctx, cancel := context.WithTimeout(fetch, c.BatchLinger)
	defer cancel()
	for len(ds) < n {
		d, err := src.Next(lctx)
		if err != nil {
			if lctx.Err() == nil { // not the linger's end: the source failed
				return ds, err
			}
			break
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// settleParallel is how many deliveries of a batch are settled at once.
const settleParallel = 64

// deliverBatch processes deliveries in one batch through run, and acks or
// nacks each by its outcome. It waits for the limit's turn with the
// deliveries leased. It returns the error of a database that no retry
// fixes, after nacking; any other error is already in the outcomes (a
// split batch may fail in a part after earlier parts committed).
func (cs *consuming[TTx]) deliverBatch(ctx context.Context, ds []broker.Delivery, run batchRun[TTx]) error {
	msgs := make([]Message, len(ds))
	stops := make([]func(), len(ds))
	for i, d := range ds {
		msgs[i] = message(&cs.c, d.Message())
		stops[i] = keepLease(ctx, d, cs.c.LeaseInterval)
	}
	// Leased while the batch waits for its turn too.
	split, end := cs.startBatch(len(ds))
	outs, err := cs.ib.processBatch(ctx, msgs, run, split)
	end()
	for _, stop := range stops {
		stop()
	}
	// Several at once: an ack that waits for the broker (JetStream's
	// double ack) would otherwise cost the batch a round trip per message;
	// a bound, so that a failed batch's nacks do not open a channel or a
	// request each at once (RabbitMQ's delay queues, SQS).
	var wg sync.WaitGroup
	sem := make(chan struct{}, settleParallel)
	for i, d := range ds {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cs.settle(ctx, d, &msgs[i], outs[i])
		})
	}
	wg.Wait()
	if errors.Is(err, ErrUnrecoverable) {
		return err
	}
	return nil
}

// deliver processes one delivery through process and acks or nacks it. It
// returns the error of a database that no retry fixes, after nacking.
func (cs *consuming[TTx]) deliver(ctx context.Context, d broker.Delivery, process func(context.Context, Message) (Outcome, error)) error {
	msg := message(&cs.c, d.Message())
	stopLease := keepLease(ctx, d, cs.c.LeaseInterval)
	out, err := process(ctx, msg)
	stopLease()

	cs.settle(ctx, d, &msg, out)
	if errors.Is(err, ErrUnrecoverable) {
		return err
	}
	return nil
}

// settle acks d when its outcome is committed, nacks it with the outcome's
// delay otherwise.
func (cs *consuming[TTx]) settle(ctx context.Context, d broker.Delivery, msg *Message, out Outcome) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cs.c.AckTimeout)
	defer cancel()
	if out.Ack() {
		if aerr := d.Ack(actx); aerr != nil {
			// Committed but not acked: the broker redelivers it, and the
			// redelivery is a duplicate.
			cs.c.Logger.WarnContext(ctx, "inbox: ack failed; the message will be redelivered and skipped as a duplicate",
				"consumer", cs.ib.Consumer(), "id", logID(msg.ID), "status", out.Status, "error", aerr)
		}
		return
	}
	if nerr := d.Nack(actx, out.Delay); nerr != nil {
		cs.c.Logger.WarnContext(ctx, "inbox: nack failed; the broker will redeliver the message when its lease expires",
			"consumer", cs.ib.Consumer(), "id", logID(msg.ID), "error", nerr)
	}
}

// message makes the inbox's Message of a delivered one.
func message(c *ConsumerConfig, m *broker.Message) Message {
	id, panicked := messageID(c, m)
	msg := Message{ID: id, Type: m.Type, Payload: m.Payload, Headers: m.Headers,
		Subject: m.Subject, Deliveries: m.Deliveries, Time: m.Time, System: m.System}
	switch {
	case panicked != nil:
		msg.idHint = fmt.Sprintf("ConsumerConfig.ID panicked: %v", panicked)
	case id == "" && c.missingID != nil:
		msg.idHint = c.missingID(m)
	}
	return msg
}

// missingID says why a message of src has no ID: src's own words (a
// broker.MissingIDer) or broker.Message.ID's, and what to do.
func missingID(src broker.Source) func(*broker.Message) string {
	const todo = "; set it when publishing, or derive an ID with ConsumerConfig.ID"
	if mi, ok := src.(broker.MissingIDer); ok {
		return func(m *broker.Message) string { return mi.MissingID(m) + todo }
	}
	return func(*broker.Message) string { return "the source gave it no broker.Message.ID" + todo }
}

// messageID runs c.ID; a panic in it leaves the ID empty, so that the
// message becomes a dead letter with its payload instead of killing the
// worker.
func messageID(c *ConsumerConfig, m *broker.Message) (id string, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			c.Logger.Error("inbox: ConsumerConfig.ID panicked; the message will be dead-lettered", "panic", v)
			id, panicked = "", v
		}
	}()
	return c.ID(m), nil
}

// keepLease reports d InProgress every interval until the returned function
// is called; a zero interval does nothing. A timer, not a goroutine: most
// messages finish long before the first report is due.
func keepLease(ctx context.Context, d broker.Delivery, interval time.Duration) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock() // the timer's function reads t
	t = time.AfterFunc(interval, func() {
		// Under the lock, so that no InProgress follows stop: it would
		// reset the delay of the Nack that comes next.
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = d.InProgress(ctx)
		t.Reset(interval)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
