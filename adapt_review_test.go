package inbox

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A huge BatchSize ("take what is there") must survive a conflict and the
// steps back up: the size doubles back to BatchSize, never past it and
// never below 1, and the width then grows back too.
func TestBatchLimitHugeBatchSizeGrowsBack(t *testing.T) {
	t.Parallel()
	l, clock := testLimit(4, math.MaxInt)
	clock.add(time.Hour) // past the slow start: width 2
	l.next()
	clock.add(time.Hour)
	l.next() // width 4
	epoch := l.epoch
	for range 2 { // width 4 -> 2 -> 1
		l.conflicted(&epoch, 100)
	}
	l.conflicted(&epoch, 100) // size 50
	if l.width != 1 || l.size != 50 {
		t.Fatalf("after the conflicts: width %d, size %d; want 1, 50", l.width, l.size)
	}
	for i := range 200 {
		clock.add(maxBatchHold)
		if size := l.next(); size < 1 || (size < l.maxSize && i > 100) {
			t.Fatalf("step %d: size %d, want 1..BatchSize, back at BatchSize (%d) by now", i, size, math.MaxInt)
		}
	}
	if l.width != 4 || l.size != math.MaxInt {
		t.Fatalf("width %d, size %d after 200 holds without a conflict; want 4, %d", l.width, l.size, math.MaxInt)
	}
}

// Many batches starting, splitting and ending at once: none waits for
// ever, and no more than the width run at once.
func TestBatchLimitStress(t *testing.T) {
	t.Parallel()
	l := newBatchLimit(8, 64)
	var wg sync.WaitGroup
	var over atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := range 300 {
				n := l.next()
				epoch, end := l.start(n)
				l.mu.Lock()
				if n > 1 && l.running > l.maxWidth {
					over.Add(1)
				}
				l.mu.Unlock()
				if (i+w)%7 == 0 && n > 1 {
					next, _, _ := l.conflicted(&epoch, n)
					end()
					_, end = l.start(next)
				}
				time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
				end()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("batches still waiting after 60 s")
	}
	if over.Load() > 0 {
		t.Fatalf("%d starts above the width", over.Load())
	}
	if l.running != 0 {
		t.Fatalf("running %d after every batch ended", l.running)
	}
}
