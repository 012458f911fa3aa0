// Package idempotencybench measures package idempotency's middleware on
// PostgreSQL (pgx) against the same charge without a key and with a key
// table written by hand, in-process and over loopback HTTP. It has a
// benchmark only, apart from the crash tests' package, whose test binary
// also runs as their servers: see bench_test.go for the command.
package idempotencybench
