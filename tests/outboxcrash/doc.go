// Package outboxcrash runs the transactional outbox end to end, with
// real processes killed by SIGKILL: a producer writes orders and their
// outbox rows in one PostgreSQL transaction each (some rolled back on
// purpose); two competing relays publish them to NATS JetStream; a
// consumer applies them through its inbox and, in the same transaction,
// writes a follow-up to its own outbox with outbox.DerivedID; two more
// relays publish the follow-ups to RabbitMQ; a third stage applies them
// through its inbox. Relays die after a claim, after publishing before the
// delete, in the middle of a batch and at random; consumers die at random;
// the producer dies before a COMMIT. At the end each stage's ledger holds
// the producer's committed orders exactly once, and the outboxes are
// empty with nothing parked. The stream's duplicate window is short, so
// that the relays' re-publishes reach stage 2's inbox rather than being
// dropped by JetStream. The kill points are wrappers in the child
// processes (of pgxstore's driver as the relay's store.OutboxRelayer, and
// of the relay's PublishFunc); each kill plan is drawn by the parent from
// a seed it logs. It has tests only: see crash_test.go and child_test.go.
//
// The default run (CI) writes 1,000 orders and kills at least 30
// processes; INBOX_OUTBOX_CRASH_MESSAGES sets more:
//
//	INBOX_REQUIRE_SERVICES=1 INBOX_OUTBOX_CRASH_MESSAGES=10000 go test -count=1 -run TestOutboxCrash -v -timeout 30m ./tests/outboxcrash/
package outboxcrash
