// Package inboxtest tests a program's own message handlers against the
// inbox's promise.
//
// The promise is this. For every message, the handler's writes inside the
// inbox's transaction commit once, however often the broker delivers it.
//
// # Check
//
// [Check] runs a handler on the program's own *inbox.Inbox, on the
// database the handler writes to. Package [pgtest] gives each test a
// PostgreSQL schema of its own, and package [sqlitetest] a SQLite file.
// Check delivers every message in the ways a broker does and a process
// fails.
//   - It rolls a delivery back after the handler returned, as a crash before
//     COMMIT does. The state must not change. A handler that writes outside
//     the transaction it is given fails here. Examples are a second
//     connection, a cache, a counter and an HTTP call.
//   - It delivers through inbox.Consume, twice at once to two workers, as a
//     rebalance does. The first ack of each copy is lost, as in a crash
//     between COMMIT and ack. The handler must run once, and the
//     redeliveries must be acked as duplicates.
//   - It delivers again, twice one after the other and twice at once. Each
//     must be a Duplicate. The handler must not run, and the state must not
//     change.
//
// The state is what [Options.State] reads from the database. It may be a
// balance, a count of rows or the rows themselves. Check compares states
// with reflect.DeepEqual. It reports with t.Errorf, naming the message, the
// delivery and the states before and after. A handler's error or panic is
// reported with its delivery. A panic comes with its stack.
//
//	func TestCreditOnce(t *testing.T) {
//		ib, pool := pgtest.New(t, nil) // the test's own schema, migrated
//		inboxtest.Check(t.Context(), t, ib, credit, []inbox.Message{
//			{ID: "pay-1", Payload: []byte(`{"account":"a","amount":10}`)},
//		}, &inboxtest.Options{State: func(ctx context.Context) (any, error) {
//			var balance int64
//			err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'a'`).Scan(&balance)
//			return balance, err
//		}})
//	}
//
// [CheckBatch] does the same for a batch handler, as given to
// inbox.ProcessBatchFunc and inbox.ConsumeBatch.
//
// # Broker
//
// [Broker] is an in-memory broker.Publisher and broker.Source. It is for
// tests of a consumer built on inbox.Consume. It redelivers what is not
// acked within its AckWait, or when its Source closes. It loses acks and
// duplicates messages on demand. It records what was acked, nacked with
// their delays, and termed. A test can thus assert that nothing was lost,
// with [Broker.Unsettled] and [Broker.WaitSettled]. Broker passes the
// broker conformance suite, broker/brokertest.
//
// # Dependencies
//
// Package inboxtest imports no database driver. A program on PostgreSQL
// that tests with it downloads no SQLite. Package [pgtest] gives a test an
// inbox in a fresh PostgreSQL schema, and imports pgx. Package [sqlitetest]
// gives a test an inbox on a fresh SQLite file, and imports SQLite's
// driver.
//
// [pgtest]: https://pkg.go.dev/github.com/inboxkit/inbox/inboxtest/pgtest
// [sqlitetest]: https://pkg.go.dev/github.com/inboxkit/inbox/inboxtest/sqlitetest
package inboxtest
