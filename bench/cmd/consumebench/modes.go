package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/bench/internal/ledger"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/store"
)

// allModes are the modes in the order they run within a round. A new mode
// is a name here and a case in modes.runner. defaultModes leave out
// fixed, which collapses on hot rows (the cap of -max-seconds each time).
var (
	allModes     = []string{"ack", "ackbatch", "plain", "plainbatch", "plaineach", "consume", "queued", "batch", "fixed", "consumebatch", "watermill"}
	defaultModes = []string{"ack", "ackbatch", "plain", "plainbatch", "plaineach", "consume", "queued", "batch", "consumebatch", "watermill"}
)

// runFunc consumes q until ctx is done, counting on p the messages whose
// ledger row committed (ack: the acks), and calling p.start when it
// begins to consume. It returns once its consumer stopped and its source
// closed: every delivery acked, or returned to the broker.
type runFunc func(ctx context.Context, q queue, p *progress) error

// ackMode is the broker's ceiling: the same source and workers, acking
// every delivery at once, no database.
func ackMode(o *options) runFunc {
	return func(ctx context.Context, q queue, p *progress) error {
		src, err := q.source(ctx)
		if err != nil {
			return err
		}
		defer src.Close()
		p.begin()
		return workers(ctx, o.workers, src, func(ctx context.Context, d broker.Delivery) {
			if err := d.Ack(ctx); err != nil {
				p.retries.Add(1)
				return
			}
			p.add(1)
		})
	}
}

// ackBatchMode is the broker's ceiling for the batch modes: each worker
// takes up to -batch deliveries as the inbox does (waiting at most
// inbox.DefaultBatchLinger after the first), then acks them all at once,
// as the inbox settles a batch (up to 64 at once; -batch is below that
// by default).
func ackBatchMode(o *options) runFunc {
	return func(ctx context.Context, q queue, p *progress) error {
		src, err := q.source(ctx)
		if err != nil {
			return err
		}
		defer src.Close()
		p.begin()
		return batchWorkers(ctx, o.workers, src, o.batch, func(ctx context.Context, ds []broker.Delivery) {
			var acks sync.WaitGroup
			for _, d := range ds {
				acks.Go(func() {
					if err := d.Ack(ctx); err != nil {
						p.retries.Add(1)
						return
					}
					p.add(1)
				})
			}
			acks.Wait()
		})
	}
}

// batchWorkers runs n goroutines that take up to size deliveries of src
// at a time (take) and hand them to fn, with a context that outlives ctx
// so that a transaction in progress finishes and is acked, until ctx is
// done.
func batchWorkers(ctx context.Context, n int, src broker.Source, size int, fn func(ctx context.Context, ds []broker.Delivery)) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			for {
				ds, err := take(ctx, src, size)
				if len(ds) > 0 {
					fn(context.WithoutCancel(ctx), ds)
				}
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// take waits for a delivery, then takes up to n in all, waiting at most
// inbox.DefaultBatchLinger after the first for more. The source's error
// comes back with the deliveries taken before it.
func take(ctx context.Context, src broker.Source, n int) ([]broker.Delivery, error) {
	first, err := src.Next(ctx)
	if err != nil {
		return nil, err
	}
	ds := []broker.Delivery{first}
	lctx, cancel := context.WithTimeout(ctx, inbox.DefaultBatchLinger)
	defer cancel()
	for len(ds) < n {
		d, err := src.Next(lctx)
		if err != nil {
			if lctx.Err() == nil {
				return ds, err
			}
			break
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// workers runs n goroutines that hand each delivery of src to fn, with a
// context that outlives ctx so that a transaction in progress finishes
// and is acked, until ctx is done.
func workers(ctx context.Context, n int, src broker.Source, fn func(ctx context.Context, d broker.Delivery)) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			for {
				d, err := src.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				fn(context.WithoutCancel(ctx), d)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// modes runs the database modes on one store's tables.
type modes[TTx any] struct {
	o      *options
	driver store.Driver[TTx]
	counts *inbox.Counts // the last inbox mode's outcomes
	// inTx runs fn in a transaction of its own: BEGIN, fn, COMMIT.
	inTx func(ctx context.Context, fn func(tx TTx) error) error
	// record inserts e's ledger row and adds its amount to its account.
	record func(ctx context.Context, tx TTx, e ledger.Entry) error
	// recordBatch inserts the ledger rows in one statement, then adds the
	// amounts to the accounts in the order of their ids.
	recordBatch func(ctx context.Context, tx TTx, es []ledger.Entry) error
	// queue queues the statements of record, for inbox.ConsumeQueued; nil
	// where the store cannot run queued statements.
	queue func(q *inbox.Queue, e ledger.Entry)
	// watermill is the Watermill mode; nil where there is none.
	watermill runFunc
}

// outcomes returns the outcomes the last inbox mode counted, nil after
// the others.
func (m *modes[TTx]) outcomes() *inbox.Counts { return m.counts }

func (m *modes[TTx]) runner(mode string) (runFunc, error) {
	handler := func(ctx context.Context, tx TTx, msg *inbox.Message) error {
		e, err := ledger.ParseEntry(msg.ID, msg.Payload)
		if err != nil {
			return inbox.Permanent(err)
		}
		return m.record(ctx, tx, e)
	}
	batchHandler := func(ctx context.Context, tx TTx, msgs []*inbox.Message) error {
		es := make([]ledger.Entry, len(msgs))
		for i, msg := range msgs {
			e, err := ledger.ParseEntry(msg.ID, msg.Payload)
			if err != nil {
				return inbox.Permanent(err)
			}
			es[i] = e
		}
		return m.recordBatch(ctx, tx, es)
	}
	switch mode {
	case "plain":
		return m.plain, nil
	case "plainbatch":
		return m.plainBatches(m.recordBatch), nil
	case "plaineach":
		return m.plainBatches(m.recordEach), nil
	case "consume":
		return m.withInbox(func(ctx context.Context, ib *inbox.Inbox[TTx], src broker.Source) error {
			return inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: m.o.workers, Logger: m.o.logger})
		}), nil
	case "queued":
		if m.queue == nil {
			return nil, errNoMode
		}
		queued := func(ctx context.Context, q *inbox.Queue, msg *inbox.Message) error {
			e, err := ledger.ParseEntry(msg.ID, msg.Payload)
			if err != nil {
				return inbox.Permanent(err)
			}
			m.queue(q, e)
			return nil
		}
		return m.withInbox(func(ctx context.Context, ib *inbox.Inbox[TTx], src broker.Source) error {
			return inbox.ConsumeQueued(ctx, ib, src, queued, &inbox.ConsumerConfig{Workers: m.o.workers, Logger: m.o.logger})
		}), nil
	case "batch":
		return m.withInbox(func(ctx context.Context, ib *inbox.Inbox[TTx], src broker.Source) error {
			return inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: m.o.workers, BatchSize: m.o.batch, Logger: m.o.logger})
		}), nil
	case "fixed":
		return m.withInbox(func(ctx context.Context, ib *inbox.Inbox[TTx], src broker.Source) error {
			return inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: m.o.workers, BatchSize: m.o.batch, FixedBatchSize: true, Logger: m.o.logger})
		}), nil
	case "consumebatch":
		return m.withInbox(func(ctx context.Context, ib *inbox.Inbox[TTx], src broker.Source) error {
			return inbox.ConsumeBatch(ctx, ib, src, batchHandler, &inbox.ConsumerConfig{Workers: m.o.workers, BatchSize: m.o.batch, Logger: m.o.logger})
		}), nil
	case "watermill":
		if m.watermill == nil {
			return nil, errNoMode
		}
		return func(ctx context.Context, q queue, p *progress) error {
			m.counts = nil
			return m.watermill(ctx, q, p)
		}, nil
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

// plain is the business transaction without the inbox: BEGIN, the two
// statements, COMMIT, then the ack; a failure nacks for an immediate
// redelivery.
func (m *modes[TTx]) plain(ctx context.Context, q queue, p *progress) error {
	m.counts = nil
	src, err := q.source(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	p.begin()
	return workers(ctx, m.o.workers, src, func(ctx context.Context, d broker.Delivery) {
		msg := d.Message()
		e, err := ledger.ParseEntry(msg.ID, msg.Payload)
		if err == nil {
			err = m.inTx(ctx, func(tx TTx) error { return m.record(ctx, tx, e) })
		}
		if err != nil {
			p.retries.Add(1)
			_ = d.Nack(ctx, 0)
			return
		}
		p.add(1)
		_ = d.Ack(ctx)
	})
}

// plainBatches runs batches without the inbox: each worker takes up to
// -batch deliveries as the inbox does, writes them with write in one
// transaction, then acks them all at once; a failure nacks them for an
// immediate redelivery. With recordBatch it is plainbatch, consumebatch's
// own limit; with recordEach plaineach, batch's.
func (m *modes[TTx]) plainBatches(write func(ctx context.Context, tx TTx, es []ledger.Entry) error) runFunc {
	return func(ctx context.Context, q queue, p *progress) error {
		m.counts = nil
		src, err := q.source(ctx)
		if err != nil {
			return err
		}
		defer src.Close()
		p.begin()
		return batchWorkers(ctx, m.o.workers, src, m.o.batch, func(ctx context.Context, ds []broker.Delivery) {
			m.settleBatch(ctx, ds, p, write)
		})
	}
}

// recordEach runs record for each entry in turn, as Consume with a
// BatchSize runs its per-message handler in the batch's transaction: two
// statements a message, one round trip each.
func (m *modes[TTx]) recordEach(ctx context.Context, tx TTx, es []ledger.Entry) error {
	for _, e := range es {
		if err := m.record(ctx, tx, e); err != nil {
			return err
		}
	}
	return nil
}

// settleBatch writes ds with write in one transaction and acks them, or
// nacks them all when the transaction fails.
func (m *modes[TTx]) settleBatch(ctx context.Context, ds []broker.Delivery, p *progress, write func(ctx context.Context, tx TTx, es []ledger.Entry) error) {
	es := make([]ledger.Entry, len(ds))
	var err error
	for i, d := range ds {
		if es[i], err = ledger.ParseEntry(d.Message().ID, d.Message().Payload); err != nil {
			break // the workload makes none: the checks will tell
		}
	}
	if err == nil {
		err = m.inTx(ctx, func(tx TTx) error { return write(ctx, tx, es) })
	}
	var acks sync.WaitGroup
	for _, d := range ds {
		acks.Go(func() {
			if err != nil {
				_ = d.Nack(ctx, 0)
				return
			}
			_ = d.Ack(ctx)
		})
	}
	acks.Wait()
	if err != nil {
		p.retries.Add(int64(len(es)))
		return
	}
	p.add(int64(len(es)))
}

// withInbox runs consume on a fresh Inbox whose hooks count the outcomes
// into m.counts and the processed messages into p.
func (m *modes[TTx]) withInbox(consume func(ctx context.Context, ib *inbox.Inbox[TTx], src broker.Source) error) runFunc {
	return func(ctx context.Context, q queue, p *progress) error {
		m.counts = &inbox.Counts{}
		ib, err := inbox.New(ctx, m.driver, &inbox.Config{Consumer: "consumebench", Logger: m.o.logger,
			Hooks: []inbox.Hook{m.counts, processedHook{p}}})
		if err != nil {
			return err
		}
		src, err := q.source(ctx)
		if err != nil {
			return err
		}
		defer src.Close()
		p.begin()
		return consume(ctx, ib, src)
	}
}

// processedHook counts the processed messages on a progress; the inbox
// calls it after COMMIT.
type processedHook struct{ p *progress }

func (h processedHook) OnProcessed(context.Context, *inbox.Event) { h.p.add(1) }

// errNoMode: the mode does not run on this broker and store.
var errNoMode = fmt.Errorf("the mode does not run on this broker and store")
