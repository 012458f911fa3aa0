package galera

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
)

// sink is a broker that counts what the relays publish, by message ID.
type sink struct {
	mu sync.Mutex
	n  map[string]int
	by map[string][]string // the relays that published each ID
}

// publisher returns the Publish function of the relay named relay.
func (s *sink) publisher(relay string) outbox.PublishFunc {
	return func(_ context.Context, m *outbox.Message) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.n == nil {
			s.n, s.by = map[string]int{}, map[string][]string{}
		}
		s.n[m.ID]++
		s.by[m.ID] = append(s.by[m.ID], relay)
		return nil
	}
}

// doubled returns, for some IDs published more than once, who did.
func (s *sink) doubled(max int) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for id, by := range s.by {
		if len(by) > 1 && len(out) < max {
			out[id] = by
		}
	}
	return out
}

// check returns how many of ids were never published, and how many
// publications were more than one per ID.
func (s *sink) check(ids []string) (lost, doubles int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		switch n := s.n[id]; {
		case n == 0:
			lost++
		case n > 1:
			doubles += n - 1
		}
	}
	return lost, doubles
}

// writeOutbox writes n outbox rows on node, 50 a transaction, and
// returns their IDs.
func writeOutbox(t testing.TB, e *env, node, n int, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	w, ok := any(e.drivers[node]).(store.OutboxWriter[*sql.Tx])
	if !ok {
		t.Fatalf("%T is no store.OutboxWriter", e.drivers[node])
	}
	ob, err := outbox.New(ctx, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for start := 0; start < n; start += 50 {
		tx, err := e.dbs[node].BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := start; i < min(start+50, n); i++ {
			id := fmt.Sprintf("%s-%05d", prefix, i)
			ids = append(ids, id)
			if err := ob.Write(ctx, tx, &outbox.Message{ID: id, Destination: "galera.out", Payload: []byte(id)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// relayer returns node's driver as a store.OutboxRelayer.
func (e *env) relayer(t testing.TB, node int) store.OutboxRelayer {
	t.Helper()
	r, ok := any(e.drivers[node]).(store.OutboxRelayer)
	if !ok {
		t.Fatalf("%T is no store.OutboxRelayer", e.drivers[node])
	}
	return r
}

// outboxRows counts the outbox's rows on node i after a causal wait.
func (e *env) outboxRows(t testing.TB, i int) int {
	t.Helper()
	var n int
	if err := e.readers[i].QueryRow("SELECT COUNT(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// storetest's OutboxRelaysShare with relays on two nodes. FOR UPDATE SKIP
// LOCKED skips only the rows locked on the relay's own node. Two relays
// on two nodes may thus claim the same rows; certification refuses one
// claim's COMMIT (1213), and that relay publishes nothing of it. Every
// row is published once, and none stays in the table.
//
// A claim refused at COMMIT runs again; near a drain's end the second
// run finds no rows. The test drains the table several times: sqlstore
// once returned the first run's rows then, and 3 drains in 8 published
// some twice.
func TestOutboxRelaysOnTwoNodes(t *testing.T) {
	e := open(t, fastRetries)
	n := messages(t, 600)
	const drains = 6
	var y tally
	var rounds, claimed atomic.Int32
	var ids []string
	s := &sink{}
	cert, bf := counted(t, e, func() {
		for d := range drains {
			ids = append(ids, writeOutbox(t, e, 0, n/drains, fmt.Sprintf("o%d", d))...)
			drain(t, e, s, &y, &rounds, &claimed)
		}
	})
	lost, doubles := s.check(ids)
	if lost > 0 {
		t.Fatalf("%d of %d outbox rows never published", lost, len(ids))
	}
	for i := range nodes {
		if left := e.outboxRows(t, i); left != 0 {
			t.Fatalf("node %d: %d outbox rows left after the relays drained it, want 0", i+1, left)
		}
	}
	if doubles > 0 {
		t.Errorf("%d of %d rows published twice or more (some: %v)", doubles, len(ids), s.doubled(5))
	}
	t.Logf("%d rows by 4 relays on 2 nodes, %d drains: %d published twice or more; %d rounds claimed %d rows; round errors %v; cluster: %d certification failures, %d brute-force aborts",
		len(ids), drains, doubles, rounds.Load(), claimed.Load(), y.String(), cert, bf)
}

// drain runs two relays on each of nodes 1 and 2 until each finds the
// outbox empty three times.
func drain(t *testing.T, e *env, s *sink, y *tally, rounds, claimed *atomic.Int32) {
	t.Helper()
	var wg sync.WaitGroup
	for _, node := range []int{0, 1} {
		for k := range 2 { // two relays per node
			r, err := outbox.NewRelay(context.Background(), e.relayer(t, node), &outbox.RelayConfig{
				Publish: s.publisher(fmt.Sprintf("node%d/%d", node+1, k)), Batch: 10, Parallel: 4, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				deadline := time.Now().Add(2 * time.Minute)
				for empty := 0; empty < 3; {
					if time.Now().After(deadline) {
						t.Errorf("relay %d on node %d: the outbox did not drain in 2 min (errors %v)", k, node+1, y.String())
						return
					}
					res, err := r.RelayOnce(context.Background())
					rounds.Add(1)
					claimed.Add(int32(res.Claimed))
					if err != nil {
						y.add(err)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if res.Claimed == 0 {
						empty++
						time.Sleep(20 * time.Millisecond) // let the other node's commits apply
					}
				}
			})
		}
	}
	wg.Wait()
}
