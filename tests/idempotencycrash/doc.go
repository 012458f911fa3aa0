// Package idempotencycrash kills real HTTP servers with SIGKILL while they
// run package idempotency's middleware on PostgreSQL (pgx), and checks
// what their clients' retries get. Each server is this test binary run
// again as a child process; it listens on loopback and charges a ledger
// in the key's transaction.
//
// A server killed after its COMMIT, before the response went out, must
// leave the charge and the stored response: the retry, on a fresh
// server, gets that response replayed. A server killed before its COMMIT
// must leave nothing: the retry runs the handler. A server killed just
// after its response went out must have stored what the client got. A
// randomized run sends requests with distinct keys from concurrent
// clients to two servers that are killed again and again (at these three
// points, and at a random time) and started again; each client retries
// until it gets a 2xx. At the end each key has exactly one charge, and
// every 2xx a client saw for a key carries that charge's response.
//
// It has tests only: see crash_test.go and child_test.go. The default
// randomized run (CI) sends 200 requests; INBOX_IDEMPOTENCY_CRASH_REQUESTS
// sets more:
//
//	INBOX_REQUIRE_SERVICES=1 INBOX_IDEMPOTENCY_CRASH_REQUESTS=5000 go test -count=1 -run TestKilledAtRandom -v ./tests/idempotencycrash/
package idempotencycrash
