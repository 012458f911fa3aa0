package outboxcrash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/tests/internal/killcount"
)

const (
	// defaultMessages is the orders the producer attempts in CI;
	// INBOX_OUTBOX_CRASH_MESSAGES sets more.
	defaultMessages = 1000
	// minKills is the SIGKILLs a CI-sized run must deliver.
	minKills = 30
	// relayBatch, relayLease: small batches so that a relay dies often
	// with a batch in hand, a short lease so that its rows come back soon.
	relayBatch = 16
	relayLease = 2 * time.Second
	// stallAfter: once the producer is done, this long without any
	// change in the ledgers or outboxes ends the run (lost messages
	// never arrive; the check then names them).
	stallAfter = 10 * time.Second
	// settle: after everything arrived, time for duplicates in flight to
	// arrive too before the check.
	settle = 1500 * time.Millisecond
)

// relayPoints are the relays' kill points, taken in turn.
var relayPoints = []string{"after-claim", "after-publish", "mid-batch", "random"}

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintf(os.Stderr, "outboxcrash %s: %v\n", role, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func messages() int {
	if n, err := strconv.Atoi(os.Getenv("INBOX_OUTBOX_CRASH_MESSAGES")); err == nil && n > 0 {
		return n
	}
	return defaultMessages
}

func orderID(i int) string { return fmt.Sprintf("order-%07d", i) }

// group returns the size of the producer's transaction that starts at
// order i (1 to 8 orders), and whether it rolls back (about one in ten):
// a function of i alone, so that a producer restarted after a kill makes
// the same transactions, and the parent knows which orders commit.
func group(i int) (size int, rollback bool) {
	h := uint64(i+1) * 0x9E3779B97F4A7C15
	h ^= h >> 29
	return 1 + int(h%8), (h>>8)%10 == 0
}

// committable lists the orders of the transactions that do not roll back.
func committable(total int) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < total; {
		size, rollback := group(i)
		for j := i; j < min(i+size, total); j++ {
			if !rollback {
				out[orderID(j)] = true
			}
		}
		i += size
	}
	return out
}

// TestOutboxCrash runs the three stages as separate processes, killing
// relays, consumers and the producer with SIGKILL again and again, and
// checks that each stage's ledger holds the producer's committed orders,
// each exactly once.
func TestOutboxCrash(t *testing.T) {
	t.Parallel()
	n := messages()
	began := time.Now()
	r := newRun(t, n)
	r.supervise(t)
	r.check(t)
	t.Logf("%d orders attempted, %d committed, 3 stages, in %v; SIGKILLs: %d (%s); redeliveries the inboxes deduplicated: %s",
		n, len(r.want), time.Since(began).Round(100*time.Millisecond), r.kills.Total(), r.kills.String(), r.events(t, "duplicate"))
}

// run is one end-to-end run: its schema, stream, queue and children.
type run struct {
	n             int
	want          map[string]bool // the orders that commit
	pool          *pgxpool.Pool
	schema        string
	stream, queue string

	mu    sync.Mutex
	kills killcount.Counter // by "role/point"
	fails []string          // children that failed otherwise
	cmds  map[*exec.Cmd]bool
}

func newRun(t *testing.T, n int) *run {
	t.Helper()
	ctx := context.Background()
	r := &run{n: n, want: committable(n), pool: pgenv.Pool(t, 4), schema: testenv.Name("outboxcrash_"),
		stream: testenv.Name("OUTBOXCRASH_"), queue: testenv.Name("outboxcrash_"),
		cmds: map[*exec.Cmd]bool{}}

	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(ctx, rabbitConfig(r.queue)); err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(testenv.AMQPURL())
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range append([]string{r.queue}, delayQueues(r.queue)...) {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
	// A short duplicate window: a relay re-publishes after its lease (2 s),
	// so that the consumer's inbox, not JetStream's deduplication, must
	// recognize the re-publishes.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: r.stream, Subjects: []string{r.stream + ".orders"},
		Duplicates: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), r.stream) })

	s := r.schema
	if _, err := r.pool.Exec(ctx, `CREATE SCHEMA `+s+`;
		CREATE TABLE `+s+`.orders (id text NOT NULL, n int NOT NULL);
		CREATE TABLE `+s+`.payments (order_id text NOT NULL, message_id text NOT NULL);
		CREATE TABLE `+s+`.shipments (order_id text NOT NULL, message_id text NOT NULL);
		CREATE TABLE `+s+`.events (stage text NOT NULL, kind text NOT NULL);
		CREATE TABLE `+s+`.ctl (k text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.pool.Exec(context.Background(), "DROP SCHEMA "+s+" CASCADE") })
	for _, prefix := range []string{prefixProducer, prefixStage2, prefixStage3} {
		d, err := driver(r.pool, s, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func delayQueues(queue string) []string {
	var out []string
	for _, b := range rabbitmq.DefaultDelayBuckets {
		out = append(out, rabbitmq.DelayQueue(queue, b))
	}
	return out
}

// slot is one process kept running: started again after each kill.
type slot struct {
	role  string
	index int // among the role's slots, so that two relays start at different points
}

// plan draws where the spawn-th process of s dies.
func (s slot) plan(spawn int, rng *rand.Rand) plan {
	switch s.role {
	case "producer":
		return plan{point: "before-commit", at: 20 + rng.IntN(60)}
	case "consumer2", "consumer3":
		return plan{point: "random", delay: time.Duration(200+rng.IntN(1000)) * time.Millisecond}
	}
	return plan{point: relayPoints[(spawn+2*s.index)%len(relayPoints)], at: 2 + rng.IntN(4), k: 1 + rng.IntN(relayBatch-1),
		delay: time.Duration(100+rng.IntN(600)) * time.Millisecond}
}

// supervise runs the children until every stage has everything (or
// nothing moves any more), then tells them to stop.
func (r *run) supervise(t *testing.T) {
	t.Helper()
	slots := []slot{{role: "producer"}, {role: "relay1"}, {role: "relay1", index: 1}, {role: "consumer2"},
		{role: "relay2"}, {role: "relay2", index: 1}, {role: "consumer3"}}
	var (
		stopping atomic.Bool
		wg       sync.WaitGroup
	)
	seed := time.Now().UnixNano()
	t.Logf("schema %s, stream %s, queue %s, seed %d", r.schema, r.stream, r.queue, seed)
	for i, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
			for spawn := 0; !stopping.Load(); spawn++ {
				p := s.plan(spawn, rng)
				killed, err := r.spawn(s.role, p)
				switch {
				case killed:
					r.count(s.role + "/" + p.point)
				case err != nil:
					r.fail(err.Error())
					return
				case s.role == "producer":
					return // all orders written
				}
			}
		}()
	}

	deadline := time.Now().Add(3*time.Minute + time.Duration(r.n)*30*time.Millisecond)
	var last progress
	lastChange := time.Now()
	for {
		time.Sleep(200 * time.Millisecond)
		p, err := r.progress()
		if err != nil {
			t.Errorf("reading progress: %v", err)
			break
		}
		if p != last {
			last, lastChange = p, time.Now()
		}
		if r.failed() {
			break
		}
		if p.complete(len(r.want)) {
			time.Sleep(settle)
			break
		}
		if p.produced && time.Since(lastChange) > stallAfter {
			t.Logf("nothing moved for %v: %+v", stallAfter, p)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("deadline passed: %+v", p)
			break
		}
	}
	stopping.Store(true)
	if _, err := r.pool.Exec(context.Background(), "INSERT INTO "+r.schema+".ctl (k) VALUES ('stop') ON CONFLICT DO NOTHING"); err != nil {
		t.Errorf("telling the children to stop: %v", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("children still running 20 s after stop; killing them")
		r.killChildren()
		<-done
	}
	for _, f := range r.fails {
		t.Error(f)
	}
}

// spawn runs one child until it exits, and reports whether its plan
// killed it.
func (r *run) spawn(role string, p plan) (killed bool, err error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envSchema+"="+r.schema, envStream+"="+r.stream,
		envQueue+"="+r.queue, envTotal+"="+strconv.Itoa(r.n))
	cmd.Env = append(cmd.Env, p.env()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return false, err
	}
	r.mu.Lock()
	r.cmds[cmd] = true
	r.mu.Unlock()
	err = cmd.Wait()
	r.mu.Lock()
	delete(r.cmds, cmd)
	r.mu.Unlock()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s (plan %+v) failed: %v\n%s", role, p, err, tail(out.String(), 4000))
	}
	return false, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// killChildren kills the children still running: only the processes this
// run started, by their own handles.
func (r *run) killChildren() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for cmd := range r.cmds {
		_ = cmd.Process.Kill()
	}
}

func (r *run) count(key string) { r.kills.Add(key) }

func (r *run) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fails = append(r.fails, msg)
}

func (r *run) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fails) > 0
}

// progress is what the parent watches.
type progress struct {
	produced                     bool
	orders                       int
	payments, paymentsDistinct   int
	shipments, shipmentsDistinct int
	outbox1, outbox2             int
}

func (r *run) progress() (p progress, err error) {
	s := r.schema
	err = r.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM `+s+`.ctl WHERE k = 'produced'),
		(SELECT count(*) FROM `+s+`.orders),
		(SELECT count(*) FROM `+s+`.payments), (SELECT count(DISTINCT order_id) FROM `+s+`.payments),
		(SELECT count(*) FROM `+s+`.shipments), (SELECT count(DISTINCT order_id) FROM `+s+`.shipments),
		(SELECT count(*) FROM `+s+`.`+prefixProducer+`outbox), (SELECT count(*) FROM `+s+`.`+prefixStage2+`outbox)`).
		Scan(&p.produced, &p.orders, &p.payments, &p.paymentsDistinct, &p.shipments, &p.shipmentsDistinct, &p.outbox1, &p.outbox2)
	return p, err
}

// complete: every stage has every committed order and the outboxes are
// empty.
func (p progress) complete(want int) bool {
	return p.produced && p.orders == want && p.paymentsDistinct == want && p.shipmentsDistinct == want &&
		p.outbox1 == 0 && p.outbox2 == 0
}

// check compares each ledger with the orders that committed, and looks
// for what the outboxes and inboxes kept.
func (r *run) check(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	orders := r.ledger(t, "SELECT id FROM "+r.schema+".orders")
	// The producer's own ledger is the reference: exactly the orders of
	// the transactions that did not roll back, each once.
	if lost, dup, extra := diff(r.want, orders); len(lost)+len(dup)+len(extra) > 0 {
		t.Errorf("orders: want the %d of the committed transactions once each; %d missing (%v), %d twice (%v), %d from rolled-back ones (%v)",
			len(r.want), len(lost), first(lost), len(dup), first(dup), len(extra), first(extra))
	}
	for _, stage := range []struct{ name, table string }{{"stage 2 (payments, via JetStream)", "payments"}, {"stage 3 (shipments, via RabbitMQ)", "shipments"}} {
		got := r.ledger(t, "SELECT order_id FROM "+r.schema+"."+stage.table)
		lost, dup, extra := diff(r.want, got)
		if len(lost)+len(dup)+len(extra) > 0 {
			t.Errorf("%s: want each of the %d committed orders exactly once; lost %d (%v), applied more than once %d (%v), never committed %d (%v)",
				stage.name, len(r.want), len(lost), first(lost), len(dup), first(dup), len(extra), first(extra))
		}
	}
	for _, prefix := range []string{prefixProducer, prefixStage2} {
		var rows, parked int
		if err := r.pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE parked_at IS NOT NULL) FROM "+r.schema+"."+prefix+"outbox").
			Scan(&rows, &parked); err != nil {
			t.Fatal(err)
		}
		if rows != 0 || parked != 0 {
			t.Errorf("%soutbox: want empty (everything published and deleted), got %d rows, %d of them parked", prefix, rows, parked)
		}
	}
	for _, prefix := range []string{prefixStage2, prefixStage3} {
		var letters int
		if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+r.schema+"."+prefix+"inbox_dead_letters").Scan(&letters); err != nil {
			t.Fatal(err)
		}
		if letters != 0 {
			t.Errorf("%sinbox_dead_letters: want none, got %d", prefix, letters)
		}
	}
	if conflicts := r.events(t, "fingerprint-conflict"); conflicts != "none" {
		t.Errorf("fingerprint conflicts (an ID delivered again with another payload): %s, want none", conflicts)
	}
	if r.n >= defaultMessages && r.kills.Total() < minKills {
		t.Errorf("want at least %d SIGKILLs in a run of %d orders, got %d (%s)", minKills, r.n, r.kills.Total(), r.kills.String())
	}
	for _, point := range relayPoints {
		if r.kills.At("relay1/"+point)+r.kills.At("relay2/"+point) == 0 {
			t.Errorf("no relay was killed at %s (kills: %s)", point, r.kills.String())
		}
	}
	for _, role := range []string{"consumer2", "consumer3"} {
		if r.kills.At(role+"/random") == 0 {
			t.Errorf("%s was never killed (kills: %s)", role, r.kills.String())
		}
	}
}

// events sums the inbox events of kind per stage.
func (r *run) events(t *testing.T, kind string) string {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), "SELECT stage || ' ' || count(*) FROM "+r.schema+".events WHERE kind = $1 GROUP BY stage ORDER BY stage", kind)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		return "none"
	}
	return strings.Join(got, ", ")
}

// ledger counts the rows per order.
func (r *run) ledger(t *testing.T, q string) map[string]int {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, id := range ids {
		out[id]++
	}
	return out
}

// diff returns the orders of want missing from got, those in got more
// than once, and those in got that want lacks, each sorted.
func diff(want map[string]bool, got map[string]int) (lost, dup, extra []string) {
	for id := range want {
		if got[id] == 0 {
			lost = append(lost, id)
		}
	}
	for id, n := range got {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("%s×%d", id, n))
		}
		if !want[id] {
			extra = append(extra, id)
		}
	}
	slices.Sort(lost)
	slices.Sort(dup)
	slices.Sort(extra)
	return lost, dup, extra
}

func first(ids []string) []string { return ids[:min(len(ids), 5)] }
