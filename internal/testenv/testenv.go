// Package testenv finds the services that tests run against. A missing
// service skips the test with a clear message, or fails it when
// INBOX_REQUIRE_SERVICES=1 (as in CI).
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// Required reports whether INBOX_REQUIRE_SERVICES=1.
func Required() bool { return os.Getenv("INBOX_REQUIRE_SERVICES") == "1" }

// Unavailable skips tb, or fails it when services are required.
func Unavailable(tb testing.TB, service string, err error) {
	tb.Helper()
	if Required() {
		tb.Fatalf("%s is required (INBOX_REQUIRE_SERVICES=1) but unavailable: %v", service, err)
	}
	tb.Skipf("%s unavailable, skipping (set INBOX_REQUIRE_SERVICES=1 to fail instead): %v", service, err)
}

// Name returns prefix followed by 12 random hex digits, for schemas and
// other per-test names.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// NATSURL returns INBOX_NATS_URL or the default local server.
func NATSURL() string {
	if u := os.Getenv("INBOX_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// AMQPURL returns INBOX_AMQP_URL or the default local RabbitMQ.
func AMQPURL() string {
	if u := os.Getenv("INBOX_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}
