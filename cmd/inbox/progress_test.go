package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/outbox"
)

// fakeClock is a clock that a test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestProgress drives a progress line with a fake clock: what is done,
// the rate and the time left, one line rewritten with carriage returns,
// new figures at most every progressEvery, a blanked line written again,
// and a final line.
func TestProgress(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	p := newProgressOn(&buf, true, "discarded", "dead letter", 1000, clock.now)
	p.interval = progressEvery
	take := func() string { s := buf.String(); buf.Reset(); return s }

	clock.advance(100 * time.Millisecond)
	p.add(100)
	if got := take(); got != "" {
		t.Fatalf("before the first update was due: %q, want nothing", got)
	}
	clock.advance(900 * time.Millisecond)
	p.add(100)
	if got, want := take(), "\rdiscarded 200 of 1000 dead letters (20%) in 1s, 200/s, 4s left"; got != want {
		t.Fatalf("after 1 s:\n got %q\nwant %q", got, want)
	}
	clock.advance(100 * time.Millisecond)
	p.add(10)
	if got := take(); got != "" {
		t.Fatalf("100 ms after an update: %q, want nothing", got)
	}
	p.clear()
	want := "\r" + strings.Repeat(" ", len("discarded 200 of 1000 dead letters (20%) in 1s, 200/s, 4s left")) + "\r"
	if got := take(); got != want {
		t.Fatalf("clear: %q, want %q", got, want)
	}
	p.add(0)
	if got, want := take(), "\rdiscarded 200 of 1000 dead letters (20%) in 1s, 200/s, 4s left"; got != want {
		t.Fatalf("after clear, before an update is due:\n got %q\nwant %q (the last line again)", got, want)
	}
	clock.advance(900 * time.Millisecond)
	p.add(290)
	if got, want := take(), "\rdiscarded 500 of 1000 dead letters (50%) in 2s, 250/s, 2s left"; got != want {
		t.Fatalf("after 2 s:\n got %q\nwant %q", got, want)
	}

	// Throttled: 100 adds 10 ms apart write new figures 4 times.
	for range 100 {
		clock.advance(10 * time.Millisecond)
		p.add(1)
	}
	if got := strings.Count(take(), "\r"); got != 4 {
		t.Fatalf("100 adds over 1 s wrote %d updates, want 4 (every %v)", got, progressEvery)
	}
	clock.advance(time.Second)
	p.add(400)
	take()
	p.finish()
	if got, want := take(), "\rdiscarded 1000 of 1000 dead letters (100%) in 4s, 250/s\n"; got != want {
		t.Fatalf("final line:\n got %q\nwant %q", got, want)
	}

	// A total unknown: done and rate; a shorter line blanks the rest of
	// the longer one before it.
	p = newProgressOn(&buf, true, "pruned", "row", 0, clock.now)
	p.interval = progressEvery
	clock.advance(3 * time.Second)
	p.add(12000)
	if got, want := take(), "\rpruned 12000 rows in 3s, 4000/s"; got != want {
		t.Fatalf("no total:\n got %q\nwant %q", got, want)
	}
	clock.advance(3 * time.Second)
	p.add(0)
	if got, want := take(), "\rpruned 12000 rows in 6s, 2000/s"; got != want {
		t.Fatalf("no total, later:\n got %q\nwant %q", got, want)
	}
	p.width = 40 // as if a longer line were there
	p.finish()
	if got, want := take(), "\rpruned 12000 rows in 6s, 2000/s"+strings.Repeat(" ", 40-31)+"\n"; got != want {
		t.Fatalf("no total, final:\n got %q\nwant %q", got, want)
	}

	// Nothing counted (migrate): the time so far.
	p = newProgressOn(&buf, true, "migrate", "", 0, clock.now)
	p.interval = progressEvery
	clock.advance(1500 * time.Millisecond)
	p.tick()
	clock.advance(time.Second)
	p.finish()
	if got, want := take(), "\rmigrate: 2s so far\rmigrate: done in 3s\n"; got != want {
		t.Fatalf("migrate:\n got %q\nwant %q", got, want)
	}

	// Off (not a terminal, or -json), and done before an update was due:
	// nothing at all.
	p = newProgressOn(&buf, false, "discarded", "dead letter", 10, clock.now)
	clock.advance(time.Second)
	p.add(5)
	p.clear()
	p.finish()
	p = newProgressOn(&buf, true, "discarded", "dead letter", 10, clock.now)
	p.interval = progressEvery
	p.add(10)
	p.finish()
	if got := take(); got != "" {
		t.Fatalf("off, or quick: %q, want nothing", got)
	}
}

// TestProgressQuietOffTerminal: prune, migrate, discard -all, replay -all
// and outbox unpark -all write nothing to a stderr that is not a
// terminal, though every add would write on one (progressInterval is 0
// in these tests).
func TestProgressQuietOffTerminal(t *testing.T) {
	t.Parallel()
	if progressInterval != 0 {
		t.Fatal("TestMain sets progressInterval to 0")
	}
	e := openDB(t, "sqlite")
	s := newReplayStream(t)
	for _, c := range []string{"q", "r"} {
		ib := e.inbox(t, inbox.Config{Consumer: c})
		for i := range 3 {
			deadLetterOf(t, e, ib, inbox.Message{ID: fmt.Sprintf("%s-%d", c, i), Type: "t", Payload: []byte("p")})
		}
	}
	e.writeOutbox(t, &outbox.Message{ID: "o-1", Destination: "d"}, &outbox.Message{ID: "o-2", Destination: "d"})
	if _, err := e.db.Exec("UPDATE " + e.table("outbox") + " SET parked_at = 1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		out  string // on stdout
	}{
		{[]string{"migrate"}, "up to date"},
		{[]string{"prune", "-retention", "1h"}, "pruned 0 rows"},
		{append([]string{"dead-letters", "replay", "-all", "-consumer", "q"}, s.flags...), "replayed dead letter"},
		{[]string{"dead-letters", "discard", "-all", "-consumer", "r"}, "discarded dead letter"},
		{[]string{"outbox", "unpark", "-all"}, "unparked outbox row"},
	} {
		code, stdout, stderr := runCmd(t, append(tc.args, e.flags...)...)
		if code != 0 || stderr != "" || strings.Count(stdout, tc.out) == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 0, nothing on stderr, %q on stdout\nstdout: %s", tc.args, code, stderr, tc.out, stdout)
		}
	}
}
