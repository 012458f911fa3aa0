package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// progress counts the messages whose ledger row committed, and closes
// done when all n have; it times the consumer from begin to the last.
type progress struct {
	n       int64
	count   atomic.Int64
	retries atomic.Int64 // failures the mode counts itself (plain, watermill)
	done    chan struct{}
	once    sync.Once

	mu         sync.Mutex
	start, end time.Time
}

func newProgress(n int) *progress { return &progress{n: int64(n), done: make(chan struct{})} }

// begin marks the start: the consumer is ready to take deliveries.
func (p *progress) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		p.start = time.Now()
	}
}

func (p *progress) add(k int64) {
	if p.count.Add(k) >= p.n {
		p.once.Do(func() {
			p.mu.Lock()
			p.end = time.Now()
			p.mu.Unlock()
			close(p.done)
		})
	}
}

// elapsed is the time from begin to the n-th message, or to now.
func (p *progress) elapsed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		return 0
	}
	end := p.end
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(p.start)
}
