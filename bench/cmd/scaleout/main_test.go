package main

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a consumer process when the parent
// re-executes it with childEnv set.
func TestMain(m *testing.M) {
	if s := os.Getenv(childEnv); s != "" {
		os.Exit(childMain(s))
	}
	os.Exit(m.Run())
}

// smokeMessages is the messages per measurement of TestSmoke:
// INBOX_SCALEOUT_MESSAGES, else 400.
func smokeMessages(t *testing.T) int {
	n := 400
	if v := os.Getenv("INBOX_SCALEOUT_MESSAGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("INBOX_SCALEOUT_MESSAGES=%q is not a number of messages", v)
		}
	}
	return n
}

// TestSmoke runs every mode on both brokers at N = 1 and 2 with a few
// messages, and requires every measurement to complete and pass its
// checks: no ID twice, the balances, nothing left, a kill at N = 2.
func TestSmoke(t *testing.T) {
	n := smokeMessages(t)
	o, err := parseFlags([]string{"-messages", strconv.Itoa(n), "-procs", "1,2", "-rounds", "1", "-workers", "2",
		"-batch", "20", "-partitions", "8", "-stagger", "100ms", "-max-seconds", "30"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.self = []string{os.Args[0], "-test.run=^$"}
	var stderr strings.Builder
	o.childStderr = &lockedWriter{w: &stderr}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	if stderr.Len() > 0 {
		t.Log("the processes' stderr:\n" + stderr.String())
	}
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.name()+"/"+string(rune('0'+r.Procs))] = true
		checkSmoke(t, r, n)
	}
	for _, tg := range targets(o) {
		for _, n := range o.procs {
			r := &result{Broker: tg.broker, Mode: tg.mode}
			if !seen[r.name()+"/"+string(rune('0'+n))] {
				t.Errorf("%s at N=%d did not run", r.name(), n)
			}
		}
	}
	var report strings.Builder
	printTables(&report, summarize(results), o)
	t.Log(report.String())
}

// checkSmoke checks one measurement of TestSmoke.
func checkSmoke(t *testing.T, r *result, messages int) {
	t.Helper()
	if len(r.Problems) > 0 || r.TimedOut || r.Processed != int64(messages) || r.Rate <= 0 {
		t.Errorf("%s", r.line(1))
	}
	// A batch mode may commit the smoke's few messages before its second
	// process is ready, or within the sampling tick after: then nothing is
	// killed. The per-message modes are slower, and must see the kill.
	finishedEarly := r.Kills == 0 && r.Started == r.Procs && (r.Mode == "batch" || r.Mode == "consumebatch")
	if !isBaseline(r.Mode) && r.Procs >= 2 && !finishedEarly && (r.Kills != 1 || r.Started != r.Procs+1) {
		t.Errorf("%s N=%d: %d kills, %d processes started; want 1 kill and a replacement", r.name(), r.Procs, r.Kills, r.Started)
	}
	if r.Procs == 1 && r.Steady <= 0 {
		t.Errorf("%s N=1: steady rate %v, want the whole run's", r.name(), r.Steady)
	}
	if isBaseline(r.Mode) && (r.Kills != 0 || r.Duplicates != 0 || r.Retries != 0) {
		t.Errorf("%s: a baseline with kills, duplicates or retries: %s", r.name(), r.line(1))
	}
	// CPU ticks are 10 ms: a short measurement may see none of PostgreSQL's.
	if s := r.Sample; s == nil || s.Samples == 0 || s.CPU["machine"] <= 0 || r.Seconds >= 1 && s.CPU["postgres"] <= 0 {
		t.Errorf("%s N=%d: sample %+v, want CPU and wait events sampled", r.name(), r.Procs, s)
	}
	if r.PG.Commits < int64(messages/20) {
		t.Errorf("%s N=%d: %d commits counted, want at least %d", r.name(), r.Procs, r.PG.Commits, messages/20)
	}
}

// TestSummarize checks that each inbox mode is compared with its own
// baseline at the same N.
func TestSummarize(t *testing.T) {
	t.Parallel()
	var results []*result
	rates := map[string]float64{"plaineach": 1000, "plain": 400, "batch": 800, "consume": 300, "queued": 500}
	for mode, rate := range rates {
		for n := 1; n <= 2; n++ {
			b := "kafka"
			if isBaseline(mode) {
				b = ""
			}
			results = append(results, &result{Broker: b, Mode: mode, Procs: n, Rate: rate * float64(n)})
			results = append(results, &result{Broker: b, Mode: mode, Procs: n, Rate: rate * float64(n) * 3})
		}
	}
	want := map[string]float64{"batch": 0.8, "consume": 0.75, "queued": 1.25}
	cells := summarize(results)
	for _, c := range cells {
		if c.Rounds != 2 || c.Mean != 2*rates[c.Mode]*float64(c.Procs) {
			t.Errorf("%s N=%d: mean %v over %d rounds, want %v over 2", c.name(), c.Procs, c.Mean, c.Rounds, 2*rates[c.Mode]*float64(c.Procs))
		}
		if w := want[c.Mode]; math.Abs(c.VsBaseline-w) > 1e-9 {
			t.Errorf("%s N=%d: × baseline %v, want %v", c.name(), c.Procs, c.VsBaseline, w)
		}
	}
	if c := best(cells, "kafka", "batch"); c == nil || c.Procs != 2 {
		t.Errorf("best kafka/batch: %+v, want N=2", c)
	}
}

// TestWaitKey checks the names of the backends' states.
func TestWaitKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ state, typ, event, want, group string }{
		{"active", "", "", "CPU", "cpu"},
		{"active", "IO", "WALSync", "IO:WALSync", "wal"},
		{"active", "LWLock", "WALWrite", "LWLock:WALWrite", "wal"},
		{"active", "Lock", "transactionid", "Lock:transactionid", "lock"},
		{"idle in transaction", "Client", "ClientRead", "in tx (client)", "client"},
		{"idle", "Client", "ClientRead", "idle", "idle"},
	}
	for _, tt := range tests {
		k := waitKey(tt.state, tt.typ, tt.event)
		if k != tt.want {
			t.Errorf("waitKey(%q, %q, %q) = %q, want %q", tt.state, tt.typ, tt.event, k, tt.want)
		}
		if g := groupWaits(map[string]float64{k: 1}); g[tt.group] != 1 {
			t.Errorf("%q grouped as %v, want %s", k, g, tt.group)
		}
	}
}

// TestStats checks the child's report line both ways.
func TestStats(t *testing.T) {
	t.Parallel()
	s := childStats{Processed: 7, Duplicates: 3, Retries: 2, DeadLettered: 1}
	if got, ok := parseStats(s.String()); !ok || got != s {
		t.Errorf("parseStats(%q) = %+v, %v", s.String(), got, ok)
	}
}

// TestNATSServerPID checks that the shared NATS server's process is found
// among other nats-servers, when one runs.
func TestNATSServerPID(t *testing.T) {
	t.Parallel()
	if len(procsNamed("nats-server")) == 0 {
		t.Skip("no nats-server runs here")
	}
	if pid := natsServerPID(envOr("INBOX_NATS_URL", "nats://127.0.0.1:4222")); pid == 0 {
		t.Errorf("no nats-server found for the NATS URL among %v", procsNamed("nats-server"))
	}
}
