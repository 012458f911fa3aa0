package rabbitcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/killcount"
	"github.com/inboxkit/inbox/tests/internal/rabbitcluster"
)

const (
	// defaultMessages is the messages of the CI-sized run;
	// INBOX_RABBITCLUSTER_MESSAGES sets more.
	defaultMessages = 3000
	// rate is the messages the producer commits per second. It is above
	// what the consumers take with work, so that each holds a full
	// prefetch, and some deliveries are in flight when the leader dies.
	rate = 300
	// work is each handler's time in its transaction.
	work = 40 * time.Millisecond
	// retryEvery: every retryEvery-th message fails its first attempt
	// with a delay of retryDelay, so that retries wait in a delay queue
	// (the 5 s bucket) when the leader dies.
	retryEvery = 20
	retryDelay = 3 * time.Second
	// downFor is how long the killed node stays down at least.
	downFor = 5 * time.Second
	// stallAfter: this long without a new effect once everything was
	// produced ends the wait (the check then names what is missing).
	stallAfter = 30 * time.Second
	// settle: time for late duplicates to show before the check.
	settle = 2 * time.Second
)

// TestLeaderKilled runs an outbox relay publishing to a quorum queue on
// three nodes and three inbox consumers, two per message and one in
// batches, one connected to each node. Mid-run it kills the node that
// leads the queue with SIGKILL, keeps it down, and restarts it. Every
// message must have exactly one effect in the ledger, and the consumer
// of the dead node must move to a live node by itself.
func TestLeaderKilled(t *testing.T) {
	c := need(t)
	n := messages(t, defaultMessages)
	began := time.Now()
	r := newRig(t, c, n)
	r.start(t)

	leader := r.leader(t)
	r.waitProduced(t, n/2, time.Minute)
	k := r.kill(t, leader)
	r.waitMoved(t, k)
	r.restart(t, k)
	r.waitAll(t)
	time.Sleep(settle)
	r.stop(t)
	r.check(t, k)
	t.Logf("%d messages in %v (cluster start-up %v before)", n, time.Since(began).Round(100*time.Millisecond), started.Round(time.Millisecond))
}

// rig is one run: the schema, the queue, and what runs on them.
type rig struct {
	c      *rabbitcluster.Cluster
	n      int
	queue  string
	schema string
	pool   *pgxpool.Pool
	driver *pgxstore.Driver

	consumers []*consumer
	processed times           // every Processed outcome's time, all consumers
	retried   retried         // the messages that had their retry
	pubErrs   [2]atomic.Int64 // per relay: publications that failed, and were retried
	published [2]atomic.Int64 // per relay
	committed atomic.Int64    // messages the producer committed
	produced  atomic.Bool
	kills     killcount.Counter

	stopRelays    context.CancelFunc
	stopConsumers context.CancelFunc
	done          sync.WaitGroup
	errs          chan error
}

// consumer is one inbox consumer: its Source's node order, its mode and
// what it counted.
type consumer struct {
	name   string
	batch  int
	counts inbox.Counts
	log    *records
	src    *rabbitmq.Source
	ib     *inbox.Inbox[pgx.Tx]
}

func newRig(t *testing.T, c *rabbitcluster.Cluster, n int) *rig {
	t.Helper()
	ctx := context.Background()
	pool, schema := pgenv.PoolInSchema(t, 48)
	r := &rig{c: c, n: n, queue: testenv.Name("rabbitc_"), schema: schema, pool: pool, errs: make(chan error, 16)}
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	r.driver = d
	if err := inbox.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	// No unique key: a message processed twice shows as two rows.
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (message_id text NOT NULL, consumer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(ctx, &rabbitmq.Config{URLs: c.URLs(), Queue: r.queue}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.deleteQueues(t) })
	return r
}

// rotate returns urls starting at the i-th, so that each client first
// connects to another node.
func rotate(urls []string, i int) []string {
	i %= len(urls)
	return append(slices.Clone(urls[i:]), urls[:i]...)
}

func (r *rig) start(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	relayCtx, stopRelays := context.WithCancel(ctx)
	consumeCtx, stopConsumers := context.WithCancel(ctx)
	r.stopRelays, r.stopConsumers = stopRelays, stopConsumers
	t.Cleanup(func() {
		stopRelays()
		stopConsumers()
		done := make(chan struct{})
		go func() { r.done.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("the relays and consumers did not end within a minute of the cleanup")
		}
	})

	for i := range 2 {
		relay := r.newRelay(t, relayCtx, i) // relay1 on node 1, relay2 on node 2
		r.goRun(func() error { return relay.Run(relayCtx) })
	}
	r.goRun(func() error { return r.produce(relayCtx) })
	// consumer1 alone first, on node 1, which leads the queue: its first
	// retry declares the delay queue there, so that the kill strikes the
	// delay queue's leader too.
	for i, mode := range []int{1, 1, 8} {
		cs := r.newConsumer(t, i, mode)
		r.consumers = append(r.consumers, cs)
		r.goRun(func() error {
			return inbox.Consume(consumeCtx, cs.ib, cs.src, r.handler(cs.name),
				&inbox.ConsumerConfig{Workers: 4, BatchSize: cs.batch, ShutdownTimeout: 5 * time.Second})
		})
		if i == 0 {
			r.waitRetried(t, time.Minute)
		}
	}
}

// waitRetried waits for the first Retry outcome.
func (r *rig) waitRetried(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for r.retried.count() == 0 {
		r.failed(t)
		if time.Now().After(deadline) {
			t.Fatalf("no retry within %v", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rig) goRun(fn func() error) {
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			r.errs <- err
		}
	}()
}

func (r *rig) newConsumer(t *testing.T, i, batch int) *consumer {
	t.Helper()
	ctx := context.Background()
	cs := &consumer{name: fmt.Sprintf("consumer%d", i+1), batch: batch, log: &records{}}
	if batch > 1 {
		cs.name += "-batch"
	}
	ib, err := inbox.New(ctx, r.driver, &inbox.Config{Consumer: "rabbitc",
		Backoff: inbox.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
		Hooks:   []inbox.Hook{&cs.counts, &r.processed, &r.retried}})
	if err != nil {
		t.Fatal(err)
	}
	cs.ib = ib
	cs.src, err = rabbitmq.NewSource(ctx, &rabbitmq.Config{URLs: rotate(r.c.URLs(), i), Queue: r.queue,
		ConnectionName: "rabbitc " + cs.name, Prefetch: 16,
		ReconnectDelay: 50 * time.Millisecond, ReconnectMaxDelay: time.Second, Logger: cs.log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.src.Close() })
	return cs
}

// handler works a while and writes the ledger row. Every retryEvery-th
// message fails until its Retry outcome, with a delay: in every pass of a
// batch, which runs a failed batch again to find the failing message.
func (r *rig) handler(name string) inbox.Handler[pgx.Tx] {
	return func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		if msgIndex(m.ID)%retryEvery == 0 && !r.retried.has(m.ID) {
			return inbox.RetryAfter(retryDelay, errors.New("fails until retried, on purpose"))
		}
		time.Sleep(work)
		_, err := tx.Exec(ctx, `INSERT INTO ledger (message_id, consumer) VALUES ($1, $2)`, m.ID, name)
		return err
	}
}

func msgID(i int) string { return fmt.Sprintf("m-%07d", i) }

func msgIndex(id string) int {
	var i int
	_, _ = fmt.Sscanf(id, "m-%d", &i)
	return i
}

func (r *rig) newRelay(t *testing.T, ctx context.Context, i int) *outbox.Relay {
	t.Helper()
	pub, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URLs: rotate(r.c.URLs(), i),
		ConnectionName: fmt.Sprintf("rabbitc relay%d", i+1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	publish := outbox.ToBroker(pub)
	relay, err := outbox.NewRelay(ctx, r.driver, &outbox.RelayConfig{
		Publish: func(ctx context.Context, m *outbox.Message) error {
			if err := publish(ctx, m); err != nil {
				r.pubErrs[i].Add(1)
				return err
			}
			r.published[i].Add(1)
			return nil
		},
		Probe: pub.Probe,
		Batch: 16, Lease: 4 * time.Second, PublishTimeout: 2 * time.Second, PollInterval: 200 * time.Millisecond,
		Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// produce commits the messages to the outbox, ten a transaction, at rate.
func (r *rig) produce(ctx context.Context) error {
	ob, err := outbox.New(ctx, r.driver, nil)
	if err != nil {
		return err
	}
	const per = 10
	tick := time.NewTicker(time.Second * per / rate)
	defer tick.Stop()
	for i := 0; i < r.n; i += per {
		msgs := make([]*outbox.Message, 0, per)
		for j := i; j < min(i+per, r.n); j++ {
			msgs = append(msgs, &outbox.Message{ID: msgID(j), Destination: r.queue, Type: "Test", Payload: []byte(msgID(j))})
		}
		if err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error { return ob.Write(ctx, tx, msgs...) }); err != nil {
			return err
		}
		r.committed.Add(int64(len(msgs)))
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.produced.Store(true)
	return nil
}

// effects returns the ledger's rows and distinct messages.
func (r *rig) effects(t *testing.T) (rows, distinct int) {
	t.Helper()
	if err := r.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT message_id) FROM ledger`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

func (r *rig) failed(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.errs:
		t.Fatalf("a consumer, relay or the producer failed: %v", err)
	default:
	}
}

// waitProduced waits until the producer committed want messages.
func (r *rig) waitProduced(t *testing.T, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for r.committed.Load() < int64(want) {
		r.failed(t)
		if time.Now().After(deadline) {
			t.Fatalf("%d messages committed after %v, want %d", r.committed.Load(), within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill is what the kill struck: the node, the queues as they were, and
// the consumers' progress.
type kill struct {
	node       int
	at         time.Time
	processed  []int64 // per consumer, at the kill
	duringDown []int64 // per consumer, processed while the node was down
	published  []int64 // per relay, at the kill
	pubDown    []int64 // per relay, published while the node was down
	restartAt  time.Time
	restarted  time.Duration
}

// leader returns the index of the node that leads the queue. A quorum
// queue's leader moves only when its node fails, and rabbitmqctl takes
// seconds: it is asked before the kill's moment.
func (r *rig) leader(t *testing.T) int {
	t.Helper()
	qs, err := r.c.Queues(context.Background(), r.queue)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("queues before the kill: %s", queuesString(qs))
	leaders := map[string]string{}
	for _, q := range qs {
		leaders[q.Name] = q.Leader
	}
	delay := rabbitmq.DelayQueue(r.queue, 5*time.Second) // retryDelay's bucket
	if leaders[delay] != leaders[r.queue] {
		t.Errorf("delay queue %s led by %s, the queue by %s: want one leader, so that one kill strikes both", delay, leaders[delay], leaders[r.queue])
	}
	if i := slices.IndexFunc(r.c.Nodes, func(n *rabbitcluster.Node) bool { return n.Erlang == leaders[r.queue] }); i >= 0 {
		return i
	}
	t.Fatalf("no leader of %s among the nodes: %s", r.queue, queuesString(qs))
	return -1
}

// kill kills node i, the queue's leader.
func (r *rig) kill(t *testing.T, i int) *kill {
	t.Helper()
	k := &kill{node: i}
	for _, cs := range r.consumers {
		k.processed = append(k.processed, cs.counts.Processed.Load())
	}
	for i := range r.published {
		k.published = append(k.published, r.published[i].Load())
	}
	k.at = time.Now()
	if err := r.c.Kill(i); err != nil {
		t.Fatal(err)
	}
	r.kills.Add("queue leader " + r.c.Nodes[i].Name)
	t.Logf("killed %s, the leader of %s, with %d messages committed, %d published, %d with an effect",
		r.c.Nodes[i].Name, r.queue, r.committed.Load(), r.published[0].Load()+r.published[1].Load(), r.effectsNow(t))
	return k
}

func (r *rig) effectsNow(t *testing.T) int {
	_, d := r.effects(t)
	return d
}

// waitMoved waits downFor, and until every consumer that lost its node
// reconnected, while the node is still down.
func (r *rig) waitMoved(t *testing.T, k *kill) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.failed(t)
		lost, moved := 0, 0
		for _, cs := range r.consumers {
			if cs.log.count("rabbitmq: consumer lost, reconnecting") > 0 {
				lost++
				if cs.log.count("rabbitmq: reconnected") > 0 {
					moved++
				}
			}
		}
		if time.Since(k.at) >= downFor && lost > 0 && lost == moved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the kill: %d consumers lost their connection, %d reconnected while the node was down, want all (and at least one)", lost, moved)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, cs := range r.consumers {
		k.duringDown = append(k.duringDown, cs.counts.Processed.Load()-k.processed[i])
	}
	for i := range r.published {
		k.pubDown = append(k.pubDown, r.published[i].Load()-k.published[i])
	}
}

// restart starts the killed node again.
func (r *rig) restart(t *testing.T, k *kill) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k.restartAt = time.Now()
	if err := r.c.Restart(ctx, k.node); err != nil {
		t.Fatal(err)
	}
	k.restarted = time.Since(k.restartAt)
}

// waitAll waits until every message has an effect, or nothing moves for
// stallAfter once all were produced.
func (r *rig) waitAll(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3*time.Minute + time.Duration(r.n)*20*time.Millisecond)
	last, lastChange := -1, time.Now()
	for {
		r.failed(t)
		_, got := r.effects(t)
		if got == r.n {
			return
		}
		if got != last {
			last, lastChange = got, time.Now()
		}
		if r.produced.Load() && time.Since(lastChange) > stallAfter {
			t.Logf("nothing new for %v: %d of %d messages have an effect", stallAfter, got, r.n)
			return
		}
		if time.Now().After(deadline) {
			t.Logf("deadline passed: %d of %d messages have an effect", got, r.n)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops the relays and the consumers, and waits for them.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	r.stopRelays()
	r.stopConsumers()
	done := make(chan struct{})
	go func() { r.done.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumers and relays still run 30 s after they were told to stop")
	}
	r.failed(t)
}

// check counts lost and doubled messages, and what the kill did.
func (r *rig) check(t *testing.T, k *kill) {
	t.Helper()
	ctx := context.Background()
	counts := map[string]int{}
	rows, err := r.pool.Query(ctx, `SELECT message_id, count(*) FROM ledger GROUP BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var c int
		if err := rows.Scan(&id, &c); err != nil {
			t.Fatal(err)
		}
		counts[id] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var lost, doubled []string
	for i := range r.n {
		switch c := counts[msgID(i)]; {
		case c == 0:
			lost = append(lost, msgID(i))
		case c > 1:
			doubled = append(doubled, msgID(i))
		}
	}
	var outboxLeft int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM `+r.schema+`.outbox`).Scan(&outboxLeft); err != nil {
		t.Fatal(err)
	}
	after, err := r.c.Queues(ctx, r.queue)
	if err != nil {
		t.Fatal(err)
	}
	var dup, retries, dead int64
	var per []string
	for i, cs := range r.consumers {
		dup += cs.counts.Duplicates.Load()
		retries += cs.counts.Retries.Load()
		dead += cs.counts.DeadLettered.Load()
		per = append(per, fmt.Sprintf("%s processed %d (%d while the node was down), duplicates %d, reconnects %d",
			cs.name, cs.counts.Processed.Load(), k.duringDown[i], cs.counts.Duplicates.Load(), cs.log.count("rabbitmq: reconnected")))
	}
	first, pause := r.processed.after(k.at, k.restartAt.Add(k.restarted))
	t.Logf("kills: %d (%s); node down %v, restart took %v", r.kills.Total(), r.kills.String(), k.restartAt.Sub(k.at).Round(time.Millisecond), k.restarted.Round(time.Millisecond))
	t.Logf("first effect after the kill: %v; longest pause in effects from the kill to the restart's end: %v", first.Round(time.Millisecond), pause.Round(time.Millisecond))
	t.Logf("relays published %v while the node was down", k.pubDown)
	t.Logf("redeliveries the inbox skipped (Duplicate): %d; retries: %d (%d on purpose); dead letters: %d; relay publications %d and %d, failed and retried %d and %d",
		dup, retries, (r.n+retryEvery-1)/retryEvery, dead, r.published[0].Load(), r.published[1].Load(), r.pubErrs[0].Load(), r.pubErrs[1].Load())
	t.Logf("consumers: %s", strings.Join(per, "; "))
	t.Logf("queues at the end: %s", queuesString(after))

	if len(lost) > 0 || len(doubled) > 0 {
		t.Errorf("of %d messages %d lost %v and %d doubled %v, want each exactly once", r.n, len(lost), head(lost), len(doubled), head(doubled))
	}
	if len(counts) != r.n {
		t.Errorf("%d distinct messages in the ledger, want %d", len(counts), r.n)
	}
	if outboxLeft != 0 {
		t.Errorf("%d rows left in the outbox (parked or unpublished), want 0", outboxLeft)
	}
	if got, want := r.retried.count(), (r.n+retryEvery-1)/retryEvery; got != want {
		t.Errorf("%d messages had their retry on purpose, want %d", got, want)
	}
	if dead != 0 {
		t.Errorf("%d dead letters, want 0", dead)
	}
	for i, d := range k.duringDown {
		if d == 0 {
			t.Errorf("%s processed nothing while %s was down, want it to go on on a live node", r.consumers[i].name, r.c.Nodes[k.node].Name)
		}
	}
	for i, p := range k.pubDown {
		if p == 0 {
			t.Errorf("relay%d published nothing while %s was down (%d failures in all), want it to go on on a live node",
				i+1, r.c.Nodes[k.node].Name, r.pubErrs[i].Load())
		}
	}
	r.checkQueues(t, after)
	if t.Failed() {
		for _, n := range r.c.Nodes {
			t.Logf("%s log, dead-lettering and leaders:\n%s", n.Name,
				strings.Join(n.LogLines(40, "dlx", "dead-letter", "dead letter", "leader"), "\n"))
		}
	}
}

// checkQueues wants every queue, delay queues included, quorum, with
// all three members online, and empty.
func (r *rig) checkQueues(t *testing.T, qs []rabbitcluster.Queue) {
	t.Helper()
	if len(qs) < 2 {
		t.Errorf("queues %s: want the queue and at least one delay queue", queuesString(qs))
	}
	for _, q := range qs {
		if q.Type != "quorum" || len(q.Members) != len(r.c.Nodes) || q.Messages != 0 {
			t.Errorf("queue %s: type %s, %d members, %d messages; want quorum, %d members, empty", q.Name, q.Type, len(q.Members), q.Messages, len(r.c.Nodes))
		}
	}
}

func head(ids []string) []string { return ids[:min(len(ids), 10)] }

func queuesString(qs []rabbitcluster.Queue) string {
	var parts []string
	for _, q := range qs {
		parts = append(parts, fmt.Sprintf("%s (%s, leader %s, %d/%d online, %d messages)",
			q.Name, q.Type, shortNode(q.Leader), len(q.Online), len(q.Members), q.Messages))
	}
	return strings.Join(parts, ", ")
}

// shortNode returns node1… for an Erlang node name.
func shortNode(erlang string) string {
	name, _, _ := strings.Cut(erlang, "@")
	if i := strings.LastIndex(name, "n"); i >= 0 {
		return "node" + name[i+1:]
	}
	return erlang
}

// deleteQueues deletes the queue and its delay queues, through a node
// that runs.
func (r *rig) deleteQueues(t *testing.T) {
	for _, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		conn, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			continue
		}
		defer conn.Close()
		for _, q := range append([]string{r.queue}, delayQueues(r.queue)...) {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		return
	}
	t.Logf("no node to delete queue %s through", r.queue)
}

func delayQueues(queue string) []string {
	var out []string
	for _, b := range rabbitmq.DefaultDelayBuckets {
		out = append(out, rabbitmq.DelayQueue(queue, b))
	}
	return out
}
