// Package crashtest kills real consumer processes (PostgreSQL, with NATS
// JetStream or RabbitMQ) at every step between the claim and the ack, and
// checks that every message's effect committed exactly once. It has tests only: see crash_test.go. The default run (CI)
// sends 200 messages per kill point; INBOX_CRASH_MESSAGES sets more:
//
//	INBOX_CRASH_MESSAGES=2000 go test -run TestCrash -v ./internal/crashtest/
package crashtest
