// Package inbox processes messages from an at-least-once broker effectively
// once. This is the Inbox pattern. It works with Kafka, RabbitMQ, NATS
// JetStream and SQS.
//
// # The guarantee, in honest words
//
// A broker delivers every message at least once. A consumer that crashes
// after its database commit but before its ack gets the message again. A
// rebalance can hand one message to two consumers at the same time. The
// inbox makes that safe.
//
// For every message with an ID, the handler's writes inside the inbox's
// transaction commit at most once per consumer and ID. They commit at least
// once as long as the broker keeps redelivering. That is effectively-once
// processing. Delivery itself stays at-least-once.
//
// Effects outside the transaction are not covered, such as an HTTP call or
// an email. A handler can run more than once when it fails and is retried.
// Send such effects through a transactional outbox. Or give them an
// [IdempotencyKey], so that the other system can deduplicate them. Inbox and
// outbox together give effectively-once end to end. Nothing gives
// exactly-once delivery.
//
// # How it works
//
// [Inbox.Process] opens a transaction at READ COMMITTED, with a lock
// timeout. In one statement it inserts the message's ID into the inbox
// table. The table's primary key, consumer and message_id, is the guard:
//
//	INSERT ... ON CONFLICT DO NOTHING RETURNING
//
// A row back means the message is new. The handler runs in the same
// transaction, and both commit together. No row means a duplicate, and the
// handler does not run.
//
// There is no check-then-insert. Two racing deliveries of one ID both try to
// insert, and the database lets one commit. The other waits for it and then
// sees a duplicate. If the first rolls back, the other claims the message
// itself.
//
// # Outcomes and acks
//
// Each message gets an [Outcome]. Its [Status] is one of four.
//
//   - [Processed] means the handler's writes and the claim committed.
//   - [Duplicate] means the message was processed or dead-lettered before.
//   - [DeadLettered] means the message failed for good, or is invalid.
//   - [Retry] means nothing of the message committed.
//
// Ack the broker only when [Outcome.Ack] is true. The message's fate is then
// committed. Process returns an error exactly when it is not. The outcome is
// then Retry: redeliver the message after [Outcome.Delay]. So the habitual
// code is right.
//
//	if err != nil {
//		return delivery.Nack(ctx, out.Delay)
//	}
//	return delivery.Ack(ctx)
//
// [Consume] does this for each delivery of a broker. After [Inbox.ProcessTx],
// ack only once the caller's COMMIT succeeded.
//
// # Failures and retries
//
// A handler error rolls back its writes and the claim together. The failed
// attempt is counted in a transaction of its own, so the count survives. The
// message is retried with exponential [Backoff]. It is dead-lettered at
// [Config.MaxAttempts], or at once for a [Permanent] error. The dead letter
// keeps the payload, headers and error, and [Inbox.Replay] runs it again. A
// handler's own timeout counts like any failure. So does a panic, as a
// [PanicError].
//
// A handler that returns nil has failed all the same when its COMMIT
// certainly fails. It may have swallowed an error that aborted the
// transaction, left a result set open, or broken a constraint checked at
// COMMIT. [Outcome.Err] then says why.
//
// Transient failures are counted apart. A failure is transient when the
// store recognizes a database error in the handler's queries. Examples are a
// deadlock, a serialization failure, a lock timeout and a busy SQLite. An
// error marked with a Retryable() bool method is transient too, as
// [IsRetryable] tells. Transient failures do not count towards MaxAttempts.
// They back off on their own count. They dead-letter the message at
// [Config.MaxTransientFailures]. The store alone decides which database
// errors are transient.
//
// An error of the inbox's own statements is a Retry that counts nothing.
// Examples are a lock timeout behind a racing delivery, a lost connection
// and a COMMIT of unknown outcome. Its delay grows while the database keeps
// failing. An error that no retry fixes wraps [ErrUnrecoverable] and stops
// Consume. Missing tables and a denied permission are such errors. [New]
// refuses tables that are not migrated, with [ErrNotMigrated].
//
// An empty or oversized ID makes a message invalid. It is dead-lettered at
// once with its payload, and [Outcome.Err] is an [*InvalidMessageError]. A
// redelivery of the same invalid message is a Duplicate, so that it leaves
// one dead letter.
//
// # Transactions handlers must not end
//
// A [Handler] must not commit or roll back its transaction. The inbox ends
// it. A handler that does has failed with [ErrTxEndedByHandler]. Its claim
// and writes may or may not have committed.
//
// The attempt counts as a handler failure. The outcome is Retry, or
// DeadLettered at MaxAttempts. It is Duplicate when the dead letter finds the
// handler's commit. A redelivery is then a Duplicate if the writes did
// commit. It runs the handler again if they did not.
//
// In a batch, a handler's ROLLBACK undoes the batch. A handler's COMMIT
// commits the claims of the whole batch, with the writes made before it.
// Those messages are done, and Duplicate when redelivered. The claims of the
// messages whose handlers had not yet run are deleted again, so that they
// are processed. The pass with savepoints then catches the handler and
// counts it. Its outcome is Retry, with an error wrapping
// ErrTxEndedByHandler, and the batch goes on without it. After a ROLLBACK,
// the claims deleted are none. The exception is a redelivery of the same
// message that claimed it meanwhile. That message is then processed again.
//
// A [BatchHandler] given several messages that commits its transaction
// commits all their claims. The inbox cannot tell which messages it wrote
// before.
//
// [Inbox.ProcessTx] on sqlstore catches a handler that ends the caller's
// transaction. pgxstore cannot tell it of a caller's pgxpool.Tx without a
// round trip. It then reports Processed, and the caller's COMMIT fails.
//
// # The caller's transaction
//
// [Inbox.ProcessTx] works in a transaction the caller owns. It neither
// commits nor rolls back. Commit when [Outcome.Commit] is true, and roll
// back otherwise. Then ack when [Outcome.Ack] is true, after the COMMIT
// succeeded if there was one. The error is nil exactly then, as for
// Process.
//
//   - Processed. Commit. The claim and the handler's writes persist
//     together.
//   - Duplicate. Roll back and ack.
//   - Retry after a handler failure, or DeadLettered. Commit.
//   - Retry after a database error. Roll back.
//
// After a handler failure, the claim and the handler's writes were rolled
// back to a savepoint. The failure or the dead letter was recorded in the
// transaction after it. Committing keeps the count. It also keeps what the
// transaction wrote before ProcessTx. So call ProcessTx first, or write in
// the handler. Recording the failure in the caller's transaction cannot wait
// for a second connection. The caller's own connection may have exhausted
// the pool.
//
// A handler that returns nil has failed when a failed statement aborted or
// ended its transaction. PostgreSQL aborts the transaction at a failed
// statement. MySQL rolls it back on a deadlock. A handler that left a result
// set open on pgx has failed too. The outcome is that of a handler error,
// never Processed.
//
// Three failures cannot be recorded in the caller's transaction.
//
//   - A handler left a result set open on pgx. Its connection cannot run a
//     statement, and pgx closes it.
//   - The database refused a dead letter, as [DeadLetter.PayloadLost] tells.
//   - A handler committed or rolled back the transaction itself.
//
// ProcessTx then rolls the transaction back itself. A later Rollback by the
// caller is harmless. ProcessTx records the failure in a transaction of its
// own, and Commit() is false.
//
// That transaction takes a connection of the store's pool. Rolling back
// gives the caller's connection back when the transaction came from the
// pool, as with pgxpool.Pool.Begin or sql.DB.BeginTx. It does not when it
// came from a connection the caller holds, a pgxpool.Conn or a sql.Conn. The
// pool then needs room for one more, or ProcessTx waits until ctx ends.
//
// Hooks see Processed before the caller's COMMIT.
//
// # Batches
//
// [Inbox.ProcessBatch] processes many messages in one transaction. One
// statement claims every ID. The IDs are sorted, so that two overlapping
// batches wait for each other instead of deadlocking. The handler runs for
// each new message in the batch's order. One COMMIT ends it.
//
// The rules of Process apply to each message. A duplicate is a Duplicate,
// whether of an earlier batch, of another consumer's claim, or of an ID
// twice in the batch. Of an ID twice, the first counts. An invalid message
// is dead-lettered with its payload.
//
// A failing handler fails only its message. The batch runs again, with a
// savepoint before each message. The failing message's claim and writes are
// undone, and the others commit. Its failure counts as Process counts it. A
// transient database error in a handler, such as a deadlock, is no
// exception. It counts as a transient failure of that message alone.
//
// Some failures fail the whole batch. An error of the inbox's own
// statements does. So does a deadlock on MySQL and MariaDB, which rolls back
// the whole transaction. Every message then gets Retry, and the error is
// returned. The deadlocked message's transient failure is counted.
//
// [Inbox.ProcessBatchFunc] gives all the new messages to one
// [BatchHandler]. When it fails, it is called again with one message at a
// time, each behind a savepoint, to find the failing ones.
//
// A handler that updates rows that other batches update too should update
// them in a stable order, sorted by key. An account's balance and a counter
// are such rows. Two batches then wait for each other instead of
// deadlocking.
//
// [Consume] runs batches when [ConsumerConfig.BatchSize] is above 1.
// [ConsumeBatch] runs them by default. Their batches adapt to lock
// conflicts, unless [ConsumerConfig.FixedBatchSize] is set.
//
//   - A batch whose handlers or COMMIT meet a lock conflict is rolled back.
//     A deadlock, a serialization failure and a lock timeout are such
//     conflicts.
//   - Its messages run again in halves, each in a transaction of its own.
//     None of them counts as failed.
//   - The consumer then runs fewer batches at once, down to one. If
//     conflicts go on, as with other processes, it runs smaller ones. It
//     goes down to one message per transaction.
//   - After a wait without conflicts it steps back up, size first, then
//     width. The wait is one second at least. A step up that meets a
//     conflict within two waits makes the wait four times as long, up to
//     five minutes. A step up that holds for a whole wait halves it. The
//     slow start's steps count too, so its first conflict sets four
//     seconds.
//   - A consumer starts with one batch at a time. It doubles that every
//     quarter second, as batches end, until the first conflict.
//   - Deliveries waiting for their batch's turn keep their leases.
//
// Each split is logged at WARN, at most one line per 10 s. It is told to a
// [BatchSplitHook]. A conflict in a batch that is not split is logged the
// same way. That happens with FixedBatchSize, and in [Inbox.ProcessBatch]. A BatchHandler that updates shared rows in a stable
// order does not deadlock, and keeps its batches.
//
// # Many message types
//
// A [Router] gives each message type on one source its own handler. [Route]
// adds one, with the payload decoded into a Go type, from JSON by default.
// A message of a type without a route is dead-lettered, or goes to
// [RouterConfig.Fallback]. A payload that does not decode is dead-lettered
// at once. Both dead letters keep the payload. [Router.Handler] suits
// [Consume] and [Inbox.ProcessTx], and [Router.BatchHandler] suits
// [ConsumeBatch].
//
// # Per database
//
// On PostgreSQL, a failed statement aborts the transaction. A handler that
// swallows the statement's error and returns nil has then failed.
//
// On MySQL and MariaDB, [Config.LockTimeout] counts whole seconds, so it is
// rounded up. A deadlock rolls back the whole transaction, and in a batch it
// fails the whole batch. A handler must return a deadlock's error, not
// swallow it. [Inbox.ProcessTx] notices a swallowed one. [Inbox.Process]
// cannot, and would commit the handler's later writes without the claim.
// Another failed statement does not abort the transaction. A handler that
// swallows its error and returns nil commits the claim without that
// statement's write. The database may refuse a dead letter larger than
// max_allowed_packet. The dead letter is then kept without its payload and
// headers, as [DeadLetter.PayloadLost] tells.
//
// On SQLite, [Config.LockTimeout] bounds the wait for the database's write
// lock. A failed statement does not abort the transaction, as on MySQL. A busy SQLite is a transient failure. A prune batch that finds the
// database busy is tried again, as [Pruner.Prune] tells.
//
// With pgx, a handler that leaves a result set open has failed. Only
// pgxstore can run [Inbox.ProcessQueued] and [ConsumeQueued].
//
// # Hooks
//
// Hooks are optional single-method interfaces. A [Hook] in [Config.Hooks]
// or [PrunerConfig.Hooks] implements those it cares about. [New] and
// [NewPruner] reject one that implements none.
//
// Hooks run synchronously on the processing goroutine, after COMMIT and
// before the ack. They must be quick. A hook's panic is recovered and
// logged at ERROR. The outcome stands.
//
// A [StartHook] is told of each message before its claim. Every OnStart is
// followed by exactly one outcome hook for the same message, with the
// context that OnStart returned. The outcome hooks are [ProcessedHook],
// [DuplicateHook], [RetryHook] and [DeadLetteredHook]. A
// [FingerprintConflictHook] runs before OnDuplicate, when it applies.
//
// [Counts] is a ready-made hook that counts outcomes. For metrics, see the
// OpenTelemetry package, otelinbox.
//
// # Logging
//
// [Config.Logger] says at the default level what happens.
//
//   - Dead letters are logged at WARN.
//   - Retries are logged at INFO, at most one line per 10 s.
//   - Database failures are logged at WARN, at most one line per 10 s. One
//     that no retry fixes is logged at ERROR. A line at INFO says when the
//     database answers again after a logged failure.
//   - Reused IDs are logged at WARN.
//   - Batches split after a lock conflict are logged at WARN, at most one
//     line per 10 s.
//
// The next line let through says how many lines the limit left out.
//
// [ConsumerConfig.Logger] receives failed acks and nacks, and the error
// that stops Consume.
//
// # Pruning
//
// A [Pruner] deletes old inbox rows after the retention, 7 days by default.
// The retention must be longer than the broker's redelivery window. A
// message redelivered after its row was pruned is processed again. Consume
// compares the two at start, with [CheckRetention]. Dead letters are never
// pruned.
//
// # Stores
//
// An Inbox is generic over the transaction type of its store.
//
//   - store/pgxstore uses pgx.Tx on PostgreSQL.
//   - store/sqlstore uses *sql.Tx, with a dialect from
//     store/sqlstore/postgres, store/sqlstore/mysql or store/sqlstore/sqlite.
//     Each dialect links only its own driver.
//
// Create the tables with [Migrate]. Or apply the script of
// pgxstore.MigrationScript or sqlstore.MigrationScript yourself. The command
// inbox migrate -print prints it. The script records the versions as Migrate
// does.
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
// A service that owns its transactions uses [Inbox.ProcessTx] with its own
// transaction instead.
package inbox
