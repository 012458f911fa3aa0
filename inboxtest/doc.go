// Package inboxtest tests a program's own message handlers against the
// inbox's promise: for every message, the handler's writes inside the
// inbox's transaction commit once, however often the broker delivers it.
//
// Check runs a handler on the program's own *inbox.Inbox (on the database
// the handler writes to: PostgreSQL through pgenv-style test schemas, or
// SQLite through package sqlitetest) and delivers every message in the
// ways a broker does and a process fails:
//
//   - rolled back after the handler returned (a crash before COMMIT): the
//     state must not change; a handler that writes outside the
//     transaction it is given (a second connection, a cache, a counter,
//     an HTTP call) fails here;
//   - through inbox.Consume, twice at once to two workers (a rebalance),
//     with the first ack of each copy lost (a crash between COMMIT and
//     ack): the handler must run once, the redeliveries be acked as
//     duplicates;
//   - again, twice one after the other and twice at once: each a
//     Duplicate, the handler not run, the state unchanged.
//
// The state is what Options.State reads from the database (a balance, a
// count of rows, the rows themselves), compared with reflect.DeepEqual.
// Check reports with t.Errorf, naming the message, the delivery and the
// states before and after; a handler's error or panic is reported with
// its delivery (a panic with its stack).
//
//	func TestCreditOnce(t *testing.T) {
//		ib := newInbox(t) // the test's own schema, migrated
//		inboxtest.Check(t.Context(), t, ib, credit, []inbox.Message{
//			{ID: "pay-1", Payload: []byte(`{"account":"a","amount":10}`)},
//		}, &inboxtest.Options{State: func(ctx context.Context) (any, error) {
//			var balance int64
//			err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 'a'`).Scan(&balance)
//			return balance, err
//		}})
//	}
//
// CheckBatch does the same for a batch handler (inbox.ProcessBatchFunc,
// inbox.ConsumeBatch).
//
// Broker is an in-memory broker.Publisher and broker.Source for tests of
// a consumer built on inbox.Consume: it redelivers what is not acked
// within its AckWait (or when its Source closes), loses acks and
// duplicates messages on demand, and records what was acked, nacked (with
// delays) and termed, so that a test can assert that nothing was lost
// (Broker.Unsettled, Broker.WaitSettled). It passes the broker
// conformance suite, broker/brokertest.
//
// Package inboxtest imports no database driver: a program on PostgreSQL
// that tests with it downloads no SQLite. Package sqlitetest, which gives
// a test an inbox on a fresh SQLite file, does.
package inboxtest
