// Package memsource is a broker.Source in memory, for the tests and
// benchmarks of the consumer runtime where no broker is under test: Add
// queues messages, a Nack queues a message again after its delay, and the
// source counts acks and nacks.
package memsource

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// Source hands out the messages added to it, in order.
type Source struct {
	ch              chan *broker.Message
	acks, nacks     atomic.Int64
	mu              sync.Mutex
	acked, inFlight map[string]int
}

// New returns a source that holds up to capacity messages queued.
func New(capacity int) *Source {
	return &Source{ch: make(chan *broker.Message, capacity), acked: map[string]int{}, inFlight: map[string]int{}}
}

// Add queues messages.
func (s *Source) Add(msgs ...*broker.Message) {
	for _, m := range msgs {
		s.ch <- m
	}
}

// Next returns the next queued message.
func (s *Source) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-s.ch:
		m.Deliveries++
		s.mu.Lock()
		s.inFlight[m.ID]++
		s.mu.Unlock()
		return &delivery{s: s, m: m}, nil
	}
}

// Close does nothing.
func (s *Source) Close() error { return nil }

// Acks counts the acks so far, Nacks the nacks.
func (s *Source) Acks() int64  { return s.acks.Load() }
func (s *Source) Nacks() int64 { return s.nacks.Load() }

// Acked returns how many times the message id was acked.
func (s *Source) Acked(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[id]
}

// Pending returns how many messages are queued or delivered and not yet
// acked; a nacked one is pending until it is queued again. It is exact
// once no consumer takes messages: Next counts a message only after it
// left the queue.
func (s *Source) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.ch)
	for _, k := range s.inFlight {
		n += k
	}
	return n
}

type delivery struct {
	s    *Source
	m    *broker.Message
	once sync.Once
}

func (d *delivery) Message() *broker.Message { return d.m }

func (d *delivery) settle() bool {
	first := false
	d.once.Do(func() {
		first = true
		d.s.mu.Lock()
		if d.s.inFlight[d.m.ID]--; d.s.inFlight[d.m.ID] == 0 {
			delete(d.s.inFlight, d.m.ID)
		}
		d.s.mu.Unlock()
	})
	return first
}

func (d *delivery) Ack(context.Context) error {
	if d.settle() {
		d.s.acks.Add(1)
		d.s.mu.Lock()
		d.s.acked[d.m.ID]++
		d.s.mu.Unlock()
	}
	return nil
}

func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	if !d.settle() {
		return nil
	}
	d.s.nacks.Add(1)
	d.s.mu.Lock()
	d.s.inFlight[d.m.ID]++ // pending until it is queued again
	d.s.mu.Unlock()
	time.AfterFunc(delay, func() {
		d.s.ch <- d.m // then no longer pending here: counted twice for a moment, never missed
		d.s.mu.Lock()
		if d.s.inFlight[d.m.ID]--; d.s.inFlight[d.m.ID] == 0 {
			delete(d.s.inFlight, d.m.ID)
		}
		d.s.mu.Unlock()
	})
	return nil
}

func (d *delivery) Term(ctx context.Context, _ string) error { return d.Ack(ctx) }

func (d *delivery) InProgress(context.Context) error { return nil }
