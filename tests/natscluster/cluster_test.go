package natscluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/natscluster"
)

const (
	// defaultMessages is a CI run's messages, two thirds published
	// directly and a third through the outbox; INBOX_NATSCLUSTER_MESSAGES
	// sets more.
	defaultMessages = 3000
	// waitFor bounds each wait of the kill schedule.
	waitFor = time.Minute
	// stallAfter: once the producers are done, this long without progress
	// ends the wait for completion (lost messages never arrive; the check
	// then names them).
	stallAfter = 30 * time.Second
	// down is how long a killed node stays down while the run goes on.
	down = 2 * time.Second
)

// defaultKills is a CI run's leader kills; INBOX_NATSCLUSTER_KILLS sets
// more.
const defaultKills = 2

func kills() int {
	if n, err := strconv.Atoi(os.Getenv("INBOX_NATSCLUSTER_KILLS")); err == nil && n > 0 {
		return n
	}
	return defaultKills
}

func messages() int {
	if n, err := strconv.Atoi(os.Getenv("INBOX_NATSCLUSTER_MESSAGES")); err == nil && n > 0 {
		return n
	}
	return defaultMessages
}

// kill is one SIGKILL of the schedule and what followed.
type kill struct {
	node     string // the node killed
	role     string // why it was chosen
	consumer string // the durable consumer's leader at the time
	at       time.Time
	resumed  time.Duration // until a message stored after the kill was processed
	gap      time.Duration // the longest time without a Processed outcome after it
	leader   string        // the stream's leader after the election
}

// TestLeaderKills runs producers, two outbox relays and four inbox
// consumers (two per message, two in batches) on a stream with three
// replicas, SIGKILLs the stream's leader, restarts it, then SIGKILLs the
// new leader and restarts it, and checks that every message and outbox row
// has exactly one effect in the ledger.
func TestLeaderKills(t *testing.T) {
	t.Parallel()
	began := time.Now()
	r := newRun(t, messages(), kills())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	parts := map[string]func(context.Context) error{
		"producer": r.produce(ctx, t), "outbox writer": r.writeOutbox(ctx, t),
		"relay1": r.relay(ctx, t, "relay1"), "relay2": r.relay(ctx, t, "relay2"),
		"consumer1": r.consumer(ctx, t, "consumer1", false), "consumer2": r.consumer(ctx, t, "consumer2", false),
		"batch1": r.consumer(ctx, t, "batch1", true), "batch2": r.consumer(ctx, t, "batch2", true),
	}
	p := startParts(ctx, parts)
	// After a failure too, the parts end before the pools and connections
	// they use are closed.
	t.Cleanup(func() {
		cancel()
		if _, err := p.wait(30 * time.Second); err != nil {
			t.Error(err)
		}
	})

	kills := r.schedule(t, r.kills)
	close(r.stop)
	r.waitComplete(t, func() bool { return p.ended("producer") && p.ended("outbox writer") })
	cancel()
	errs, err := p.wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range errs {
		if err != nil && !(errors.Is(err, context.Canceled) && (name == "producer" || name == "outbox writer")) {
			t.Errorf("%s ended with %v; want nil: nothing may stop a consumer or a relay", name, err)
		}
	}
	r.gaps(kills)
	r.check(t, kills)
	r.report(t, kills, time.Since(began))
}

// parts runs a run's producers, relays and consumers, a goroutine each.
type parts struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs map[string]error
}

func startParts(ctx context.Context, fns map[string]func(context.Context) error) *parts {
	p := &parts{errs: map[string]error{}}
	for name, fn := range fns {
		p.wg.Go(func() {
			err := fn(ctx)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.errs[name] = err
		})
	}
	return p
}

// ended reports whether the part name has returned.
func (p *parts) ended(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.errs[name]
	return ok
}

// wait waits up to d for every part to return, and returns their errors.
func (p *parts) wait(d time.Duration) (map[string]error, error) {
	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return p.errs, nil
	case <-time.After(d):
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, fmt.Errorf("parts still running %v after the end; ended: %v", d, p.errs)
	}
}

func newRun(t *testing.T, n, kills int) *run {
	t.Helper()
	r := &run{kills: kills, schema: testenv.Name("natscluster_"), stream: testenv.Name("NATSCLUSTER_"), direct: n * 2 / 3, outbox: n - n*2/3,
		logs: newLogCounter(), stop: make(chan struct{}), relayed: map[string]int{}}
	r.log = slog.New(r.logs)
	r.pool = pgenv.Pool(t, 2)
	r.c = natscluster.Start(t, &natscluster.Options{Logger: slog.New(slog.NewTextHandler(tlog{t}, nil))})
	r.js = r.connect(t, "test")
	ctx := context.Background()
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: r.stream, Subjects: []string{r.stream + ".>"},
		Replicas: 3, Storage: jetstream.FileStorage, Duplicates: dupWindow}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pool.Exec(ctx, `CREATE SCHEMA `+r.schema+`;
		CREATE TABLE `+r.schema+`.ledger (message_id text NOT NULL, consumer text NOT NULL, deliveries int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.pool.Exec(context.Background(), "DROP SCHEMA "+r.schema+" CASCADE") })
	d, err := pgxstore.New(r.pool, &pgxstore.Config{Tables: store.Tables{Schema: r.schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("schema %s, stream %s (3 replicas, file storage, duplicate window %v), at least %d direct messages and %d outbox rows",
		r.schema, r.stream, dupWindow, r.direct, r.outbox)
	return r
}

// tlog writes the cluster helper's log lines to the test's log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// schedule kills the stream's leader once a tenth of the messages are
// processed, and restarts it once consumption has resumed without it. Then,
// at half the messages, it kills the leader elected meanwhile and restarts
// it the same way; a larger run spreads more kills between a tenth and
// nine tenths. The later kills are of the new leader rather than of a
// follower: a follower's death moves no leader and only makes its clients
// reconnect, while a second election proves that the restarted node caught
// up and votes.
func (r *run) schedule(t *testing.T, n int) []*kill {
	t.Helper()
	var kills []*kill
	total := r.direct + r.outbox
	for i := range n {
		r.waitProcessed(t, total/10+total*8*i/(10*n))
		role := "new stream leader"
		if i == 0 {
			role = "stream leader"
		}
		k := r.killLeader(t, role)
		kills = append(kills, k)
		r.waitResumed(t, k)
		time.Sleep(down) // the run goes on with two nodes
		r.restart(t, r.c.Node(k.node))
	}
	return kills
}

func (r *run) processed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, c := range r.counts {
		n += c.Processed.Load()
	}
	return n
}

func (r *run) waitProcessed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for r.processed() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %d messages processed, got %d", waitFor, n, r.processed())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killLeader SIGKILLs the stream's leader.
func (r *run) killLeader(t *testing.T, role string) *kill {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := r.c.StreamLeader(ctx, r.js, r.stream)
	if err != nil {
		t.Fatalf("finding the stream's leader: %v", err)
	}
	k := &kill{node: n.Name, role: role}
	if cn, err := r.c.ConsumerLeader(ctx, r.js, r.stream, durable); err == nil {
		k.consumer = cn.Name
	}
	k.at = time.Now()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL %s (%s; the durable consumer's leader was %s) at %d processed", n.Name, role, k.consumer, r.processed())
	return k
}

// waitResumed waits until a message that the stream stored after the kill
// has been processed: publish, election, delivery and commit all work
// again.
func (r *run) waitResumed(t *testing.T, k *kill) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for r.maxStored.Load() <= k.at.UnixNano() {
		if time.Now().After(deadline) {
			t.Fatalf("no message stored after the SIGKILL of %s was processed within %v (processed %d)", k.node, waitFor, r.processed())
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.resumed = time.Since(k.at)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := r.c.StreamLeader(ctx, r.js, r.stream); err == nil {
		k.leader = n.Name
	}
	t.Logf("consumption resumed %v after the SIGKILL of %s; stream leader now %s", k.resumed.Round(time.Millisecond), k.node, k.leader)
}

// restart starts n again and waits until the stream and the durable
// consumer have every replica current.
func (r *run) restart(t *testing.T, n *natscluster.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.c.WaitStreamCurrent(ctx, r.js, r.stream, durable); err != nil {
		t.Fatalf("after restarting %s: %v\n%s", n.Name, err, n.Log())
	}
	t.Logf("%s restarted; stream and consumer replicas current after %v", n.Name, time.Since(begin).Round(time.Millisecond))
}

// waitComplete waits until the producers are done, every ID they
// published or committed is in the ledger and the outbox is empty; or
// until nothing moves for stallAfter.
func (r *run) waitComplete(t *testing.T, produced func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last [3]int
	lastChange := time.Now()
	for {
		time.Sleep(250 * time.Millisecond)
		var distinct, rows, pending int
		if err := r.pool.QueryRow(context.Background(), `SELECT (SELECT count(DISTINCT message_id) FROM `+r.schema+`.ledger),
			(SELECT count(*) FROM `+r.schema+`.ledger), (SELECT count(*) FROM `+r.schema+`.outbox)`).Scan(&distinct, &rows, &pending); err != nil {
			t.Fatalf("reading progress: %v", err)
		}
		if p := [3]int{distinct, rows, pending}; p != last {
			last, lastChange = p, time.Now()
		}
		r.mu.Lock()
		want := len(r.directIDs) + len(r.outboxIDs)
		r.mu.Unlock()
		switch {
		case produced() && distinct == want && pending == 0:
			time.Sleep(time.Second) // duplicates in flight arrive too
			return
		case produced() && time.Since(lastChange) > stallAfter:
			t.Logf("nothing moved for %v: %d of %d IDs in the ledger, %d rows, %d outbox rows", stallAfter, distinct, want, rows, pending)
			return
		case time.Now().After(deadline):
			t.Logf("deadline passed: %d of %d IDs in the ledger, %d rows, %d outbox rows", distinct, want, rows, pending)
			return
		}
	}
}

// gaps finds, for each kill, the longest time without a Processed outcome
// from the kill until the next kill or the end.
func (r *run) gaps(kills []*kill) {
	r.mu.Lock()
	times := slices.Clone(r.outcomes)
	r.mu.Unlock()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i, k := range kills {
		end := time.Now()
		if i+1 < len(kills) {
			end = kills[i+1].at
		}
		prev := k.at
		for _, ts := range times {
			if ts.Before(k.at) {
				continue
			}
			if ts.After(end) {
				break
			}
			k.gap = max(k.gap, ts.Sub(prev))
			prev = ts
		}
	}
}

// check compares the ledger with what was published and committed, and
// looks at what the outbox and the inbox kept.
func (r *run) check(t *testing.T, kills []*kill) {
	t.Helper()
	ctx := context.Background()
	rows, err := r.pool.Query(ctx, "SELECT message_id FROM "+r.schema+".ledger")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, id := range ids {
		got[id]++
	}
	r.mu.Lock()
	want := map[string]bool{}
	for _, id := range append(slices.Clone(r.directIDs), r.outboxIDs...) {
		want[id] = true
	}
	r.mu.Unlock()
	lost, doubled, extra := diff(want, got)
	if len(lost)+len(doubled)+len(extra) > 0 {
		t.Errorf("ledger: want each of the %d IDs exactly once; lost %d %v, doubled %d %v, never published %d %v",
			len(want), len(lost), first(lost), len(doubled), first(doubled), len(extra), first(extra))
	}
	var pending, parked, letters int
	if err := r.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+r.schema+`.outbox),
		(SELECT count(*) FROM `+r.schema+`.outbox WHERE parked_at IS NOT NULL),
		(SELECT count(*) FROM `+r.schema+`.inbox_dead_letters)`).Scan(&pending, &parked, &letters); err != nil {
		t.Fatal(err)
	}
	if pending != 0 || letters != 0 {
		t.Errorf("want the outbox empty and no dead letter; outbox has %d rows (%d parked), %d dead letters", pending, parked, letters)
	}
	if len(kills) != r.kills {
		t.Errorf("want %d leader kills, got %d", r.kills, len(kills))
	}
	if dups := r.duplicates(); dups < r.repeats.Load() {
		t.Errorf("the inbox skipped %d duplicates; want at least the %d IDs published again after the duplicate window", dups, r.repeats.Load())
	}
}

func (r *run) duplicates() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, c := range r.counts {
		n += c.Duplicates.Load()
	}
	return n
}

// report logs the run's figures.
func (r *run) report(t *testing.T, kills []*kill, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stored uint64
	if st, err := r.js.Stream(ctx, r.stream); err == nil {
		if info, err := st.Info(ctx); err == nil {
			stored = info.State.Msgs
		}
	}
	r.mu.Lock()
	direct, rows := len(r.directIDs), len(r.outboxIDs)
	var relayed, republished int
	for _, n := range r.relayed {
		relayed += n
		republished += n - 1
	}
	r.mu.Unlock()
	for i, k := range kills {
		t.Logf("kill %d: %s (%s; consumer leader %s), new leader %s; consumption resumed after %v, longest pause in processing %v",
			i+1, k.node, k.role, k.consumer, k.leader, k.resumed.Round(time.Millisecond), k.gap.Round(time.Millisecond))
	}
	t.Logf("%d direct messages (%d published twice at once, %d again after the window), %d outbox rows, in %v",
		direct, r.immediate.Load(), r.repeats.Load(), rows, took.Round(100*time.Millisecond))
	t.Logf("producer: failed publications retried: %d (%s)", r.pubErrors.Total(), r.pubErrors.String())
	t.Logf("relays: %d publications for %d rows, %d republished; failed: %d (%s)", relayed, rows, republished,
		r.relayErrors.Total(), r.relayErrors.String())
	t.Logf("stream: %d publications acked, %d stored; %d dropped by the duplicate window (less any timed-out publish that was stored)",
		r.published.Load(), stored, r.published.Load()-int64(stored))
	t.Logf("inbox: %d processed, %d duplicates skipped, %d deliveries with Deliveries > 1", r.processed(), r.duplicates(), r.redelivered.Load())
	t.Logf("logged at WARN or above:\n%s", r.logs)
}

// diff returns the IDs of want missing from got, those in got more than
// once, and those in got that want lacks, each sorted.
func diff(want map[string]bool, got map[string]int) (lost, doubled, extra []string) {
	for id := range want {
		if got[id] == 0 {
			lost = append(lost, id)
		}
	}
	for id, n := range got {
		if n > 1 {
			doubled = append(doubled, fmt.Sprintf("%s×%d", id, n))
		}
		if !want[id] {
			extra = append(extra, id)
		}
	}
	slices.Sort(lost)
	slices.Sort(doubled)
	slices.Sort(extra)
	return lost, doubled, extra
}

func first(ids []string) []string { return ids[:min(len(ids), 5)] }
