// Package inbox processes messages from an at-least-once broker (Kafka,
// RabbitMQ, NATS JetStream, SQS) effectively once: the Inbox pattern.
//
// # The guarantee, in honest words
//
// A broker delivers every message at least once: a consumer that crashes
// after its database commit but before its ack gets the message again, and
// a rebalance can hand one message to two consumers at the same time. The
// inbox makes that safe. For every message with an ID, the handler's writes
// inside the inbox's transaction commit at most once per (consumer, ID), and
// at least once as long as the broker keeps redelivering: effectively-once
// processing. Delivery itself stays at-least-once.
//
// Effects outside the transaction (an HTTP call, an email) are not covered:
// a handler can run more than once when it fails and is retried. Send them
// through a transactional outbox, or give them IdempotencyKey(msg, purpose)
// so that the other system can deduplicate them. Inbox and outbox together
// give effectively-once end to end; nothing gives exactly-once delivery.
//
// # How
//
// Process opens a transaction (READ COMMITTED, with a lock timeout) and in
// one statement inserts the message's ID into the inbox table, whose primary
// key (consumer, message_id) is the guard: INSERT ... ON CONFLICT DO NOTHING
// RETURNING. A row back: the message is new, the handler runs in the same
// transaction, and both commit together. No row: it is a duplicate and the
// handler does not run. There is no check-then-insert: two racing
// deliveries of one ID both try to insert, the database lets one commit, and
// the other waits for it and then sees a duplicate (or, if the first rolls
// back, claims the message itself).
//
// Ack the broker only after Process returns an outcome whose Ack method is
// true: then the message's fate is committed. Process returns an error
// exactly when it does not (Retry: nothing committed, redeliver after
// Outcome.Delay), so "if err != nil, nack" is right.
//
// # Failures
//
// A handler error rolls back its writes and the claim together; the failed
// attempt is counted in a transaction of its own, so the count survives; the
// message is retried with exponential backoff, and dead-lettered (payload,
// headers and error kept, replayable) at Config.MaxAttempts or at once for a
// Permanent error. A handler's own timeout counts like any failure.
//
// A transient failure, a database error that the store recognizes in the
// handler's queries (a deadlock, a serialization failure, a lock timeout, a
// busy SQLite) or an error marked with a Retryable() bool method, does not
// count towards MaxAttempts: such failures are counted apart, back off on
// their own count, and dead-letter the message at
// Config.MaxTransientFailures. The store alone decides which database
// errors are transient.
//
// An error of the inbox's own statements (a lock timeout behind a racing
// delivery, a lost connection, a COMMIT of unknown outcome) is a Retry that
// counts nothing; its delay grows while the database keeps failing. One that
// no retry fixes (tables missing, permission denied) wraps ErrUnrecoverable
// and stops Consume. New refuses tables that are not migrated
// (ErrNotMigrated).
//
// Config.Logger says at the default level what happens: dead letters at
// WARN, retries at INFO (rate-limited), database failures at WARN or ERROR
// and their end at INFO.
//
// Old inbox rows are deleted by a Pruner after the retention (7 days by
// default), which must be longer than the broker's redelivery window.
//
// # Stores
//
// An Inbox is generic over the transaction type its store uses:
// store/pgxstore (PostgreSQL, pgx.Tx) and store/sqlstore (database/sql,
// *sql.Tx, with a dialect from store/sqlstore/postgres, .../mysql or
// .../sqlite, each linking only its own driver). Create the tables with Migrate, or apply yourself
// the script of pgxstore.MigrationScript or sqlstore.MigrationScript
// (inbox migrate -print), which records the versions as Migrate does.
//
//	driver, _ := pgxstore.New(pool, nil)
//	_ = inbox.Migrate(ctx, driver)
//	ib, _ := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
//	out, err := ib.Process(ctx, inbox.Message{ID: id, Payload: body},
//		func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
//			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account)
//			return err
//		})
//	if err != nil { // Retry: nothing committed
//		return delivery.Nack(ctx, out.Delay)
//	}
//	return delivery.Ack(ctx) // processed, duplicate or dead-lettered: committed
//
// A service that owns its transactions uses ProcessTx with its own
// transaction instead.
package inbox
