package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// groupCount is what the cases compare of a store.DeadLetterGroup.
type groupCount struct {
	Group string
	Count int64
}

func groupCounts[TTx any](t *testing.T, in store.Inspector[TTx], p store.DeadLetterSearchParams) []groupCount {
	t.Helper()
	if p.Limit == 0 {
		p.Limit = 10
	}
	groups, err := in.DeadLetterGroups(context.Background(), &p)
	if err != nil {
		t.Fatalf("DeadLetterGroups(%+v): %v", p, err)
	}
	var out []groupCount
	for _, g := range groups {
		out = append(out, groupCount{g.Group, g.Count})
		if g.FirstFailedAt.IsZero() || g.LastFailedAt.Before(g.FirstFailedAt) {
			t.Errorf("group %q: failed from %v to %v, want two times in order", g.Group, g.FirstFailedAt, g.LastFailedAt)
		}
	}
	return out
}

// DeadLetterGroups counts the dead letters per error group, the largest
// first, with the search's filters. "boom: 1" and "boom: 2" are one group.
func testInspectGroups[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	in := inspector(t, env)
	if got := groupCounts(t, in, store.DeadLetterSearchParams{}); len(got) != 0 {
		t.Fatalf("groups of no dead letters: %v, want none", got)
	}
	inspectFixture(t, env)
	all, _ := in.DeadLetterSearch(context.Background(), &store.DeadLetterSearchParams{Limit: 10})
	both := []groupCount{{"boom: <n>", 2}, {"boom: b", 1}}
	tests := []struct {
		name string
		p    store.DeadLetterSearchParams
		want []groupCount
	}{
		{"all", store.DeadLetterSearchParams{}, both},
		{"consumer", store.DeadLetterSearchParams{Consumer: []byte("b")}, both[1:]},
		{"type", store.DeadLetterSearchParams{Type: "other.type"}, both[1:]},
		{"message ID", store.DeadLetterSearchParams{MessageID: []byte("dead-1")}, []groupCount{{"boom: <n>", 1}}},
		{"error substring", store.DeadLetterSearchParams{ErrorContains: ": 2"}, []groupCount{{"boom: <n>", 1}}},
		{"since the second", store.DeadLetterSearchParams{Since: all[1].FailedAt}, []groupCount{{"boom: <n>", 1}, {"boom: b", 1}}},
		{"until the second", store.DeadLetterSearchParams{Until: all[1].FailedAt}, []groupCount{{"boom: <n>", 1}}},
		{"in the future", store.DeadLetterSearchParams{Since: time.Now().Add(time.Hour)}, nil},
		{"the largest only", store.DeadLetterSearchParams{Limit: 1}, both[:1]},
		{"group and after ID do not apply", store.DeadLetterSearchParams{Group: "x", AfterID: all[2].ID}, both},
	}
	for _, tc := range tests {
		if got := groupCounts(t, in, tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: groups %v, want %v", tc.name, got, tc.want)
		}
	}

	// A consumer and a message ID that are not valid UTF-8 filter byte for
	// byte, in the search and in the groups.
	ctx := context.Background()
	odd := newInbox(t, env, inbox.Config{Consumer: "\xffodd"})
	out, _ := odd.Process(ctx, inbox.Message{ID: "\xfe\x00id"}, func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(errors.New("odd 7"))
	})
	wantStatus(t, "a message of consumer \\xffodd", out, inbox.DeadLettered)
	p := store.DeadLetterSearchParams{Consumer: []byte("\xffodd"), MessageID: []byte("\xfe\x00id"), Limit: 10}
	found, err := in.DeadLetterSearch(ctx, &p)
	if err != nil || len(found) != 1 || string(found[0].Key.MessageID) != "\xfe\x00id" {
		t.Errorf("search by a consumer and message ID not valid UTF-8: %+v, %v; want the one", found, err)
	}
	if got, want := groupCounts(t, in, p), []groupCount{{"odd <n>", 1}}; !slices.Equal(got, want) {
		t.Errorf("groups by a consumer and message ID not valid UTF-8: %v, want %v", got, want)
	}
}

// Migrate fills in the error group of dead letters and attempts written
// before the stores recorded it: until then they are the group "", and
// stats count their errors as they are.
func testInspectFillGroups[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	if env.Exec == nil {
		t.Skip("the harness has no Exec to clear the groups with")
	}
	in := inspector(t, env)
	inspectFixture(t, env)
	quote := store.QuoteDouble
	if env.Driver.Dialect() == "mysql" {
		quote = store.QuoteBacktick
	}
	if err := inTx(ctx, env.Driver, env.BeginPlain, func(tx TTx) error {
		for _, table := range []string{"inbox_dead_letters", "inbox_attempts"} {
			if err := env.Exec(ctx, tx, "UPDATE "+env.Tables.Name(table, quote)+" SET error_group = ''"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := groupCounts(t, in, store.DeadLetterSearchParams{}), []groupCount{{"", 3}}; !slices.Equal(got, want) {
		t.Fatalf("groups before they are filled in: %v, want %v", got, want)
	}
	stats, err := in.Stats(ctx, &store.StatsParams{Consumer: []byte("a"), TopErrors: 3, ErrorChars: 100})
	if err != nil || len(stats) != 1 || len(stats[0].TopErrors) != 3 {
		t.Fatalf("stats before the groups are filled in: %+v, %v; want 3 errors counted as they are", stats, err)
	}
	for range 2 { // a second Migrate finds nothing to fill in
		if err := env.Driver.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := groupCounts(t, in, store.DeadLetterSearchParams{}), []groupCount{{"boom: <n>", 2}, {"boom: b", 1}}; !slices.Equal(got, want) {
			t.Errorf("groups after Migrate: %v, want %v", got, want)
		}
	}
	stats, err = in.Stats(ctx, &store.StatsParams{Consumer: []byte("a"), TopErrors: 3, ErrorChars: 100})
	want := []store.ErrorCount{{Error: "boom: <n>", Count: 2}, {Error: "timeout", Count: 1}}
	if err != nil || len(stats) != 1 || !slices.Equal(stats[0].TopErrors, want) {
		t.Errorf("stats after Migrate: %+v, %v; want top errors %+v", stats, err, want)
	}
}
