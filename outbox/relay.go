package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/logid"
	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/internal/storable"
	"github.com/inboxkit/inbox/store"
)

// The relay's defaults, for the [RelayConfig] fields of the same names.
const (
	DefaultBatch          = 100
	DefaultLease          = 30 * time.Second
	DefaultPollInterval   = time.Second
	DefaultMaxAttempts    = 10
	DefaultPublishTimeout = 10 * time.Second
	DefaultParallel       = 8
	DefaultOutageAfter    = time.Minute
	// busyPoll is how soon a relay that claimed rows looks again: writers
	// notify at most every few milliseconds (pgxstore's
	// OutboxNotifyEvery), so rows committed after a notification and
	// after this relay's claim are found this soon, not after
	// PollInterval.
	busyPoll = 10 * time.Millisecond
	// keptPruneEvery is how often Run deletes the published rows kept
	// longer than KeepPublished.
	keptPruneEvery = time.Minute
	// releaseTimeout bounds the statements that give rows back at
	// shutdown, after ctx is done.
	releaseTimeout = 5 * time.Second
)

// PublishFunc publishes one message and returns once the receiver has it.
// That is a broker's publish ack or confirm, or an HTTP 2xx. Its error
// counts one attempt, as the package doc tells. The message's ID is the same
// on every attempt. Use it as the idempotency key of an external call.
type PublishFunc func(ctx context.Context, m *Message) error

// ToBroker publishes through p. The Destination becomes the broker message's
// Subject, such as a NATS subject, an AMQP routing key or a Kafka topic. The
// ID, Key, Type, Headers and Payload pass on as they are. When p is a
// [broker.Prober], as every adapter's Publisher is, the relay uses p's Probe
// unless [RelayConfig.Probe] is set.
func ToBroker(p broker.Publisher) PublishFunc {
	pr, _ := p.(broker.Prober)
	return func(ctx context.Context, m *Message) error {
		err := p.Publish(ctx, &broker.Message{ID: m.ID, Subject: m.Destination, Key: m.Key, Type: m.Type,
			Headers: m.Headers, Payload: m.Payload})
		if err != nil && pr != nil {
			return &probeError{err: err, probe: pr.Probe}
		}
		return err
	}
}

// probeError is a failed publication of ToBroker, with its publisher's
// probe.
type probeError struct {
	err   error
	probe func(ctx context.Context) error
}

func (e *probeError) Error() string { return e.err.Error() }
func (e *probeError) Unwrap() error { return e.err }

// RelayConfig configures a [Relay]. Publish is required. For every other
// field, the zero value means its default.
type RelayConfig struct {
	// Publish publishes a message. Use [ToBroker], or a function of your own
	// such as an HTTP call or an email. Required.
	Publish PublishFunc
	// Batch is the most rows claimed at once. Default [DefaultBatch], 100.
	Batch int
	// Lease is how long claimed rows stay with this relay before another may
	// take them. A relay that dies holding rows delays them by up to Lease.
	// They are then published again. Lease must be at least twice
	// PublishTimeout. Default [DefaultLease], 30 s.
	Lease time.Duration
	// PollInterval is how often the relay looks for rows when nothing wakes it.
	// On PostgreSQL, NOTIFY wakes it at once. The poll then only catches what a
	// lost connection missed, and rows due after a backoff. Default
	// [DefaultPollInterval], 1 s.
	PollInterval time.Duration
	// MaxAttempts is the number of counted failed publications after which a
	// row is parked. [Relay.Parked] lists it until [Relay.Unpark]. Default
	// [DefaultMaxAttempts], 10.
	MaxAttempts int
	// Parallel is the most publications of a batch in flight at once. A value
	// of 1 publishes one after the other. Publish must be safe for concurrent
	// use, as the adapters' Publishers are. Default [DefaultParallel], 8.
	Parallel int
	// Probe tells an outage from a bad row, as the package doc tells. The relay
	// calls it once when a round's publications fail and none succeeds. A nil
	// error means the receiver answers, and the failures count. An error means
	// an outage, and they do not. With [ToBroker], the default is the
	// publisher's own, since every adapter's Publisher is a [broker.Prober].
	// Default none otherwise, and OutageAfter decides.
	Probe func(ctx context.Context) error
	// OutageAfter tells an outage from a bad row when there is no Probe. A
	// failure then counts only while the receiver takes other messages. After
	// OutageAfter without a successful publication, the receiver is taken for
	// down. A bad row that is the only traffic is then retried for ever. Give a
	// Probe to park it. Default [DefaultOutageAfter], 1 min.
	OutageAfter time.Duration
	// PublishTimeout bounds one Publish call. Default [DefaultPublishTimeout],
	// 10 s.
	PublishTimeout time.Duration
	// Backoff spaces the publications of a failing row, and the tries to
	// listen again after a broken LISTEN (at most PollInterval apart).
	// Default the defaults of [inbox.Backoff], 1 s doubling to 5 min with
	// ±10 % jitter.
	Backoff inbox.Backoff
	// Ordered publishes each key's messages one at a time, in the order
	// written. The package doc's section on order tells the details. Without
	// it, rows go out oldest first, but a failed row is retried after younger
	// ones. Default false.
	Ordered bool
	// KeepPublished keeps published rows, marked, for this long before the relay
	// deletes them. They are a record of what was sent. They also give a longer
	// memory of IDs, since Write skips an ID still in the table. Default 0, which
	// deletes a row as soon as the broker confirmed it.
	KeepPublished time.Duration
	// NoListen makes the relay poll even where the database can tell it of new
	// rows. Without it, Run holds a connection of the driver's pool for LISTEN
	// on PostgreSQL. Size the pool for it. On a pool of one connection, Run
	// polls anyway and says so at WARN. Default false.
	NoListen bool
	// Logger receives failed publications and database errors at WARN, and
	// parked rows at ERROR. Default [slog.Default].
	Logger *slog.Logger
	// Hooks are values that implement [PublishHook]. The OpenTelemetry
	// package's gives a span per publication. NewRelay rejects a value that is
	// no PublishHook, at run time for the reason [Hook] gives. Default none.
	Hooks []Hook
}

func (c *RelayConfig) withDefaults() (RelayConfig, error) {
	var out RelayConfig
	if c != nil {
		out = *c
	}
	if out.Publish == nil {
		return out, fmt.Errorf("%w: RelayConfig.Publish is required (outbox.ToBroker(publisher), or a function)", ErrInvalidConfig)
	}
	if out.Batch == 0 {
		out.Batch = DefaultBatch
	}
	if out.Lease == 0 {
		out.Lease = DefaultLease
	}
	if out.PollInterval == 0 {
		out.PollInterval = DefaultPollInterval
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.Parallel == 0 {
		out.Parallel = DefaultParallel
	}
	if out.OutageAfter == 0 {
		out.OutageAfter = DefaultOutageAfter
	}
	if out.PublishTimeout == 0 {
		out.PublishTimeout = DefaultPublishTimeout
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	switch {
	case out.Batch < 0, out.Lease < 0, out.PollInterval < 0, out.MaxAttempts < 0, out.PublishTimeout < 0, out.Parallel < 0,
		out.KeepPublished < 0, out.OutageAfter < 0:
		return out, fmt.Errorf("%w: negative setting in %+v", ErrInvalidConfig, out)
	case out.Lease < 2*out.PublishTimeout:
		return out, fmt.Errorf("%w: Lease %v is shorter than twice PublishTimeout %v", ErrInvalidConfig, out.Lease, out.PublishTimeout)
	}
	return out, nil
}

// Relay publishes the outbox's rows.
//
// It claims a batch of due rows with a lease and publishes each outside the
// claiming transaction. It then deletes the published ones, or marks them
// with [RelayConfig.KeepPublished]. A message goes out at least once and
// is never lost. Several relays on one table share the rows.
type Relay struct {
	d     store.OutboxRelayer
	cfg   RelayConfig
	hooks []PublishHook

	mu     sync.Mutex
	lastOK time.Time // of the last successful publication
	down   int       // rounds since, whose failures were not counted
}

// NewRelay returns a Relay on driver, the Driver of pgxstore or sqlstore.
// It checks that the tables are migrated.
func NewRelay(ctx context.Context, driver store.OutboxRelayer, cfg *RelayConfig) (*Relay, error) {
	if driver == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Relay{d: driver, cfg: c}
	for i, h := range c.Hooks {
		ph, ok := h.(PublishHook)
		if !ok {
			return nil, fmt.Errorf("%w: RelayConfig.Hooks[%d] (%T) is not an outbox.PublishHook", ErrInvalidConfig, i, h)
		}
		r.hooks = append(r.hooks, ph)
	}
	if err := migrate.Check(ctx, driver, "outbox", ErrNotMigrated); err != nil {
		return nil, err
	}
	return r, nil
}

// RelayResult is what one round of RelayOnce did.
type RelayResult struct {
	// Claimed rows, of which Published were published and deleted, or
	// marked with KeepPublished. Failed failed and will be retried, and
	// Parked were parked. The rest, if any, were given back unpublished,
	// because the lease or ctx ran out.
	Claimed, Published, Failed, Parked int
}

// Run relays until ctx is done or a database error that no retry fixes.
//
// When ctx is done, Run finishes the publications under way. It gives back
// the rows it claimed and has not started, and returns nil. Missing tables
// and denied permissions are errors that no retry fixes. Run returns them.
// Other errors are logged and retried. On PostgreSQL, Run holds a
// connection for LISTEN, as [RelayConfig.NoListen] tells.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	if l, ok := r.d.(store.OutboxListener); ok && !r.cfg.NoListen {
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { r.listen(lctx, l, wake) })
		defer wg.Wait() // its connection is back when Run returns
		defer cancel()
	}
	failures := 0
	var pruned time.Time
	for {
		if r.cfg.KeepPublished > 0 && time.Since(pruned) > keptPruneEvery {
			pruned = time.Now()
			if err := r.PrunePublished(ctx); err != nil && ctx.Err() == nil {
				if r.d.Unrecoverable(err) {
					return err
				}
				r.cfg.Logger.WarnContext(ctx, "outbox: deleting kept published rows failed; trying again later", "error", err)
			}
		}
		res, err := r.RelayOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := r.cfg.PollInterval
		switch {
		case err != nil && r.d.Unrecoverable(err):
			return err
		case err != nil:
			failures++
			wait = r.cfg.Backoff.Delay(failures)
			r.cfg.Logger.WarnContext(ctx, "outbox: relay round failed; trying again", "error", err, "after", wait)
		case res.Claimed == r.cfg.Batch:
			failures = 0
			continue // a backlog: no waiting
		case res.Claimed > 0:
			failures = 0
			wait = min(wait, busyPoll)
		default:
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// listen signals wake on every notification of new rows, listening again
// after a broken connection; a missed one costs at most PollInterval.
//
// It listens again after Backoff's delay, growing while listening fails,
// at most PollInterval: waiting PollInterval itself left a relay deaf for
// a minute after a 1 s PostgreSQL failover.
func (r *Relay) listen(ctx context.Context, l store.OutboxListener, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	failures := 0
	again := func() time.Duration {
		failures++
		return min(r.cfg.Backoff.Delay(failures), r.cfg.PollInterval)
	}
	for ctx.Err() == nil {
		n, err := l.OutboxListen(ctx)
		if errors.Is(err, store.ErrPoolTooSmall) {
			r.cfg.Logger.WarnContext(ctx, "outbox: not listening for new rows, polling instead: "+
				"give the pool two connections or more, or set RelayConfig.NoListen", "error", err, "every", r.cfg.PollInterval)
		}
		if errors.Is(err, store.ErrNoNotifications) {
			return // polling it is
		}
		if err != nil {
			if ctx.Err() == nil {
				wait := again()
				r.cfg.Logger.WarnContext(ctx, "outbox: cannot listen for new rows; polling", "error", err, "every", r.cfg.PollInterval, "after", wait)
				sleep(ctx, wait)
			}
			continue
		}
		failures = 0
		signal() // rows committed before LISTEN took effect
		for err == nil {
			if err = n.Wait(ctx); err == nil {
				signal()
			}
		}
		n.Close()
		if ctx.Err() == nil { // the connection broke: not at once again
			wait := again()
			r.cfg.Logger.WarnContext(ctx, "outbox: listening for new rows failed; listening again", "error", err, "after", wait)
			sleep(ctx, wait)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// RelayOnce claims one batch of due rows, publishes them and deletes the
// published ones. Run calls it in a loop. A program that relays from a cron
// job may call it until Claimed is 0.
func (r *Relay) RelayOnce(ctx context.Context) (RelayResult, error) {
	token := make([]byte, 16)
	_, _ = rand.Read(token) // never fails
	start := time.Now()
	recs, err := r.d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: r.cfg.Batch, Lease: r.cfg.Lease, Token: token, Ordered: r.cfg.Ordered})
	res := RelayResult{Claimed: len(recs)}
	if err != nil || len(recs) == 0 {
		return res, err
	}
	// Publish up to Parallel rows at once; each row's result in its slot.
	// Ordered batches hold one row per key, so they may go in parallel too.
	errs := make([]error, len(recs))
	released := make([]bool, len(recs))
	sem := make(chan struct{}, r.cfg.Parallel)
	var wg sync.WaitGroup
	for i, rec := range recs {
		sem <- struct{}{}
		// Stop while the lease certainly covers the publication and the
		// delete, and at shutdown; give the rest back.
		if ctx.Err() != nil || time.Since(start) > r.cfg.Lease/2 {
			released[i] = true
			<-sem
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = r.publish(ctx, rec)
		})
	}
	wg.Wait()
	var published []int64
	for i := range recs {
		if !released[i] && errs[i] == nil {
			published = append(published, recs[i].Seq)
		}
	}
	h := r.checkHealth(ctx, start.Add(r.cfg.Lease), len(published) > 0, errs)
	var fails []store.OutboxFailure
	for i, rec := range recs {
		switch {
		case released[i]:
			fails = append(fails, store.OutboxFailure{Seq: rec.Seq, Released: true})
		case errs[i] != nil:
			fails = append(fails, r.failure(ctx, rec, errs[i], h, &res))
		}
	}
	// The rows are ours until the lease ends, whatever ctx says.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var dbErrs []error
	if len(published) > 0 {
		done := r.d.OutboxDelete
		if r.cfg.KeepPublished > 0 {
			done = r.d.OutboxMarkPublished
		}
		n, err := done(fctx, token, published)
		res.Published = n
		if err != nil {
			dbErrs = append(dbErrs, fmt.Errorf("outbox: deleting %d published rows (they will be published again after the lease): %w", len(published), err))
		} else if n < len(published) {
			r.cfg.Logger.WarnContext(ctx, "outbox: the lease ran out before the delete; another relay publishes those rows again",
				"published", len(published), "deleted", n)
		}
	}
	if len(fails) > 0 {
		if err := r.d.OutboxFail(fctx, token, fails); err != nil {
			dbErrs = append(dbErrs, fmt.Errorf("outbox: recording %d failed publications: %w", len(fails), err))
		}
	}
	return res, errors.Join(dbErrs...)
}

func (r *Relay) publish(ctx context.Context, rec *store.OutboxRecord) (err error) {
	m, err := message(rec)
	if err != nil {
		return inbox.Permanent(err)
	}
	// A publication under way at shutdown finishes (within
	// PublishTimeout): cut off, it may still reach the broker, and the
	// row would be published again.
	pctx := context.WithoutCancel(ctx)
	if len(r.hooks) > 0 && m.Headers == nil {
		m.Headers = map[string]string{} // the hooks may add
	}
	var ends []func(error) // the hooks', told of the final error
	defer func() {
		if v := recover(); v != nil {
			err = inbox.Permanent(fmt.Errorf("outbox: Publish panicked: %v", v))
		}
		for i := len(ends) - 1; i >= 0; i-- {
			r.hook(ctx, "end of OnPublish", rec, func() { ends[i](err) })
		}
	}()
	for _, h := range r.hooks {
		r.hook(ctx, "OnPublish", rec, func() {
			c, end := h.OnPublish(pctx, m)
			if c != nil {
				pctx = c
			}
			if end != nil {
				ends = append(ends, end)
			}
		})
	}
	// The timeout applies to the hooks' context, so that one made from
	// another context cannot lift it.
	pctx, cancel := context.WithTimeout(pctx, r.cfg.PublishTimeout)
	defer cancel()
	return r.cfg.Publish(pctx, m)
}

// hook runs fn, a hook's call, logging a panic: a hook's bug must not
// park a row.
func (r *Relay) hook(ctx context.Context, what string, rec *store.OutboxRecord, fn func()) {
	defer func() {
		if v := recover(); v != nil {
			r.cfg.Logger.ErrorContext(ctx, "outbox: a publish hook panicked; the publication goes on", "hook", what,
				"id", logid.String(string(rec.ID)), "panic", v, "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// health is what a round learned of the broker: the rounds it has been
// down (0: it is up, and failures count), and the probe's error.
type health struct {
	down     int
	probeErr error
}

// probeFor returns the probe for a round's errors (RelayConfig.Probe,
// else ToBroker's), and whether a publication failed for a reason that
// may count: one that is not hopeless (see bad).
func (r *Relay) probeFor(errs []error) (probe func(context.Context) error, failed bool) {
	probe = r.cfg.Probe
	for _, err := range errs {
		var pe *probeError
		switch {
		case err == nil || bad(err):
		case probe == nil && errors.As(err, &pe):
			probe, failed = pe.probe, true
		default:
			failed = true
		}
	}
	return probe, failed
}

// probe asks whether the broker answers, within PublishTimeout and by
// leaseEnd, so that the failures are recorded while the rows are this
// relay's.
func (r *Relay) probe(ctx context.Context, leaseEnd time.Time, probe func(context.Context) error) error {
	budget := min(r.cfg.PublishTimeout, time.Until(leaseEnd))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(budget, 0))
	defer cancel()
	return runProbe(pctx, probe)
}

// checkHealth probes the broker when a round published nothing and some
// publication failed, and records what the round showed.
func (r *Relay) checkHealth(ctx context.Context, leaseEnd time.Time, published bool, errs []error) health {
	probe, failed := r.probeFor(errs)
	var h health
	if !published && failed && probe != nil {
		h.probeErr = r.probe(ctx, leaseEnd, probe)
	}
	h.down = r.record(published, failed, probe != nil, h.probeErr)
	return h
}

// record updates the count of rounds the broker has been down: reset by
// a publication or a probe that answered; without a probe, counted once
// nothing was published for OutageAfter.
func (r *Relay) record(published, failed, probed bool, probeErr error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	switch {
	case published:
		r.lastOK, r.down = now, 0
	case !failed:
	case probed && probeErr == nil: // it answers: the rows' own failures
		r.down = 0
	case probed, now.Sub(r.lastOK) >= r.cfg.OutageAfter:
		r.down++
	}
	return r.down
}

// runProbe runs probe, turning a panic into its error.
func runProbe(ctx context.Context, probe func(context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("outbox: the probe panicked: %v", v)
		}
	}()
	return probe(ctx)
}

// maxErrorText bounds a failed publication's stored error, in bytes.
const maxErrorText = 4096

// bad reports whether err says that no publication of its message can
// succeed: the row is parked at once.
func bad(err error) bool { return inbox.IsPermanent(err) || errors.Is(err, broker.ErrInvalidMessage) }

// failure decides what a failed publication makes of its row, given
// the broker's health in its round (see Probe and OutageAfter).
func (r *Relay) failure(ctx context.Context, rec *store.OutboxRecord, err error, h health, res *RelayResult) store.OutboxFailure {
	attempts := rec.Attempts + 1
	f := store.OutboxFailure{Seq: rec.Seq, Error: storable.Text(err.Error(), maxErrorText, "\uFFFD"), Delay: r.cfg.Backoff.Delay(attempts)}
	attrs := []any{"id", logid.String(string(rec.ID)), "destination", rec.Destination, "seq", rec.Seq, "error", err}
	hopeless := bad(err)
	if h.down > 0 && !hopeless {
		f.Released, f.Delay = true, r.cfg.Backoff.Delay(h.down)
		res.Failed++
		if h.probeErr != nil {
			attrs = append(attrs, "probe", h.probeErr)
		}
		r.cfg.Logger.WarnContext(ctx, "outbox: publication failed while the broker is down; not counted, retrying",
			append(attrs, "attempts", rec.Attempts, "retry_in", f.Delay)...)
		return f
	}
	attrs = append(attrs, "attempts", attempts)
	if hopeless || attempts >= r.cfg.MaxAttempts {
		f.Park = true
		res.Parked++
		r.cfg.Logger.ErrorContext(ctx, "outbox: message parked: it is no longer published until unparked", attrs...)
	} else {
		res.Failed++
		r.cfg.Logger.WarnContext(ctx, "outbox: publication failed; retrying", append(attrs, "retry_in", f.Delay)...)
	}
	return f
}

// PrunePublished deletes the published rows kept longer than KeepPublished.
// It deletes a batch at a time until none is left. Run calls it every
// minute.
func (r *Relay) PrunePublished(ctx context.Context) error {
	if r.cfg.KeepPublished <= 0 {
		return nil
	}
	for {
		n, err := r.d.OutboxPrunePublished(ctx, r.cfg.KeepPublished, r.cfg.Batch*10)
		if err != nil {
			return fmt.Errorf("outbox: deleting kept published rows: %w", err)
		}
		if n < r.cfg.Batch*10 {
			return nil
		}
	}
}

// Parked lists at most limit parked messages after afterSeq, in the order
// they were written. An afterSeq of 0 starts from the first.
func (r *Relay) Parked(ctx context.Context, afterSeq int64, limit int) ([]*Parked, error) {
	recs, err := r.d.OutboxParked(ctx, &store.OutboxListParams{AfterSeq: afterSeq, Limit: max(limit, 1)})
	if err != nil {
		return nil, fmt.Errorf("outbox: listing parked messages: %w", err)
	}
	out := make([]*Parked, 0, len(recs))
	for _, rec := range recs {
		m, err := message(rec)
		if err != nil {
			m = &Message{ID: string(rec.ID), Destination: rec.Destination, Key: string(rec.Key), Type: rec.Type, Payload: rec.Payload}
		}
		out = append(out, &Parked{Seq: rec.Seq, Message: m, Attempts: rec.Attempts, Error: rec.LastError,
			CreatedAt: rec.CreatedAt, ParkedAt: rec.ParkedAt})
	}
	return out, nil
}

// Parked is a message the relay gave up on.
type Parked struct {
	// Seq identifies it for Unpark.
	Seq      int64
	Message  *Message
	Attempts int
	// Error is the last publication's error.
	Error               string
	CreatedAt, ParkedAt time.Time
}

// Unpark makes a parked message due again, with its attempts reset. It is
// published as it was written. Unpark returns [store.ErrNotFound] when no
// parked message has that Seq.
func (r *Relay) Unpark(ctx context.Context, seq int64) error {
	if err := r.d.OutboxUnpark(ctx, seq); err != nil {
		return fmt.Errorf("outbox: unpark %d: %w", seq, err)
	}
	return nil
}

// Discard deletes a parked message for good. It is never published. With
// Ordered, its key's later messages then go out. Discard returns
// [store.ErrNotFound] when no parked message has that Seq. A message that is
// not parked is never discarded.
//
// A parked message keeps its ID, and Write skips that ID while it is parked.
// To send a corrected message instead, Discard it. Then Write the correction
// with the same ID. The correction gets a new Seq. With Ordered, it goes out
// after its key's messages written before it, which the Discard lets go
// first.
func (r *Relay) Discard(ctx context.Context, seq int64) error {
	if err := r.d.OutboxDiscard(ctx, seq); err != nil {
		return fmt.Errorf("outbox: discard %d: %w", seq, err)
	}
	return nil
}
