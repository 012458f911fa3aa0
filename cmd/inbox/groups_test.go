package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
)

// TestErrorGroups: stats counts dead letters and failed attempts by error
// group, so that errors that differ only in an ID are one line, and a
// group names what inbox dead-letters list -group selects; show finds a
// dead letter by its message's ID. On each database.
func TestErrorGroups(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := openDB(t, dialect)
			billing, audit := e.inbox(t, inbox.Config{Consumer: "billing"}), e.inbox(t, inbox.Config{Consumer: "audit"})
			fail := func(ib *inbox.Inbox[*sql.Tx], id, text string) {
				t.Helper()
				out, err := ib.Process(ctx, inbox.Message{ID: id, Type: "charge", Payload: []byte("p")},
					func(context.Context, *sql.Tx, *inbox.Message) error { return inbox.Permanent(errors.New(text)) })
				if out.Status != inbox.DeadLettered {
					t.Fatalf("%s: %v, %v; want DeadLettered", id, out.Status, err)
				}
			}
			// Four groups in billing; the fourth is the largest, so that
			// -top 3 cannot hide it as a cut of error texts did.
			for i := range 4 {
				fail(billing, fmt.Sprintf("poison-%05d", i), fmt.Sprintf("charge poison-%05d: card declined", i))
			}
			fail(billing, "x-1", "card expired")
			fail(billing, "x-2", "gateway 3f2504e0-4f89-11d3-9a0c-0305e82c3301 down")
			fail(billing, "x-3", "insufficient funds")
			fail(audit, "poison-00000", "charge poison-00000: card declined") // the same message ID in another consumer

			code, stdout, stderr := runCmd(t, append([]string{"stats", "-consumer", "billing", "-top", "3"}, e.flags...)...)
			if code != 0 || !strings.Contains(squash(stdout), "4× charge poison-<n>: card declined") || !strings.Contains(stdout, "gateway <uuid> down") {
				t.Errorf("stats: exit %d\n%s%s\nwant 4 dead letters in the group charge poison-<n>: card declined, and gateway <uuid> down", code, stdout, stderr)
			}
			if strings.Contains(stdout, "poison-00001") {
				t.Errorf("stats names an error, not its group:\n%s", stdout)
			}
			var stats []statsJSON
			cmdJSON(t, &stats, 0, append([]string{"stats", "-consumer", "billing", "-json"}, e.flags...)...)
			if len(stats) != 1 || len(stats[0].DeadLetterGroups) != 3 || stats[0].DeadLetterGroups[0] != (groupJSON{
				Group: "charge poison-<n>: card declined", DeadLetters: 4,
				FirstFailedAt: stats[0].DeadLetterGroups[0].FirstFailedAt, LastFailedAt: stats[0].DeadLetterGroups[0].LastFailedAt}) ||
				stats[0].TopErrors[0] != (errorCountJSON{Error: "charge poison-<n>: card declined", Messages: 4}) {
				t.Errorf("stats -json: %+v; want the group of 4 first among 3, of dead letters and of attempts", stats)
			}

			var list struct {
				DeadLetters []deadLetterJSON `json:"dead_letters"`
			}
			cmdJSON(t, &list, 0, append([]string{"dead-letters", "list", "-group", "charge poison-<n>: card declined", "-json"}, e.flags...)...)
			if len(list.DeadLetters) != 5 || list.DeadLetters[0].ErrorGroup != "charge poison-<n>: card declined" {
				t.Errorf("list -group: %+v; want the 5 dead letters of the group, of both consumers", list.DeadLetters)
			}
			cmdJSON(t, &list, 0, append([]string{"dead-letters", "list", "-message-id", "poison-00000", "-consumer", "audit", "-json"}, e.flags...)...)
			if len(list.DeadLetters) != 1 || list.DeadLetters[0].Consumer != "audit" {
				t.Errorf("list -message-id -consumer: %+v; want audit's one", list.DeadLetters)
			}

			code, stdout, _ = runCmd(t, append([]string{"dead-letters", "show", "-message-id", "x-2"}, e.flags...)...)
			if code != 0 || !strings.Contains(squash(stdout), "message id: x-2") || !strings.Contains(stdout, "gateway 3f2504e0") {
				t.Errorf("show -message-id x-2: exit %d\n%s", code, stdout)
			}
			code, _, stderr = runCmd(t, append([]string{"dead-letters", "show", "-message-id", "poison-00000"}, e.flags...)...)
			if code != 1 || !strings.Contains(stderr, "several dead letters") || !strings.Contains(stderr, "(consumer audit)") {
				t.Errorf("show -message-id of two consumers' messages: exit %d, stderr %q; want 1 and both listed", code, stderr)
			}
			code, stdout, _ = runCmd(t, append([]string{"dead-letters", "show", "-message-id", "poison-00000", "-consumer", "audit"}, e.flags...)...)
			if code != 0 || !strings.Contains(squash(stdout), "consumer: audit") {
				t.Errorf("show -message-id -consumer audit: exit %d\n%s", code, stdout)
			}
			code, _, stderr = runCmd(t, append([]string{"dead-letters", "show", "-message-id", "nope"}, e.flags...)...)
			if code != exitNotFound || !strings.Contains(stderr, "no dead letter of message nope") {
				t.Errorf("show -message-id of no dead letter: exit %d, stderr %q; want %d", code, stderr, exitNotFound)
			}
			code, _, _ = runCmd(t, append([]string{"dead-letters", "show", "-message-id", "x-2", "7"}, e.flags...)...)
			if code != exitUsage {
				t.Errorf("show with an ID and -message-id: exit %d, want %d", code, exitUsage)
			}
		})
	}
}

// squash makes each run of white space in s one space, as the tables of
// the text output are aligned with a varying number.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
