package main

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
)

// TestRetentionZero: -retention 0 means the default retention (7 days) in
// prune and check, as 0 does in PrunerConfig.Retention,
// ConsumerConfig.Retention and inbox.CheckRetention.
func TestRetentionZero(t *testing.T) {
	t.Parallel()
	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "a"})
	if out, err := ib.Process(context.Background(), inbox.Message{ID: "m-1", Payload: []byte("p")}, e.effect); out.Status != inbox.Processed {
		t.Fatalf("process: %v, %v", out.Status, err)
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := e.db.QueryRow("SELECT count(*) FROM inbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stdout string
	}{
		{"prune", []string{"prune", "-retention", "0"}, "pruned 0 rows"},
		{"check", []string{"check", "-retention", "0"}, "retention:  168h0m0s, not compared"},
		{"check -json", []string{"check", "-json", "-retention", "0"}, `"retention": "168h0m0s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append(tc.args, e.flags...)...)
			if code != 0 || !strings.Contains(stdout, tc.stdout) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q (0 is the default retention, 7 days)", tc.args, code, stdout, stderr, tc.stdout)
			}
			if n := rows(); n != 1 {
				t.Errorf("%v: %d inbox rows left, want the row of a second ago kept", tc.args, n)
			}
		})
	}
}
