package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
)

// failover reports whether err means that the client's node is gone or
// out of the cluster, so that the client should use another node.
// go-sql-driver takes one address per DSN: a client keeps a pool per node
// and moves on, as a load balancer in front of the cluster would do.
func failover(err error) bool {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1047 // not in the primary component, or not synced
	}
	switch errClass(err) {
	case "lost connection", "connection refused":
		return true
	}
	return false
}

// Consumers and relays run on all three nodes. Node 3 is killed with
// SIGKILL mid-run; its clients move to the next node on a connection
// error. Each message is delivered twice, as after a lost ack. Every
// message has exactly one effect, and every outbox row is published at
// least once. Node 3 then rejoins, Synced, with the same row counts.
func TestNodeKilled(t *testing.T) {
	c := need(t)
	e := open(t, fastRetries)
	// The test's loops end with ctx: a cluster that never recovers fails
	// the test instead of hanging it until go test's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := messages(t, 300)
	const victim = 2 // node 3
	obs := make([]*outbox.Outbox[*sql.Tx], nodes)
	for i, d := range e.drivers {
		ob, err := outbox.New(ctx, any(d).(store.OutboxWriter[*sql.Tx]), nil)
		if err != nil {
			t.Fatal(err)
		}
		obs[i] = ob
	}
	handler := func(node int) inbox.Handler[*sql.Tx] {
		return func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
			if err := write(ctx, tx, m.ID, node); err != nil {
				return err
			}
			return obs[node].Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("galera", m.ID, "out"),
				Destination: "galera.out", Payload: []byte(m.ID)})
		}
	}
	var ids []string
	queue := make(chan string, 2*n)
	for i := range n {
		id := fmt.Sprintf("k-%05d", i)
		ids = append(ids, id)
		queue <- id
	}
	for _, id := range ids { // every message a second time
		queue <- id
	}
	close(queue)

	var y tally
	var acked, switches atomic.Int32
	var slowest atomic.Int64
	killAt := int32(n / 2)
	killed := make(chan struct{})
	var consumers sync.WaitGroup
	for w := range 2 * nodes {
		consumers.Go(func() {
			node := w % nodes
			for id := range queue {
				for try := 0; ; try++ {
					begin := time.Now()
					out, err := e.inboxes[node].Process(ctx, inbox.Message{ID: id}, handler(node))
					if d := time.Since(begin); d.Nanoseconds() > slowest.Load() {
						slowest.Store(d.Nanoseconds())
					}
					if out.Ack() {
						break
					}
					y.add(err)
					if try > 1000 {
						t.Errorf("%s never settled: %v %v", id, out.Status, err)
						return
					}
					if failover(err) {
						node = (node + 1) % nodes
						switches.Add(1)
					}
					time.Sleep(5 * time.Millisecond)
				}
				if acked.Add(1) == killAt {
					if err := c.Kill(victim); err != nil {
						t.Error(err)
					}
					close(killed)
				}
			}
		})
	}

	// Two relays, on nodes 1 and 3, until the consumers are done and the
	// outbox is empty.
	s := &sink{}
	relays := make([][]*outbox.Relay, 2)
	for k, start := range []int{0, victim} {
		for i := range nodes {
			node := (start + i) % nodes
			r, err := outbox.NewRelay(ctx, e.relayer(t, node), &outbox.RelayConfig{
				Publish: s.publisher(fmt.Sprintf("relay%d@node%d", k, node+1)), Batch: 20,
				Lease: 3 * time.Second, PublishTimeout: time.Second,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			relays[k] = append(relays[k], r)
		}
	}
	consumersDone := make(chan struct{})
	var relayErrs tally
	var relaysWG sync.WaitGroup
	for k := range relays {
		relaysWG.Go(func() {
			at := 0
			for {
				res, err := relays[k][at].RelayOnce(ctx)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					relayErrs.add(err)
					if failover(err) {
						at = (at + 1) % nodes
						switches.Add(1)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if res.Claimed == 0 {
					select {
					case <-consumersDone:
						return // the last round after the consumers claimed nothing
					default:
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	consumers.Wait()
	close(consumersDone)
	relaysWG.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("node 3 was never killed")
	}

	// The survivors: one effect per message, every row published.
	for _, i := range []int{0, 1} {
		got := e.effects(t, i)
		lost, doubled := 0, 0
		for _, id := range ids {
			switch got[id] {
			case 0:
				lost++
			case 1:
			default:
				doubled++
			}
		}
		if lost > 0 || doubled > 0 {
			t.Fatalf("node %d: of %d messages %d lost, %d doubled; want each exactly once", i+1, n, lost, doubled)
		}
	}
	var outIDs []string
	for _, id := range ids {
		outIDs = append(outIDs, outbox.DerivedID("galera", id, "out"))
	}
	// A row claimed by a relay on node 3 just before the kill stays leased
	// for the lease, 3 s: drain it once the lease has run out.
	for left := e.outboxRows(t, 0); left > 0; left = e.outboxRows(t, 0) {
		if ctx.Err() != nil {
			t.Fatalf("%d outbox rows left: %v", left, ctx.Err())
		}
		t.Logf("%d outbox rows still leased by the killed relay; waiting for their lease", left)
		time.Sleep(2 * time.Second)
		if _, err := relays[0][0].RelayOnce(ctx); err != nil {
			t.Log(err)
		}
	}
	lost, doubles := s.check(outIDs)
	if lost > 0 {
		t.Fatalf("%d of %d outbox rows never published", lost, n)
	}

	// Node 3 rejoins.
	begin := time.Now()
	if err := c.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	rejoin := time.Since(begin)
	counts := func(i int) [3]int {
		var out [3]int
		for j, table := range []string{"ledger", "inbox", "outbox"} {
			if err := e.readers[i].QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&out[j]); err != nil {
				t.Fatalf("node %d: %v", i+1, err)
			}
		}
		return out
	}
	want := counts(0)
	for i := 1; i < nodes; i++ {
		if got := counts(i); got != want {
			t.Fatalf("node %d: ledger, inbox and outbox rows %v, node 1 %v", i+1, got, want)
		}
	}
	if want[0] != n || want[1] != n || want[2] != 0 {
		t.Fatalf("ledger, inbox and outbox rows %v, want %d, %d and 0", want, n, n)
	}
	e.wantOnce(t, ids)
	t.Logf("%d messages delivered twice, node 3 killed after %d acks: 0 lost, 0 doubled; %d outbox rows published, %d twice; "+
		"%d node switches; slowest Process %v; consumer retries %v; relay errors %v; node 3 rejoined in %v by %s",
		n, killAt, n, doubles, switches.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), y.String(), relayErrs.String(),
		rejoin.Round(time.Millisecond), c.Nodes[victim].Transfer())
}
