// Package crashtest kills real consumer processes (PostgreSQL, with NATS
// JetStream, RabbitMQ, Kafka on an in-process kfake, or SQS on the
// in-process goaws emulator) at every step between the claim and the ack, and
// in the transaction that records a failure or a dead letter, and checks
// that every message's effect committed exactly once and every failing
// message has one dead letter after exactly MaxAttempts attempts. It has
// tests only: see crash_test.go. The default run (CI)
// sends 200 messages per kill point; INBOX_CRASH_MESSAGES sets more:
//
//	INBOX_CRASH_MESSAGES=2000 go test -run TestCrash -v ./tests/crashtest/
package crashtest
