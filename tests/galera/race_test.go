package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

// fastRetries are the inbox settings of the racing cases: redeliveries
// come at once, and no attempt budget runs out.
var fastRetries = inbox.Config{MaxAttempts: 1000, MaxTransientFailures: 10000,
	Backoff: inbox.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}

// storetest's RaceFirstCommits and RaceFirstAborts, with the 50 racing
// deliveries spread over the three nodes. A node's row locks do not reach
// the others: contenders on other nodes run their handler too, and all but
// one of their COMMITs are refused at certification. Those are Retry, and
// their redeliveries Duplicate: one effect in all.
func TestRace(t *testing.T) {
	need(t)
	for _, tc := range []struct {
		name         string
		firstCommits bool
	}{{"FirstCommits", true}, {"FirstAborts", false}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 50
			e := open(t, fastRetries)
			var calls atomic.Int32
			hd := func(node int) inbox.Handler[*sql.Tx] {
				return func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
					if err := write(ctx, tx, m.ID, node); err != nil {
						return err
					}
					if calls.Add(1) == 1 {
						time.Sleep(100 * time.Millisecond) // let the others pile up
						if !tc.firstCommits {
							return errors.New("first attempt aborts")
						}
					}
					return nil
				}
			}
			var y tally
			statuses := map[inbox.Status]int{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := make(chan struct{})
			cert, bf := counted(t, e, func() {
				for i := range n {
					wg.Go(func() {
						<-start
						out, err := deliver(context.Background(), e.inboxes[i%nodes], inbox.Message{ID: "race"}, hd(i%nodes), &y)
						mu.Lock()
						defer mu.Unlock()
						statuses[out.Status]++
						if !out.Ack() {
							t.Errorf("a delivery never settled: %v %v", out.Status, err)
						}
					})
				}
				close(start)
				wg.Wait()
			})
			e.wantOnce(t, []string{"race"})
			if statuses[inbox.Processed] != 1 || statuses[inbox.Duplicate] != n-1 {
				t.Fatalf("outcomes %v, want 1 processed and %d duplicates", statuses, n-1)
			}
			if !tc.firstCommits && calls.Load() < 2 {
				t.Fatalf("handler ran %d times; after the first aborted another must run", calls.Load())
			}
			t.Logf("%d handler runs for 1 effect; retries by error %v; cluster: %d certification failures, %d brute-force aborts",
				calls.Load(), y.String(), cert, bf)
		})
	}
}

// storetest's ThreeRaceHolderRollsBack with the holder on node 1 and the
// two contenders on nodes 2 and 3. On one server the contenders wait
// behind the holder's row. Here they do not wait at all: they settle
// while the holder still holds its claim. One commits, the other fails
// certification and then finds a duplicate. The holder's transaction is
// aborted by the winner's write set; its handler's failure is a Retry,
// and its redelivery a Duplicate.
func TestThreeRaceHolderRollsBack(t *testing.T) {
	e := open(t, fastRetries)
	ctx := context.Background()
	m := inbox.Message{ID: "three"}
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	var holderRuns atomic.Int32
	holder := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if err := write(ctx, tx, m.ID, 0); err != nil {
			return err
		}
		if holderRuns.Add(1) == 1 {
			close(holding)
			<-release
			return errors.New("the holder fails")
		}
		return nil
	}
	type result struct {
		out inbox.Outcome
		err error
	}
	var y tally
	held := make(chan result, 1)
	go func() {
		out, err := deliver(ctx, e.inboxes[0], m, holder, &y)
		held <- result{out, err}
	}()
	select {
	case <-holding:
	case r := <-held:
		t.Fatalf("the holder never reached its handler: %v %v", r.out.Status, r.err)
	}
	contenders := make(chan result, 2)
	for _, node := range []int{1, 2} {
		go func() {
			out, err := deliver(ctx, e.inboxes[node], m, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				return write(ctx, tx, m.ID, node)
			}, &y)
			contenders <- result{out, err}
		}()
	}
	statuses := map[inbox.Status]int{}
	for range 2 {
		select {
		case r := <-contenders:
			if !r.out.Ack() {
				t.Fatalf("a contender never settled: %v %v", r.out.Status, r.err)
			}
			statuses[r.out.Status]++
		case <-time.After(20 * time.Second):
			t.Fatal("the contenders on the other nodes wait for the holder on node 1: a lock spans nodes?")
		}
	}
	unblock()
	r := <-held
	if !r.out.Ack() {
		t.Fatalf("the holder never settled: %v %v", r.out.Status, r.err)
	}
	statuses[r.out.Status]++
	e.wantOnce(t, []string{"three"})
	if statuses[inbox.Processed] != 1 || statuses[inbox.Duplicate] != 2 {
		t.Fatalf("outcomes %v, want 1 processed and 2 duplicates", statuses)
	}
	t.Logf("contenders settled while node 1 held the claim; retries by error %v", y.String())
}

// storetest's BatchRace across nodes: three batches of the same 40 IDs,
// each in its own order, one batch on each node at once, redelivered
// while any message's outcome is not to be acked. The first batches wait
// for each other inside their handlers, so that all three hold their
// claims at once: two of the three COMMITs fail certification.
func TestBatchRace(t *testing.T) {
	e := open(t, fastRetries)
	const n = 40
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("b-%02d", i))
	}
	var y tally
	var runs atomic.Int32
	var wg sync.WaitGroup
	processed := make([]atomic.Int32, n)
	var ready sync.WaitGroup
	ready.Add(nodes)
	cert, bf := counted(t, e, func() {
		for node := range nodes {
			order := slices.Clone(ids)
			if node == 1 {
				slices.Reverse(order)
			}
			wg.Go(func() {
				pending := order
				for round := 0; len(pending) > 0; round++ {
					if round > 500 {
						t.Errorf("node %d: %d messages never settled", node+1, len(pending))
						return
					}
					msgs := make([]inbox.Message, len(pending))
					for i, id := range pending {
						msgs[i] = inbox.Message{ID: id}
					}
					outs, err := e.inboxes[node].ProcessBatch(context.Background(), msgs, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
						runs.Add(1)
						if round == 0 && m.ID == order[0] {
							ready.Done()
							ready.Wait() // every node's first batch holds its claims
						}
						return write(ctx, tx, m.ID, node)
					})
					var again []string
					for i, out := range outs {
						if !out.Ack() {
							again = append(again, pending[i])
							continue
						}
						if out.Status == inbox.Processed {
							var k int
							fmt.Sscanf(pending[i], "b-%d", &k)
							processed[k].Add(1)
						}
					}
					if len(again) > 0 {
						y.add(err)
						time.Sleep(2 * time.Millisecond)
					}
					pending = again
				}
			})
		}
		wg.Wait()
	})
	e.wantOnce(t, ids)
	for i := range processed {
		if got := processed[i].Load(); got != 1 {
			t.Fatalf("%s processed %d times, want once", ids[i], got)
		}
	}
	t.Logf("%d handler runs for %d effects; batch retries by error %v; cluster: %d certification failures, %d brute-force aborts",
		runs.Load(), n, y.String(), cert, bf)
}

// Many IDs, each delivered on all three nodes at once, as a broker
// redelivers to consumers behind a load balancer: every ID has exactly
// one effect. INBOX_GALERA_MESSAGES sets the number of IDs.
func TestManyRacingDeliveries(t *testing.T) {
	e := open(t, fastRetries)
	n := messages(t, 300)
	const workers = 8 // per node
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("m-%05d", i))
	}
	var y tally
	var runs, processed atomic.Int32
	begin := time.Now()
	cert, bf := counted(t, e, func() {
		var wg sync.WaitGroup
		for node := range nodes {
			queue := make(chan string)
			wg.Go(func() {
				defer close(queue)
				for _, id := range ids {
					queue <- id
				}
			})
			for range workers {
				wg.Go(func() {
					hd := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
						runs.Add(1)
						return write(ctx, tx, m.ID, node)
					}
					for id := range queue {
						out, err := deliver(context.Background(), e.inboxes[node], inbox.Message{ID: id}, hd, &y)
						if !out.Ack() {
							t.Errorf("%s on node %d never settled: %v %v", id, node+1, out.Status, err)
						}
						if out.Status == inbox.Processed {
							processed.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
	})
	e.wantOnce(t, ids)
	if got := int(processed.Load()); got != n {
		t.Fatalf("%d Processed outcomes, want %d, one per ID", got, n)
	}
	t.Logf("%d IDs x %d nodes in %v: %d handler runs; retries by error %v; cluster: %d certification failures, %d brute-force aborts",
		n, nodes, time.Since(begin).Round(time.Millisecond), runs.Load(), y.String(), cert, bf)
}
