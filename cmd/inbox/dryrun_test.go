package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// TestDeadLettersDryRun: discard -all -dry-run and replay -all -dry-run
// print the dead letters the filters select, and their count (text or
// JSON), and change nothing: every dead letter and dead row stays, and
// replay does not even connect to its broker (an address where none
// listens). -dry-run without -all is a wrong command line.
func TestDeadLettersDryRun(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := openDB(t, dialect)
			a := e.inbox(t, inbox.Config{Consumer: "a"})
			b := e.inbox(t, inbox.Config{Consumer: "b"})
			var all []int64
			for i := range 3 {
				all = append(all, deadLetterOf(t, e, a, inbox.Message{ID: fmt.Sprintf("a-%d", i), Type: "pay", Payload: []byte("p")}))
			}
			other := deadLetterOf(t, e, b, inbox.Message{ID: "b-0", Type: "pay", Payload: []byte("p")})
			all = append(all, other)
			unchanged := func(what string) {
				t.Helper()
				for _, id := range all {
					wantDeadRow(t, e, id, what)
				}
			}
			nats := []string{"-nats", "nats://127.0.0.1:1", "-subject", "s"}
			args := func(cmd string, extra ...string) []string {
				out := append([]string{"dead-letters", cmd}, e.flags...)
				if cmd == "replay" {
					out = append(out, nats...)
				}
				return append(out, extra...)
			}

			for _, cmd := range []string{"discard", "replay"} {
				code, stdout, stderr := runCmd(t, args(cmd, "-all", "-consumer", "a", "-dry-run")...)
				want := fmt.Sprintf("dry run: would %s 3 dead letters", cmd)
				if code != 0 || !strings.Contains(stdout, want) || !strings.HasSuffix(stdout, "nothing changed\n") {
					t.Fatalf("%s -dry-run: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and %q", cmd, code, stdout, stderr, want)
				}
				for i, id := range all[:3] {
					if !regexp.MustCompile(fmt.Sprintf(`(?m)^%d +a +a-%d +pay `, id, i)).MatchString(stdout) {
						t.Errorf("%s -dry-run: dead letter %d (a-%d) not listed:\n%s", cmd, id, i, stdout)
					}
				}
				if regexp.MustCompile(fmt.Sprintf(`(?m)^%d `, other)).MatchString(stdout) {
					t.Errorf("%s -dry-run: dead letter %d of consumer b listed:\n%s", cmd, other, stdout)
				}
				unchanged(cmd + " -dry-run")

				var out struct {
					DryRun  bool             `json:"dry_run"`
					Count   int              `json:"count"`
					Discard []deadLetterJSON `json:"would_discard"`
					Replay  []deadLetterJSON `json:"would_replay"`
				}
				cmdJSON(t, &out, 0, args(cmd, "-all", "-consumer", "a", "-error", "broken", "-dry-run", "-json")...)
				got := out.Discard
				if cmd == "replay" {
					got = out.Replay
				}
				var ids []int64
				for _, j := range got {
					ids = append(ids, j.ID)
				}
				if !out.DryRun || out.Count != 3 || fmt.Sprint(ids) != fmt.Sprint(all[:3]) {
					t.Fatalf("%s -dry-run -json: %+v; want dry_run, count 3, would_%s %v", cmd, out, cmd, all[:3])
				}
				unchanged(cmd + " -dry-run -json")

				withID := []string{"-dry-run", fmt.Sprint(all[0])}
				if cmd == "replay" {
					withID = append(withID, "-consumer", "a")
				}
				if code, _, stderr := runCmd(t, args(cmd, withID...)...); code != exitUsage ||
					!strings.Contains(stderr, "-dry-run goes with -all") {
					t.Fatalf("%s -dry-run with an ID: exit %d, stderr %q; want 2", cmd, code, stderr)
				}
			}

			// Nothing selected: a count of 0.
			code, stdout, _ := runCmd(t, args("discard", "-all", "-type", "none", "-dry-run")...)
			if code != 0 || stdout != "dry run: would discard 0 dead letters; nothing changed\n" {
				t.Fatalf("discard -dry-run of none: exit %d, stdout %q", code, stdout)
			}
			// The same command without -dry-run does discard them.
			code, stdout, _ = runCmd(t, args("discard", "-all", "-consumer", "a")...)
			if code != 0 || strings.Count(stdout, "discarded dead letter") != 3 {
				t.Fatalf("discard -all: exit %d, stdout %q; want 3 discarded", code, stdout)
			}
			left, err := e.driver.DeadLetterSearch(context.Background(), &store.DeadLetterSearchParams{Limit: 10})
			if err != nil || len(left) != 1 || left[0].ID != other {
				t.Fatalf("after discard -all: %d left, %v; want only %d", len(left), err, other)
			}
		})
	}
}
