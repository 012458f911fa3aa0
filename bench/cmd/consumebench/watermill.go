package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/bench/internal/ledger"
)

// The Watermill mode: Watermill's router, its AMQP subscriber on the
// measurement's quorum queue, and its middleware.Deduplicator, made as
// close to the inbox as Watermill allows:
//
//   - KeyFactory: the message's UUID (the producer's ID, from the
//     _watermill_message_uuid header), not the default Adler-32 of the
//     payload, which takes two messages with one payload for one.
//   - Repository: a PostgreSQL table (wm_dedup), not the default
//     in-memory map, which forgets on restart and is not shared between
//     consumers; watermill-sql has no deduplication repository, so this
//     is ours, in the same shape as the inbox's claim (INSERT ... ON
//     CONFLICT on a primary key), with a 7-day window like the inbox's
//     default retention.
//   - Transaction: an outer middleware begins a transaction and puts it
//     in the message's context; the repository's INSERT and the
//     handler's writes run in it, and it commits before the router acks.
//     Without it (the Deduplicator marks a key before the handler runs,
//     outside its transaction) a handler failure after the mark would
//     lose the message: the redelivery would be skipped as a duplicate.
//
// What the inbox does that this does not: retry backoff (a failure is
// nacked and redelivered at once), attempts and dead letters, payload
// fingerprints. Each of the -workers handlers is a subscription of its own
// (a channel, consuming one message at a time, Watermill's AMQP model),
// with a prefetch of -prefetch / -workers, so that as many deliveries
// wait ahead as for the other modes.
func watermillMode(o *options, pool *pgxpool.Pool, schema string, record func(context.Context, pgx.Tx, ledger.Entry) error) runFunc {
	return func(ctx context.Context, q queue, p *progress) error {
		rq, ok := q.(*rabbitQueue)
		if !ok {
			return errNoMode
		}
		logger := watermill.NewSlogLogger(o.logger)
		cfg := wmamqp.NewDurableQueueConfig(o.amqpURL)
		cfg.Queue.Arguments = amqp.Table{"x-queue-type": "quorum"} // as declared, or the declare fails
		cfg.Consume.Qos.PrefetchCount = max(1, o.prefetch/o.workers)
		sub, err := wmamqp.NewSubscriber(cfg, logger)
		if err != nil {
			return fmt.Errorf("watermill: subscriber: %w", err)
		}
		defer sub.Close()
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return err
		}
		dedup := &middleware.Deduplicator{
			KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil },
			Repository: &pgKeys{table: schema + ".wm_dedup", window: 7 * 24 * time.Hour},
			Timeout:    10 * time.Second,
		}
		handler := wmInTx(pool, p, dedup.Middleware(func(m *message.Message) ([]*message.Message, error) {
			e, err := ledger.ParseEntry(m.UUID, m.Payload)
			if err != nil {
				return nil, err
			}
			t := m.Context().Value(wmTxKey{}).(*wmTx)
			t.ran = true
			return nil, record(m.Context(), t.tx, e)
		}))
		for i := range o.workers {
			router.AddConsumerHandler(fmt.Sprintf("ledger-%d", i), rq.cfg.Queue, sub, func(m *message.Message) error {
				_, err := handler(m)
				return err
			})
		}
		errc := make(chan error, 1)
		go func() { errc <- router.Run(context.WithoutCancel(ctx)) }()
		select {
		case <-router.Running():
		case err := <-errc:
			return fmt.Errorf("watermill: router: %w", err)
		}
		p.begin()
		<-ctx.Done()
		// Close closes the subscriber, whose goroutine may then nack a
		// message handled a moment before rather than ack it (it selects
		// between the two): a moment's grace lets the last acks go out.
		time.Sleep(200 * time.Millisecond)
		err = router.Close()
		<-errc
		return err
	}
}

type wmTxKey struct{}

// wmTx is the transaction of one message, in its context.
type wmTx struct {
	tx  pgx.Tx
	ran bool // the handler ran: not a duplicate
}

// wmInTx runs h in a transaction and commits it, or rolls it back and
// returns the error (the router nacks).
func wmInTx(pool *pgxpool.Pool, p *progress, h message.HandlerFunc) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		ctx := m.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			p.retries.Add(1)
			return nil, err
		}
		t := &wmTx{tx: tx}
		m.SetContext(context.WithValue(ctx, wmTxKey{}, t))
		out, err := h(m)
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			_ = tx.Rollback(ctx)
		}
		if err != nil {
			p.retries.Add(1)
			return nil, err
		}
		if t.ran {
			p.add(1)
		}
		return out, nil
	}
}

// pgKeys is a middleware.ExpiringKeyRepository on a PostgreSQL table,
// written in the message's transaction.
type pgKeys struct {
	table  string
	window time.Duration
}

var _ middleware.ExpiringKeyRepository = (*pgKeys)(nil)

func (r *pgKeys) IsDuplicate(ctx context.Context, key string) (bool, error) {
	t, ok := ctx.Value(wmTxKey{}).(*wmTx)
	if !ok {
		return false, errors.New("watermill: no transaction in the message's context")
	}
	tag, err := t.tx.Exec(ctx, "INSERT INTO "+r.table+" AS k (key, expires_at) VALUES ($1, now() + $2 * interval '1 second') "+
		"ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE k.expires_at < now()",
		key, r.window.Seconds())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 0, nil
}
