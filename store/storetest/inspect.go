package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// inspector returns env's driver as a store.Inspector.
func inspector[TTx any](t *testing.T, env *Env[TTx]) store.Inspector[TTx] {
	t.Helper()
	return driverAs[store.Inspector[TTx]](t, env)
}

// driverAs returns env's driver as an I, an interface of package store,
// failing t when it is not one: every store of this repository implements
// them all.
func driverAs[I, TTx any](t *testing.T, env *Env[TTx]) I {
	t.Helper()
	d, ok := env.Driver.(I)
	if !ok {
		t.Fatalf("%T does not implement %v", env.Driver, reflect.TypeFor[I]())
	}
	return d
}

// inspectFixture fills two consumers' tables: consumer "a" has 3
// messages processed, 2 dead letters ("boom: 1", "boom: 2") and one
// message that failed once ("timeout"); consumer "b" has a dead letter of
// another type. It returns the dead letters' IDs in ID order: a's two,
// then b's.
func inspectFixture[TTx any](t *testing.T, env *Env[TTx]) []int64 {
	t.Helper()
	ctx := context.Background()
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	b := newInbox(t, env, inbox.Config{Consumer: "b"})
	fail := func(err error) inbox.Handler[TTx] {
		return func(context.Context, TTx, *inbox.Message) error { return err }
	}
	steps := []struct {
		ib   *inbox.Inbox[TTx]
		m    inbox.Message
		h    inbox.Handler[TTx]
		want inbox.Status
	}{
		{a, msg("ok-1"), writer(env), inbox.Processed},
		{a, msg("dead-1"), fail(inbox.Permanent(errors.New("boom: 1"))), inbox.DeadLettered},
		{a, msg("ok-2"), writer(env), inbox.Processed},
		{a, msg("dead-2"), fail(inbox.Permanent(errors.New("boom: 2"))), inbox.DeadLettered},
		{a, msg("retry-1"), fail(errors.New("timeout")), inbox.Retry},
		{a, msg("ok-3"), writer(env), inbox.Processed},
		{b, inbox.Message{ID: "dead-b", Type: "other.type", Payload: []byte("\xff\x00 binary")}, fail(inbox.Permanent(errors.New("boom: b"))), inbox.DeadLettered},
	}
	for i, s := range steps {
		// The stores keep times to the millisecond: a pause gives each
		// dead letter its own failure time, which the range cases need.
		time.Sleep(3 * time.Millisecond)
		out, _ := s.ib.Process(ctx, s.m, s.h)
		wantStatus(t, fmt.Sprintf("fixture step %d (%s)", i, s.m.ID), out, s.want)
	}
	found, err := inspector(t, env).DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 10})
	if err != nil || len(found) != 3 {
		t.Fatalf("search of all dead letters: %d, %v; want 3", len(found), err)
	}
	return []int64{found[0].ID, found[1].ID, found[2].ID}
}

// Stats counts each consumer's rows, dead letters and failed attempts, and
// its most frequent errors, truncated; a consumer filter shows one.
func testInspectStats[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := inspector(t, env)
	empty, err := in.Stats(ctx, &store.StatsParams{TopErrors: 3, ErrorChars: 10})
	if err != nil || len(empty) != 0 {
		t.Fatalf("stats of empty tables: %+v, %v; want none", empty, err)
	}
	before := time.Now().Add(-time.Minute) // the database's clock may differ a little
	inspectFixture(t, env)
	after := time.Now().Add(time.Minute)
	stats, err := in.Stats(ctx, &store.StatsParams{TopErrors: 3, ErrorChars: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || string(stats[0].Consumer) != "a" || string(stats[1].Consumer) != "b" {
		t.Fatalf("stats of %d consumers, want a and b in order: %+v", len(stats), stats)
	}
	a, b := stats[0], stats[1]
	type counts struct{ rows, dead, dls, failed, attempts int64 }
	if got, want := (counts{a.InboxRows, a.DeadRows, a.DeadLetters, a.FailedMessages, a.FailedAttempts}), (counts{5, 2, 2, 3, 3}); got != want {
		t.Errorf("consumer a: %+v, want %+v (rows, dead rows, dead letters, failed messages, attempts)", got, want)
	}
	if got, want := (counts{b.InboxRows, b.DeadRows, b.DeadLetters, b.FailedMessages, b.FailedAttempts}), (counts{1, 1, 1, 1, 1}); got != want {
		t.Errorf("consumer b: %+v, want %+v", got, want)
	}
	for _, tm := range []time.Time{a.OldestClaim, a.NewestClaim, a.OldestDeadLetter, a.NewestDeadLetter} {
		if tm.Before(before) || tm.After(after) {
			t.Errorf("consumer a: time %v outside [%v, %v]", tm, before, after)
		}
	}
	if a.OldestClaim.After(a.NewestClaim) || a.OldestDeadLetter.After(a.NewestDeadLetter) {
		t.Errorf("consumer a: oldest after newest: %+v", a)
	}
	// "boom: 1" and "boom: 2" truncated to 4 characters are one error.
	wantTop := []store.ErrorCount{{Error: "boom", Count: 2}, {Error: "time", Count: 1}}
	if !slices.Equal(a.TopErrors, wantTop) {
		t.Errorf("consumer a's top errors %+v, want %+v", a.TopErrors, wantTop)
	}
	// Untruncated, they are one error group: "boom: <n>".
	grouped, err := in.Stats(ctx, &store.StatsParams{Consumer: []byte("a"), TopErrors: 3, ErrorChars: 100})
	if err != nil || len(grouped) != 1 {
		t.Fatalf("stats of consumer a: %+v, %v", grouped, err)
	}
	wantTop = []store.ErrorCount{{Error: "boom: <n>", Count: 2}, {Error: "timeout", Count: 1}}
	if !slices.Equal(grouped[0].TopErrors, wantTop) {
		t.Errorf("consumer a's top error groups %+v, want %+v", grouped[0].TopErrors, wantTop)
	}
	one, err := in.Stats(ctx, &store.StatsParams{Consumer: []byte("b"), TopErrors: 1, ErrorChars: 100})
	if err != nil || len(one) != 1 || string(one[0].Consumer) != "b" || one[0].DeadLetters != 1 ||
		!slices.Equal(one[0].TopErrors, []store.ErrorCount{{Error: "boom: b", Count: 1}}) {
		t.Fatalf("stats of consumer b: %+v, %v; want b alone, 1 dead letter, its error", one, err)
	}
}

// DeadLetterSearch filters by consumer, type, error substring (case
// matters) and failure time, pages by ID, and leaves payloads out; Get
// returns one with its payload and what the other tables hold.
func testInspectSearch[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := inspector(t, env)
	ids := inspectFixture(t, env)
	all, _ := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 10})
	failed := all[1].FailedAt
	tests := []struct {
		name string
		p    store.DeadLetterSearchParams
		want []int64
	}{
		{"all", store.DeadLetterSearchParams{}, ids},
		{"consumer", store.DeadLetterSearchParams{Consumer: []byte("a")}, ids[:2]},
		{"consumer without any", store.DeadLetterSearchParams{Consumer: []byte("A")}, nil},
		{"type", store.DeadLetterSearchParams{Type: "other.type"}, ids[2:]},
		{"type and consumer", store.DeadLetterSearchParams{Type: "other.type", Consumer: []byte("a")}, nil},
		{"error substring", store.DeadLetterSearchParams{ErrorContains: "m: 2"}, ids[1:2]},
		{"error substring of all", store.DeadLetterSearchParams{ErrorContains: "boom"}, ids},
		{"error substring, other case", store.DeadLetterSearchParams{ErrorContains: "BOOM"}, nil},
		{"error substring with LIKE's wildcards", store.DeadLetterSearchParams{ErrorContains: "b%m"}, nil},
		{"since, inclusive", store.DeadLetterSearchParams{Since: failed, Consumer: []byte("a")}, ids[1:2]},
		{"until, exclusive", store.DeadLetterSearchParams{Until: failed, Consumer: []byte("a")}, ids[:1]},
		{"since in the future", store.DeadLetterSearchParams{Since: time.Now().Add(time.Hour)}, nil},
		{"until in the past", store.DeadLetterSearchParams{Until: time.Now().Add(-time.Hour)}, nil},
		{"a wide range", store.DeadLetterSearchParams{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}, ids},
		{"after the first", store.DeadLetterSearchParams{AfterID: ids[0]}, ids[1:]},
		{"a page of 2", store.DeadLetterSearchParams{Limit: 2}, ids[:2]},
		{"the next page", store.DeadLetterSearchParams{AfterID: ids[1], Limit: 2}, ids[2:]},
		{"after the last", store.DeadLetterSearchParams{AfterID: ids[2]}, nil},
		{"message ID", store.DeadLetterSearchParams{MessageID: []byte("dead-2")}, ids[1:2]},
		{"message ID and another consumer", store.DeadLetterSearchParams{MessageID: []byte("dead-b"), Consumer: []byte("a")}, nil},
		{"message ID's prefix", store.DeadLetterSearchParams{MessageID: []byte("dead")}, nil},
		{"error group", store.DeadLetterSearchParams{Group: "boom: <n>"}, ids[:2]},
		{"error group of b", store.DeadLetterSearchParams{Group: "boom: b"}, ids[2:]},
		{"an error is not its group", store.DeadLetterSearchParams{Group: "boom: 1"}, nil},
		{"error group and message ID", store.DeadLetterSearchParams{Group: "boom: <n>", MessageID: []byte("dead-1")}, ids[:1]},
	}
	for _, tc := range tests {
		if tc.p.Limit == 0 {
			tc.p.Limit = 10
		}
		found, err := in.DeadLetterSearch(ctx, &tc.p)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []int64
		for _, f := range found {
			got = append(got, f.ID)
			if f.Payload != nil {
				t.Errorf("%s: dead letter %d has a payload of %d bytes, want none in a search", tc.name, f.ID, len(f.Payload))
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: found %v, want %v", tc.name, got, tc.want)
		}
	}
	if all[2].PayloadSize != int64(len("\xff\x00 binary")) || string(all[2].Key.Consumer) != "b" || string(all[2].Key.MessageID) != "dead-b" {
		t.Errorf("b's dead letter in a search: %+v, want consumer b, ID dead-b, payload size %d", all[2], len("\xff\x00 binary"))
	}

	det, err := in.DeadLetterGet(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(det.Payload) != "payload of dead-1" || det.RowState != store.RowDead || det.Counted != 1 ||
		det.LastError != "boom: 1" || det.Error != "boom: 1" || det.Type != "storetest.credit" || len(det.Headers) == 0 ||
		det.ReceivedAt.IsZero() || det.FirstFailedAt.IsZero() || det.LastFailedAt.Before(det.FirstFailedAt) {
		t.Errorf("detail of dead letter %d: %+v; want its payload, headers, a dead row, 1 attempt, its error and times", ids[0], det)
	}
	if _, err := in.DeadLetterGet(ctx, ids[2]+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of an unknown ID: %v, want store.ErrNotFound", err)
	}
}

// DeadLetterDiscard deletes the dead letters that exist, of any consumer,
// and leaves their inbox rows dead: a redelivery is still a duplicate.
func testInspectDiscard[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := inspector(t, env)
	ids := inspectFixture(t, env)
	got, err := in.DeadLetterDiscard(ctx, []int64{ids[2], ids[2] + 1000, ids[0]})
	if err != nil || !slices.Equal(got, []int64{ids[2], ids[0]}) {
		t.Fatalf("discard: %v, %v; want %v", got, err, []int64{ids[2], ids[0]})
	}
	left, _ := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 10})
	if len(left) != 1 || left[0].ID != ids[1] {
		t.Fatalf("after the discard, %d dead letters left, want only %d", len(left), ids[1])
	}
	if got, err := in.DeadLetterDiscard(ctx, []int64{ids[0]}); err != nil || len(got) != 0 {
		t.Fatalf("discard again: %v, %v; want nothing deleted", got, err)
	}
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	out, _ := a.Process(ctx, msg("dead-1"), writer(env))
	wantStatus(t, "redelivery of a discarded dead letter", out, inbox.Duplicate)
}

// DeadLetterRelease, in the caller's transaction, takes the dead letter
// and releases the dead row and the attempts: a claim of the message
// waits for that transaction; after COMMIT it claims the message as new,
// after ROLLBACK (a replay killed before COMMIT) it finds the dead row, a
// duplicate, and the dead letter is still there.
func testInspectRelease[TTx any](t *testing.T, h Harness[TTx]) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := open(t, h)
			in := inspector(t, env)
			ids := inspectFixture(t, env)
			a := newInbox(t, env, inbox.Config{Consumer: "a"})
			tx, err := env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			dl, live, err := in.DeadLetterRelease(ctx, tx, ids[0])
			if err != nil || live || string(dl.Key.MessageID) != "dead-1" || string(dl.Key.Consumer) != "a" || string(dl.Payload) != "payload of dead-1" {
				_ = env.Driver.Rollback(ctx, tx)
				t.Fatalf("release: %+v, live %v, %v; want dead-1 of a with its payload, not live", dl, live, err)
			}
			type result struct {
				out inbox.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := a.Process(ctx, msg("dead-1"), writer(env))
				done <- result{out, err}
			}()
			select {
			case r := <-done:
				_ = env.Driver.Rollback(ctx, tx)
				t.Fatalf("a claim during the release's transaction ended (%v, %v), want it to wait for the transaction", r.out.Status, r.err)
			case <-time.After(300 * time.Millisecond):
			}
			end, want, wantDLs := env.Driver.Rollback, inbox.Duplicate, 3
			if commit {
				end, want, wantDLs = env.Driver.Commit, inbox.Processed, 2
			}
			if err := end(ctx, tx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.out.Status != want {
				t.Fatalf("the waiting claim: %v, %v; want %v", r.out.Status, r.err, want)
			}
			if n, wantN := count(t, env, "dead-1"), map[bool]int{true: 1, false: 0}[commit]; n != wantN {
				t.Fatalf("%d effects of dead-1, want %d", n, wantN)
			}
			if left, _ := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 10}); len(left) != wantDLs {
				t.Fatalf("%d dead letters left, want %d", len(left), wantDLs)
			}
			if !commit {
				return
			}
			stats, _ := in.Stats(ctx, &store.StatsParams{Consumer: []byte("a")})
			if stats[0].FailedMessages != 2 || stats[0].DeadRows != 1 {
				t.Fatalf("after the release: %d messages with attempts, %d dead rows; want 2 and 1 (dead-1's gone)", stats[0].FailedMessages, stats[0].DeadRows)
			}
			tx, _ = env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: 5 * time.Second})
			if _, _, err := in.DeadLetterRelease(ctx, tx, ids[0]); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("release of a released dead letter: %v, want store.ErrNotFound", err)
			}
			_ = env.Driver.Rollback(ctx, tx)
		})
	}
}

// Two releases of one dead letter (two replays at once): the second
// waits for the first's transaction; after its ROLLBACK it takes the dead
// letter, after its COMMIT it finds none.
func testInspectReleaseTwice[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := inspector(t, env)
	id := inspectFixture(t, env)[0]
	release := func() (TTx, error) {
		tx, err := env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: 5 * time.Second})
		if err != nil {
			return tx, err
		}
		if _, _, err = in.DeadLetterRelease(ctx, tx, id); err != nil {
			_ = env.Driver.Rollback(ctx, tx)
		}
		return tx, err
	}
	for _, commit := range []bool{false, true} {
		tx, err := release()
		if err != nil {
			t.Fatalf("first release (then commit=%v): %v", commit, err)
		}
		second := make(chan error, 1)
		go func() {
			tx2, err := release()
			if err == nil {
				_ = env.Driver.Rollback(ctx, tx2)
			}
			second <- err
		}()
		select {
		case err := <-second:
			_ = env.Driver.Rollback(ctx, tx)
			t.Fatalf("a second release during the first's transaction ended (%v), want it to wait", err)
		case <-time.After(300 * time.Millisecond):
		}
		end := env.Driver.Rollback
		if commit {
			end = env.Driver.Commit
		}
		if err := end(ctx, tx); err != nil {
			t.Fatal(err)
		}
		err = <-second
		if commit && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second release after the first committed: %v, want store.ErrNotFound", err)
		}
		if !commit && err != nil {
			t.Fatalf("second release after the first rolled back: %v, want the dead letter taken", err)
		}
	}
}

// A dead letter whose message was processed since (a redelivery after its
// dead row was pruned) is released as live, its row left alone.
func testInspectReleaseLive[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := inspector(t, env)
	ids := inspectFixture(t, env)
	key := store.Key{Consumer: []byte("a"), MessageID: []byte("dead-2")}
	if err := env.Backdate(ctx, key, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	out, _ := a.Process(ctx, msg("dead-2"), writer(env))
	wantStatus(t, "redelivery after the prune", out, inbox.Processed)
	det, err := in.DeadLetterGet(ctx, ids[1])
	if err != nil || det.RowState != store.RowLive {
		t.Fatalf("detail: %+v, %v; want a live row", det, err)
	}
	tx, err := env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, live, err := in.DeadLetterRelease(ctx, tx, ids[1])
	if err != nil || !live {
		_ = env.Driver.Rollback(ctx, tx)
		t.Fatalf("release: live %v, %v; want live", live, err)
	}
	if err := env.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	out, _ = a.Process(ctx, msg("dead-2"), writer(env))
	wantStatus(t, "a delivery after the release of a live message", out, inbox.Duplicate)
	if det, err := in.DeadLetterGet(ctx, ids[1]); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("the released dead letter: %+v, %v; want it gone", det, err)
	}
}
