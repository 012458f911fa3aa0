package main

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every mode once on RabbitMQ and PostgreSQL with a few
// messages, and requires every measurement to complete and pass its
// checks.
func TestSmoke(t *testing.T) {
	o, err := parseFlags([]string{"-brokers", "rabbitmq", "-stores", "postgres", "-rows", "0", "-messages", "300",
		"-rounds", "1", "-max-seconds", "20", "-modes", strings.Join(allModes, ",")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	results, err := run(ctx, o, &log)
	if errors.Is(err, errUnavailable) {
		if os.Getenv("INBOX_REQUIRE_SERVICES") == "1" {
			t.Fatalf("a service is required (INBOX_REQUIRE_SERVICES=1) but unavailable: %v", err)
		}
		t.Skipf("skipping (set INBOX_REQUIRE_SERVICES=1 to fail instead): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + log.String())
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Mode] = true
		if len(r.Problems) > 0 || r.TimedOut || r.Processed != 300 || r.Left != 0 {
			t.Errorf("%s: %s", r.Mode, r.line(1))
		}
		if r.Mode == "ack" || r.Mode == "ackbatch" {
			continue
		}
		// Every database mode's traffic is counted; plaineach sends its
		// two statements a message one at a time, each a round trip.
		switch tr := r.Traffic; {
		case tr == nil || tr.Trips == 0 || tr.Statements < 300:
			t.Errorf("%s: traffic %+v, want its round trips and statements counted", r.Mode, tr)
		case r.Mode == "plaineach" && (tr.Trips < 2*300 || tr.Statements < 2*300):
			t.Errorf("plaineach: traffic %+v, want at least 600 round trips and statements for 300 messages", *tr)
		}
	}
	for _, m := range allModes {
		if !seen[m] {
			t.Errorf("mode %s did not run", m)
		}
	}
}

// TestSummarize checks that each inbox mode is compared with its own
// writes without the inbox, and the round trips per message.
func TestSummarize(t *testing.T) {
	t.Parallel()
	var results []*result
	for i, mode := range []string{"plain", "plainbatch", "plaineach", "consume", "batch", "consumebatch"} {
		results = append(results, &result{Broker: "rabbitmq", Store: "postgres", Mode: mode, Rate: float64(1000 * (i + 1)),
			AtStop: 100, Traffic: &traffic{Trips: int64(100 * (i + 1))}})
	}
	want := map[string]struct {
		plain string
		ratio float64
	}{"consume": {"plain", 4}, "batch": {"plaineach", 5.0 / 3}, "consumebatch": {"plainbatch", 3}}
	for _, c := range summarize(results) {
		w := want[c.Mode]
		if c.PlainMode != w.plain || (w.plain != "" && math.Abs(c.VsPlain-w.ratio) > 1e-9) {
			t.Errorf("%s: × no inbox %v to %q, want %v to %q", c.Mode, c.VsPlain, c.PlainMode, w.ratio, w.plain)
		}
		if c.TripsPerMsg != c.Mean/1000 {
			t.Errorf("%s: %v round trips per message, want %v", c.Mode, c.TripsPerMsg, c.Mean/1000)
		}
	}
}
