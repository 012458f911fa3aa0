package kafkacluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/killcount"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envChild); name != "" {
		if err := childMain(name); err != nil {
			fmt.Fprintln(os.Stderr, "kafkacluster child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The cluster and the load.
const (
	brokers    = 3
	partitions = 12
	keys       = 48 // four per partition
	// minChildren and maxChildren bound the consumer processes alive:
	// leaves stop at the one, joins at the other.
	minChildren, maxChildren = 2, 5
	startChildren            = 3
)

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// messages is how many messages a run produces, at rate per second.
func messages() int { return envInt("INBOX_KAFKA_CLUSTER_MESSAGES", 1800) }
func rate() int     { return envInt("INBOX_KAFKA_CLUSTER_RATE", 150) }

// TestRebalanceUnderLoad consumes a topic of a three-broker kfake cluster
// with consumer processes in batch mode, while partition leaders and the
// group coordinator move and consumers are killed, restarted, added and
// stopped; then it checks each message's effect once and each key's
// effects in order. Once with the cooperative-sticky balancer (franz-go's
// default), once with the eager range balancer.
func TestRebalanceUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name, balancer string
		static         bool
	}{
		{"cooperative-sticky", "cooperative-sticky", false},
		{"range", "range", false},
		{"static-members", "cooperative-sticky", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t, tc.balancer, tc.static)
			r.consume(t)
			r.check(t)
		})
	}
}

// run is one test run: the cluster, the schema, the children, and what
// happened.
type run struct {
	c        *kfake.Cluster
	brokers  []string
	topic    string
	group    string
	schema   string
	balancer string
	static   bool // static membership: a restarted child has the killed one's instance ID
	pool     *pgxpool.Pool
	rng      *rand.Rand
	n        int // messages produced

	mu       sync.Mutex
	alive    []*child
	ended    []*child
	started  int
	kills    killcount.Counter // by how: endMidBatch, endAnytime
	changes  killcount.Counter // leader moves, shuffles, coordinator moves, joins, leaves, restarts
	marks    []mark            // the changes made while messages were produced
	produced time.Time         // when the last message was produced
}

// mark is a change to the cluster or the group, at a time.
type mark struct {
	kind string
	at   time.Time
}

func newRun(t *testing.T, balancer string, static bool) *run {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := &run{topic: testenv.Name("kafkac_"), group: testenv.Name("g_"), schema: testenv.Name("kafkac_"),
		balancer: balancer, static: static, rng: rand.New(rand.NewPCG(seed, seed>>1)), n: messages()}
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(partitions, r.topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r.c, r.brokers = c, c.ListenAddrs()
	r.pool = pgenv.Pool(t, 4)
	r.migrate(t)
	t.Cleanup(r.stopAll)
	return r
}

// migrate makes the run's schema: the inbox's tables, the ledger of
// effects and the children's counts.
func (r *run) migrate(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	// n and at are in insertion order, which is not commit order across
	// transactions: prev_ok is what proves the order (see record).
	ddl := `CREATE SCHEMA ` + r.schema + `;
CREATE TABLE ` + r.schema + `.ledger (id text NOT NULL, part int NOT NULL, key text NOT NULL, seq int NOT NULL,
	child text NOT NULL, prev_ok boolean NOT NULL, n bigserial, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON ` + r.schema + `.ledger (key, seq);
CREATE TABLE ` + r.schema + `.counts (child text PRIMARY KEY, processed bigint, duplicates bigint, retries bigint, splits bigint)`
	if _, err := r.pool.Exec(ctx, ddl); err != nil {
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
}

// consume starts the children, produces the messages while changing the
// cluster and the group, waits until every message has its effect, and
// stops the children.
func (r *run) consume(t *testing.T) {
	t.Helper()
	for range startChildren {
		r.join(t, "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r.c.WaitGroupStable(ctx, r.group, startChildren); err != nil {
		t.Fatalf("the group of %d children is not stable: %v (%+v)", startChildren, err, r.c.GroupInfo(r.group))
	}
	produced := make(chan error, 1)
	start := time.Now()
	go func() { produced <- r.produce(ctx) }()
	r.chaos(t, produced)
	t.Logf("%d messages produced in %v", r.n, time.Since(start).Round(time.Millisecond))
	r.drain(t)
	t.Logf("the effects are in %v after the start", time.Since(start).Round(time.Millisecond))
	r.stopAll()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.ended {
		if _, err := c.end(); err != nil {
			t.Error(err)
		}
	}
}

// produce writes r.n messages at rate(): key k's messages go to partition
// k % partitions, with seq 0, 1, 2... in order.
func (r *run) produce(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	const tick = 20 * time.Millisecond
	perTick := max(1, rate()*int(tick)/int(time.Second))
	next := time.Now()
	seqs := make([]int, keys)
	for i := 0; i < r.n; {
		var recs []*kgo.Record
		for ; len(recs) < perTick && i < r.n; i++ {
			k := i % keys
			key := fmt.Sprintf("k%02d", k)
			id := fmt.Sprintf("%s-%06d", key, seqs[k])
			recs = append(recs, &kgo.Record{Topic: r.topic, Partition: int32(k % partitions), Key: []byte(key),
				Value:   fmt.Appendf(nil, "%s %d %d", key, k%partitions, seqs[k]),
				Headers: []kgo.RecordHeader{{Key: broker.DefaultIDHeader, Value: []byte(id)}}})
			seqs[k]++
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("producing message %d: %w", i, err)
		}
		next = next.Add(tick)
		time.Sleep(time.Until(next))
	}
	r.mu.Lock()
	r.produced = time.Now()
	r.mu.Unlock()
	return nil
}

// drain waits until every message has an effect, at most a minute. It
// fails t when some have none then, and returns: check tells which.
func (r *run) drain(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := r.pool.QueryRow(context.Background(), "SELECT count(DISTINCT id) FROM "+r.schema+".ledger").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= r.n {
			return
		}
		if time.Now().After(deadline) {
			g := r.c.GroupInfo(r.group)
			t.Errorf("%d of %d messages have an effect a minute after the last was produced, with %d children alive; the group is %s with %d members",
				n, r.n, r.count(), g.State, len(g.Members))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// join starts a new child and counts it. With static membership, it has
// instance, or a new instance ID when instance is empty.
func (r *run) join(t *testing.T, instance string) {
	t.Helper()
	r.mu.Lock()
	r.started++
	name := childName(r.started)
	if r.static && instance == "" {
		instance = "instance-" + name
	}
	r.mu.Unlock()
	c, err := startChild(name, childEnv(r, name, instance))
	if err != nil {
		t.Fatal(err)
	}
	c.instance = instance
	r.mu.Lock()
	r.alive = append(r.alive, c)
	r.mu.Unlock()
}

// pick removes a random child from the living and returns it (nil: none
// beyond least).
func (r *run) pick(least int) *child {
	return r.pickMarked(least, "")
}

// pickMarked is pick among the children that printed mark.
func (r *run) pickMarked(least int, mark string) *child {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.alive) <= least {
		return nil
	}
	var marked []int
	for i, c := range r.alive {
		if strings.Contains(c.out.String(), mark) {
			marked = append(marked, i)
		}
	}
	if len(marked) == 0 {
		return nil
	}
	i := marked[r.rng.IntN(len(marked))]
	c := r.alive[i]
	r.alive = slices.Delete(r.alive, i, i+1)
	r.ended = append(r.ended, c)
	return c
}

// stopAll asks every living child to leave, and kills those that do not
// within 30 s.
func (r *run) stopAll() {
	var wg sync.WaitGroup
	for c := r.pick(0); c != nil; c = r.pick(0) {
		c.signal(syscall.SIGTERM, endLeave)
		wg.Go(func() {
			if !c.wait(30 * time.Second) {
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		})
	}
	wg.Wait()
}
