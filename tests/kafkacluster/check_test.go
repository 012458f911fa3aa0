package kafkacluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// check asserts the run's effects: each message's exactly once, each
// key's in seq order; and that the run made the changes it was to make.
// It logs the figures: kills, changes, redeliveries, rebalance pauses.
func (r *run) check(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	lost, doubled := r.effects(t)
	var disorder, serialDisorder int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT prev_ok),
		count(*) FILTER (WHERE n < prev_n)
		FROM (SELECT prev_ok, n, lag(n) OVER (PARTITION BY key ORDER BY seq) AS prev_n FROM `+r.schema+`.ledger) x`).
		Scan(&disorder, &serialDisorder)
	if err != nil {
		t.Fatal(err)
	}
	var processed, duplicates, retries, splits int64
	err = r.pool.QueryRow(ctx, `SELECT coalesce(sum(processed), 0), coalesce(sum(duplicates), 0),
		coalesce(sum(retries), 0), coalesce(sum(splits), 0) FROM `+r.schema+`.counts`).Scan(&processed, &duplicates, &retries, &splits)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages, %d keys on %d partitions: %d lost, %d doubled, %d committed out of seq order", r.n, keys, partitions, lost, doubled, disorder)
	t.Logf("kills: %d (%s); changes: %s", r.kills.Total(), r.kills.String(), r.changes.String())
	t.Logf("children's reports (a killed child's last 250 ms are missing): %d processed, %d redeliveries (Duplicate), %d retries, %d batch splits",
		processed, duplicates, retries, splits)
	r.logPauses(t)
	if lost > 0 || doubled > 0 {
		t.Errorf("%d messages lost, %d with more than one effect; want 0 and 0", lost, doubled)
	}
	if disorder > 0 || serialDisorder > 0 {
		t.Errorf("%d effects committed before their key's previous seq (%d in serial order); want 0:\n%s",
			disorder, serialDisorder, r.disorders(t))
		r.logOutputs(t)
	}
	r.checkChanges(t)
}

// effects compares the ledger with the produced messages: those with no
// effect, and those with more than one (or one never produced).
func (r *run) effects(t *testing.T) (lost, doubled int) {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), "SELECT id, count(*) FROM "+r.schema+".ledger GROUP BY id")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var id string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { got[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	seqs := make([]int, keys)
	for i := range r.n {
		k := i % keys
		id := fmt.Sprintf("k%02d-%06d", k, seqs[k])
		seqs[k]++
		switch got[id] {
		case 0:
			lost++
		case 1:
		default:
			doubled++
		}
		delete(got, id)
	}
	return lost, doubled + len(got)
}

// disorders lists the first effects committed out of order, with the
// child that committed each.
func (r *run) disorders(t *testing.T) string {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), `SELECT l.id, l.part, l.child, l.at, p.child, p.at FROM `+r.schema+`.ledger l
		LEFT JOIN `+r.schema+`.ledger p ON p.key = l.key AND p.seq = l.seq - 1 WHERE NOT l.prev_ok ORDER BY l.at LIMIT 10`)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var id, child string
	var prevChild *string
	var part int
	var at time.Time
	var prevAt *time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &part, &child, &at, &prevChild, &prevAt}, func() error {
		fmt.Fprintf(&b, "  %s (partition %d) by %s at %s; its previous seq by %v at %v\n", id, part, child,
			at.Format("15:04:05.000"), deref(prevChild), derefTime(prevAt))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func deref(s *string) string {
	if s == nil {
		return "nobody"
	}
	return *s
}

func derefTime(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// checkChanges asserts that the run made each kind of change: at least
// one of each per cycle of changes the producer's time allowed, less one.
func (r *run) checkChanges(t *testing.T) {
	t.Helper()
	for _, want := range []struct {
		what string
		got  int
	}{
		{"leader moves", r.changes.At(countLeaderMoves)},
		{"leader shuffles", r.changes.At(countShuffles)},
		{"coordinator moves", r.changes.At(countCoordMoves)},
		{"joins", r.changes.At(countJoins)},
		{"leaves", r.changes.At(countLeaves)},
		{"kills mid-batch", r.kills.At(endMidBatch)},
		{"stalls mid-batch", r.changes.At(countStalls)},
		{"kills", r.kills.Total()},
	} {
		if want.got < 1 {
			t.Errorf("%s: %d, want at least 1: the run did not test it", want.what, want.got)
		}
	}
}

// logPauses logs, for each kind of change made while messages were
// produced, how long the partitions waited for their next effect: for a
// change at t, the longest time from t to a partition's first effect
// after t. Changes in the last 3 s of producing are left out, since their
// partitions may get no message after them.
func (r *run) logPauses(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	marks, end := slices.Clone(r.marks), r.produced
	r.mu.Unlock()
	pauses := map[string][]time.Duration{}
	for _, m := range marks {
		if m.at.After(end.Add(-3 * time.Second)) {
			continue
		}
		var ms float64
		err := r.pool.QueryRow(context.Background(), `SELECT coalesce(extract(epoch FROM max(first - $1::timestamptz)) * 1000, 0)
			FROM (SELECT min(at) AS first FROM `+r.schema+`.ledger WHERE at > $1 GROUP BY part) x`, m.at).Scan(&ms)
		if err != nil {
			t.Fatal(err)
		}
		pauses[m.kind] = append(pauses[m.kind], time.Duration(ms*float64(time.Millisecond)))
	}
	for _, kind := range changes {
		ps := pauses[kind]
		if len(ps) == 0 {
			continue
		}
		delete(pauses, kind)
		slices.Sort(ps)
		t.Logf("pause after %s: median %v, max %v (%d)", kind, ps[len(ps)/2].Round(time.Millisecond), ps[len(ps)-1].Round(time.Millisecond), len(ps))
	}
}

// logOutputs logs the last lines of each child's output.
func (r *run) logOutputs(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range append(slices.Clone(r.ended), r.alive...) {
		lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
		t.Logf("child %s, last lines:\n%s", c.name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}
