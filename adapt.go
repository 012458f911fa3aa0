package inbox

import (
	"context"
	"sync"
	"time"
)

// How long a lowered batch limit stays before it steps up: the least, and
// the most after repeated conflicts; and how much longer it stays after a
// step up that met conflicts.
const (
	minBatchHold = time.Second
	maxBatchHold = 5 * time.Minute
	holdFactor   = 4
	// startHold is the hold of the slow start, until the first conflict.
	startHold = 250 * time.Millisecond
)

// batchLimit adapts one Consume's batches to lock conflicts, for all its
// workers. It bounds how many batches of several messages run at once
// (width, up to Workers) and how many messages a batch takes (size, up to
// BatchSize). A batch of one message runs whatever the width.
//
// It starts slowly, one batch at a time, and steps up after each hold
// without a conflict (startHold until the first conflict, then at least
// minBatchHold): size doubles back first, then width. A conflict
// steps down: width halves, down to 1, which leaves the consumer's own
// batches no one to deadlock with; then size becomes half the conflicting
// batch's, down to 1, against conflicts with other processes. A conflict in a batch that started
// before the last step down steps no further: that step answered the same
// wave. Any conflict delays the next step up by a hold.
//
// A step up that meets a conflict within two holds (at least two
// seconds: PostgreSQL takes one to find a deadlock) makes hold four times
// as long, up to maxBatchHold: that limit is tried less often. A step up
// that lasts a whole hold halves it, down to minBatchHold. A conflict
// five minutes after the limit last changed starts over at minBatchHold.
type batchLimit struct {
	maxWidth, maxSize int
	now               func() time.Time

	mu      sync.Mutex
	free    *sync.Cond // signalled when a batch ends or width grows
	width   int
	size    int
	running int           // batches of several messages running
	epoch   int           // counts the steps, so that one wave of conflicts steps once
	down    int           // the epoch of the last step down
	up      int           // and of the last step up
	hold    time.Duration // how long a lowered limit stays
	changed time.Time     // when the limit last stepped
	grew    bool          // the last step was up
}

func newBatchLimit(workers, size int) *batchLimit {
	l := &batchLimit{maxWidth: workers, maxSize: size, width: 1, size: size, hold: startHold, now: time.Now}
	l.free = sync.NewCond(&l.mu)
	l.changed, l.grew = l.now(), true // a slow start: one batch at a time, then two, ...
	return l
}

// next returns how many messages the next batch may take, stepping up
// first when the limit has held long enough.
func (l *batchLimit) next() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stepUp()
	return l.size
}

// stepUp steps the limit up when it has held long enough. l.mu is held.
func (l *batchLimit) stepUp() {
	now := l.now()
	if (l.size == l.maxSize && l.width == l.maxWidth) || now.Sub(l.changed) < l.hold {
		return
	}
	if l.grew && l.down > 0 { // the last step up met no conflict for a whole hold
		l.hold = max(l.hold/2, minBatchHold)
	}
	if l.size < l.maxSize {
		l.size = double(l.size, l.maxSize)
	} else {
		l.width = double(l.width, l.maxWidth)
		l.free.Broadcast()
	}
	l.epoch++
	l.up = l.epoch
	l.changed, l.grew = now, true
}

// double returns 2n, at most limit, without overflowing past a huge
// limit (a BatchSize of math.MaxInt).
func double(n, limit int) int {
	if n > limit/2 {
		return limit
	}
	return 2 * n
}

// start waits until a batch of n messages may run, and returns the
// epoch it starts in and the function that ends it. A batch of one
// message does not wait. A waiting batch steps the limit up when it is
// due, each time another batch ends.
func (l *batchLimit) start(n int) (epoch int, end func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 1 {
		return l.epoch, func() {}
	}
	for l.stepUp(); l.running >= l.width; l.stepUp() {
		l.free.Wait()
	}
	l.running++
	return l.epoch, func() {
		l.mu.Lock()
		l.running--
		l.mu.Unlock()
		l.free.Signal()
	}
}

// conflicted steps the limit down after a lock conflict in n messages
// run together by a batch that started in *epoch. A batch that started
// before the last step down does not step again: that step answered the
// same wave of conflicts. It returns how many of the batch's messages to
// run together next (fewer than n, so that the batch ends), and the
// width and size from then on.
func (l *batchLimit) conflicted(epoch *int, n int) (next, width, size int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if *epoch >= l.down {
		switch since := now.Sub(l.changed); {
		case since > maxBatchHold: // calm for long: start over
			l.hold = minBatchHold
		case l.grew && *epoch >= l.up && since < 2*max(l.hold, minBatchHold): // the step up met conflicts
			l.hold = min(holdFactor*max(l.hold, minBatchHold), maxBatchHold)
		case l.hold < minBatchHold: // the first conflict ends the slow start
			l.hold = minBatchHold
		}
		if l.width > 1 {
			l.width = max(l.width/2, 1)
		} else {
			l.size = max(min(l.size, n/2), 1)
		}
		l.epoch++
		l.down = l.epoch
		l.grew = false
	}
	l.changed = now // no step up while conflicts go on
	*epoch = l.epoch
	return max(min(l.size, n/2), 1), l.width, l.size
}

// SplitEvent describes a batch that met a lock conflict, for a
// [BatchSplitHook].
type SplitEvent struct {
	Consumer string
	// Size is how many messages ran together and met the conflict.
	Size int
	// Next is how many of the batch's messages run together next.
	Next int
	// Width and Limit are how many batches of several messages the
	// consumer runs at once from now on, and how many messages each takes.
	// They hold until the limits grow back.
	Width, Limit int
	// Err is the database's error, such as a deadlock, a serialization
	// failure or a lock timeout.
	Err error
}

// BatchSplitHook is told of every batch that [Consume] or [ConsumeBatch]
// split after a lock conflict. Nothing of such a batch committed, and no
// attempt was counted. Its messages run again in smaller parts.
type BatchSplitHook interface {
	OnBatchSplit(ctx context.Context, e *SplitEvent)
}

// conflictKept logs a lock conflict in a batch of size messages that is
// not split: with FixedBatchSize, or in ProcessBatch called directly.
func (ib *Inbox[TTx]) conflictKept(ctx context.Context, size int, err error) {
	if ok, held := ib.keptLog.allow(); ok {
		ib.cfg.Logger.WarnContext(ctx, "inbox: lock conflict in a batch; its messages run again one at a time behind savepoints. Consume splits such batches unless FixedBatchSize is set. A handler that updates shared rows should update them in a stable order (sorted by key)",
			heldBack([]any{"consumer", ib.cfg.Consumer, "size", size, "error", err}, "conflicts_not_logged", held)...)
	}
}

// split tells the hooks and the log of a batch split after a conflict.
func (ib *Inbox[TTx]) split(ctx context.Context, e *SplitEvent) {
	call(ctx, &ib.hooks, "OnBatchSplit", nil, ib.hooks.split, func(h BatchSplitHook) { h.OnBatchSplit(ctx, e) })
	if ok, held := ib.splitLog.allow(); ok {
		ib.cfg.Logger.WarnContext(ctx, "inbox: lock conflict in a batch; it runs again in smaller parts, and the batch size grows back once conflicts stop. A handler that updates shared rows should update them in a stable order (sorted by key)",
			heldBack([]any{"consumer", ib.cfg.Consumer, "size", e.Size, "next", e.Next, "width", e.Width, "limit", e.Limit, "error", e.Err}, "splits_not_logged", held)...)
	}
}
