package inbox

import (
	"testing"
	"time"
)

// fakeClock is a batchLimit's clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func testLimit(workers, size int) (*batchLimit, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	l := newBatchLimit(workers, size)
	l.now = c.now
	l.changed = c.t
	return l, c
}

// The limit starts with one batch at a time and doubles the width after
// each short hold; conflicts halve the width, then the size; steps up
// restore the size first; a step up that meets a conflict makes the next
// hold four times as long, and one that holds halves it.
func TestBatchLimit(t *testing.T) {
	t.Parallel()
	type step struct {
		wait     time.Duration // before the step
		conflict int           // a conflict in a batch of this many (0: next only)
		stale    bool          // the batch started before the last step down
		width    int           // want after the step
		size     int
		hold     time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"slow start", []step{
			{0, 0, false, 1, 50, startHold},
			{249 * time.Millisecond, 0, false, 1, 50, startHold},
			{time.Millisecond, 0, false, 2, 50, startHold},
			{startHold, 0, false, 4, 50, startHold},
			{time.Hour, 0, false, 4, 50, startHold},
		}},
		{"conflicts step down, stale ones do not", []step{
			{startHold, 0, false, 2, 50, startHold},
			{startHold, 0, false, 4, 50, startHold},
			{2 * time.Second, 50, false, 2, 50, time.Second}, // long after the step up: the slow start ends
			{0, 50, true, 2, 50, time.Second},
			{0, 50, false, 1, 50, time.Second},
			{0, 50, false, 1, 25, time.Second},
			{0, 10, false, 1, 5, time.Second},
			{0, 1, false, 1, 1, time.Second},
		}},
		{"conflicts hold the limit down", []step{
			{startHold, 0, false, 2, 50, startHold},
			{startHold, 0, false, 4, 50, startHold},
			{2 * time.Second, 50, false, 2, 50, time.Second},
			{900 * time.Millisecond, 50, true, 2, 50, time.Second},
			{900 * time.Millisecond, 0, false, 2, 50, time.Second}, // 1.8 s after the first, 0.9 s after the last
			{100 * time.Millisecond, 0, false, 4, 50, time.Second},
		}},
		{"steps up restore the size first", []step{
			{startHold, 0, false, 2, 50, startHold},
			{startHold, 0, false, 4, 50, startHold},
			{2 * time.Second, 50, false, 2, 50, time.Second},
			{0, 50, false, 1, 50, time.Second},
			{0, 50, false, 1, 25, time.Second},
			{time.Second, 0, false, 1, 50, time.Second},
			{time.Second, 0, false, 2, 50, time.Second}, // the step to 50 held: hold halves, at least 1 s
			{time.Second, 0, false, 4, 50, time.Second},
		}},
		{"a step up that meets conflicts waits longer", []step{
			{startHold, 0, false, 2, 50, startHold},
			{100 * time.Millisecond, 50, false, 1, 50, 4 * time.Second},
			{3 * time.Second, 0, false, 1, 50, 4 * time.Second},
			{time.Second, 0, false, 2, 50, 4 * time.Second},
			{time.Second, 50, false, 1, 50, 16 * time.Second}, // found 1 s later, as PostgreSQL finds a deadlock
			{16 * time.Second, 0, false, 2, 50, 16 * time.Second},
			{16 * time.Second, 0, false, 4, 50, 8 * time.Second}, // the step to 2 held
		}},
		{"hold stops at its maximum and starts over after a calm", []step{
			{startHold, 0, false, 2, 50, startHold},
			{0, 50, false, 1, 50, 4 * time.Second},
			{4 * time.Second, 0, false, 2, 50, 4 * time.Second},
			{0, 50, false, 1, 50, 16 * time.Second},
			{16 * time.Second, 0, false, 2, 50, 16 * time.Second},
			{0, 50, false, 1, 50, 64 * time.Second},
			{64 * time.Second, 0, false, 2, 50, 64 * time.Second},
			{0, 50, false, 1, 50, 256 * time.Second},
			{256 * time.Second, 0, false, 2, 50, 256 * time.Second},
			{0, 50, false, 1, 50, maxBatchHold},
			{maxBatchHold, 0, false, 2, 50, maxBatchHold},
			{maxBatchHold, 0, false, 4, 50, maxBatchHold / 2},
			{maxBatchHold + time.Second, 50, false, 2, 50, minBatchHold},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, clock := testLimit(4, 50)
			for i, s := range tc.steps {
				clock.add(s.wait)
				size := l.next()
				if s.conflict > 0 {
					epoch := l.epoch // a batch that started now
					if s.stale {
						epoch = l.down - 1
					}
					next, width, sz := l.conflicted(&epoch, s.conflict)
					if want := max(min(s.size, s.conflict/2), 1); next != want || width != s.width || sz != s.size {
						t.Fatalf("step %d: conflicted returned %d, %d, %d; want %d, %d, %d", i+1, next, width, sz, want, s.width, s.size)
					}
					size = l.size
				}
				if l.width != s.width || size != s.size || l.hold != s.hold {
					t.Fatalf("step %d: width %d, size %d, hold %v; want %d, %d, %v", i+1, l.width, size, l.hold, s.width, s.size, s.hold)
				}
			}
		})
	}
}

// start lets width batches of several messages run at once, and a
// batch of one message always.
func TestBatchLimitStart(t *testing.T) {
	t.Parallel()
	l, _ := testLimit(4, 50)
	_, end1 := l.start(10)
	_, endOne := l.start(1) // never waits
	endOne()
	started := make(chan func())
	go func() {
		_, end := l.start(10)
		started <- end
	}()
	select {
	case <-started:
		t.Fatal("a second batch started at width 1")
	case <-time.After(50 * time.Millisecond):
	}
	end1()
	select {
	case end := <-started:
		end()
	case <-time.After(10 * time.Second):
		t.Fatal("the second batch did not start after the first ended")
	}
}

// A batch that waits for its turn steps the limit up when it is due: the
// slow start does not stall behind a long batch.
func TestBatchLimitStartStepsUp(t *testing.T) {
	t.Parallel()
	l, clock := testLimit(4, 50)
	_, end1 := l.start(10) // width 1: the only one
	defer end1()
	clock.add(startHold)
	started := make(chan func(), 1)
	go func() {
		_, end := l.start(10)
		started <- end
	}()
	select {
	case end := <-started:
		end()
	case <-time.After(10 * time.Second):
		t.Fatal("a batch waited behind the first one although the width was due to grow")
	}
	if l.width != 2 {
		t.Fatalf("width %d, want 2", l.width)
	}
}
