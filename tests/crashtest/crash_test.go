package crashtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// The points at which the child kills itself with SIGKILL: in the
// processing of a message, and in the transaction that records a failed
// attempt or a dead letter.
var points = []string{"after-claim", "after-write", "before-commit", "after-commit", "during-ack",
	"before-failure-commit", "after-failure-commit"}

// Every poisonEvery-th message fails for good: its handler writes, then
// fails, maxAttempts times, and the message ends as a dead letter.
const (
	poisonEvery = 5
	maxAttempts = 3
)

func poison(i int) bool { return i%poisonEvery == 0 }

// crashEvery: a child dies at its point once its handler has run this many
// times, so that each child makes progress before it dies.
const crashEvery = 20

func TestMain(m *testing.M) {
	if point := os.Getenv("INBOX_CRASH_CHILD"); point != "" {
		if err := child(point); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	// The SQS queues, before any traffic (see sqsenv); the children reach
	// the emulator of this process.
	if err := sqsenv.Precreate(len(points), 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func messages() int {
	if n, err := strconv.Atoi(os.Getenv("INBOX_CRASH_MESSAGES")); err == nil && n > 0 {
		return n
	}
	return 200
}

// TestCrash runs, for each broker and kill point, consumers that die there
// again and again until every message is processed, then checks the
// ledger.
func TestCrash(t *testing.T) {
	for _, b := range []string{"nats", "rabbitmq", "kafka", "sqs"} {
		for _, point := range points {
			t.Run(b+"/"+point, func(t *testing.T) {
				t.Parallel()
				runPoint(t, b, point, "single", messages())
			})
		}
	}
}

// TestCrashBatch is TestCrash for batch consumption (ConsumerConfig.BatchSize:
// ProcessBatch, killed mid-batch, before and after its COMMIT) on NATS and
// on Kafka (whose batches are a partition's consecutive records,
// broker.BatchSource), and for ProcessQueued's one round trip
// (killed before and after it) on NATS.
func TestCrashBatch(t *testing.T) {
	for _, run := range []struct{ broker, mode string }{{"nats", "batch"}, {"kafka", "batch"}, {"nats", "queued"}} {
		for _, point := range points {
			t.Run(run.broker+"/"+run.mode+"/"+point, func(t *testing.T) {
				t.Parallel()
				runPoint(t, run.broker, point, run.mode, messages())
			})
		}
	}
}

// destination makes a fresh stream, queue or topic and returns its name, a
// publisher to it, and what the children's environment needs to reach it.
func destination(t *testing.T, brokerName string) (string, broker.Publisher, []string) {
	t.Helper()
	ctx := context.Background()
	switch brokerName {
	case "kafka": // in this process; the children connect to it
		topic := testenv.Name("crash_")
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		pub, err := kafka.NewPublisher(cl, nil)
		if err != nil {
			t.Fatal(err)
		}
		return topic, pub, []string{"INBOX_CRASH_KAFKA=" + strings.Join(c.ListenAddrs(), ",")}
	case "sqs": // a queue of the emulator in this process, or of INBOX_SQS_ENDPOINT
		queue := sqsenv.Queue(t, false)
		pub, err := sqs.NewPublisher(sqsenv.Client(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return queue, pub, []string{"INBOX_CRASH_SQS=" + sqsenv.Endpoint()}
	case "nats":
		nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
		if err != nil {
			testenv.Unavailable(t, "NATS", err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		stream := testenv.Name("CRASH_")
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".msgs"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
		pub, err := natsjs.NewPublisher(js, nil)
		if err != nil {
			t.Fatal(err)
		}
		return stream, pub, nil
	default:
		queue := testenv.Name("crash_")
		cfg := &rabbitmq.Config{URL: testenv.AMQPURL(), Queue: queue}
		if err := rabbitmq.Declare(ctx, cfg); err != nil {
			testenv.Unavailable(t, "RabbitMQ", err)
		}
		t.Cleanup(func() {
			if conn, err := amqp.Dial(testenv.AMQPURL()); err == nil {
				if ch, err := conn.Channel(); err == nil {
					_, _ = ch.QueueDelete(queue, false, false, false)
				}
				conn.Close()
			}
		})
		pub, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: testenv.AMQPURL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close() })
		return queue, pub, nil
	}
}

func runPoint(t *testing.T, brokerName, point, mode string, n int) {
	ctx := context.Background()
	pool := pgenv.Pool(t, 4)
	schema := testenv.Name("crash_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".ledger (id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	dest, pub, childEnv := destination(t, brokerName)
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	subject := dest
	if brokerName == "nats" {
		subject = dest + ".msgs"
	}
	for i := range n {
		id := fmt.Sprintf("msg-%d", i)
		if poison(i) {
			id = fmt.Sprintf("poison-%d", i)
		}
		if err := pub.Publish(ctx, &broker.Message{ID: id, Subject: subject, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}

	crashes, deadline := 0, time.Now().Add(2*time.Minute+time.Duration(n)*20*time.Millisecond)
	for done(t, pool, schema) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d messages processed or dead-lettered after %d crashes", point, done(t, pool, schema), n, crashes)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "INBOX_CRASH_CHILD="+point, "INBOX_CRASH_MODE="+mode, "INBOX_CRASH_SCHEMA="+schema,
			"INBOX_CRASH_BROKER="+brokerName, "INBOX_CRASH_DEST="+dest, "INBOX_CRASH_TOTAL="+strconv.Itoa(n))
		cmd.Env = append(cmd.Env, childEnv...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			crashes++
		case err != nil:
			t.Fatalf("%s: child failed: %v\n%s", point, err, out)
		}
	}
	rows, err := pool.Query(ctx, "SELECT id, count(*) FROM "+schema+".ledger GROUP BY id HAVING count(*) <> 1")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID string
		N  int
	}])
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 || done(t, pool, schema) != n {
		t.Fatalf("%s: %d messages with effects other than 1 (first %v); %d of %d done", point, len(bad), bad[:min(len(bad), 3)], done(t, pool, schema), n)
	}
	// Each poison message, and only those: no effect, exactly one dead
	// letter, which records maxAttempts attempts and keeps the payload.
	var letters, poisoned, wrong int
	err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT message_id) FILTER (WHERE message_id LIKE 'poison-%'),
		count(*) FILTER (WHERE attempts <> $1 OR payload IS DISTINCT FROM message_id
			OR message_id IN (SELECT convert_to(id, 'UTF8') FROM `+schema+`.ledger))
		FROM `+schema+`.inbox_dead_letters`, maxAttempts).Scan(&letters, &poisoned, &wrong)
	if err != nil {
		t.Fatal(err)
	}
	if want := (n + poisonEvery - 1) / poisonEvery; letters != want || poisoned != want || wrong != 0 {
		t.Fatalf("%s: %d dead letters for %d poison messages, %d of them wrong (attempts, payload or an effect), want one right one for each of %d",
			point, letters, poisoned, wrong, want)
	}
	if want := minCrashes(mode, point, n); crashes < want {
		t.Fatalf("%s: only %d crashes for %d messages, want at least %d: the kill point was not reached", point, crashes, n, want)
	}
	t.Logf("%s: %d messages, each effect exactly once, after %d SIGKILLs", point, n, crashes)
}

// minCrashes is how many SIGKILLs show that the children reached point:
// half of one per crashEvery messages. A batch's COMMIT is a failure's
// (before-failure-commit) when the batch holds a poison message, as 4 of
// 5 batches of 4 do. So in batch mode before-commit comes about every
// fifth batch, a child handles 40 messages or so before it dies there,
// and a run of 200 had 3 crashes: the bound is one per 5 × crashEvery.
func minCrashes(mode, point string, n int) int {
	if mode == "batch" && point == "before-commit" {
		return n / crashEvery / 5
	}
	return n / crashEvery / 2
}

// done counts the messages done: distinct ones in the ledger, and dead
// letters.
func done(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	n, err := doneCount(context.Background(), pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func doneCount(ctx context.Context, pool *pgxpool.Pool, schema string) (n int, err error) {
	err = pool.QueryRow(ctx, "SELECT (SELECT count(DISTINCT id) FROM "+schema+".ledger) + (SELECT count(*) FROM "+schema+".inbox_dead_letters)").Scan(&n)
	return n, err
}

// child consumes until every message is in the ledger, killing itself at
// point once it has handled crashEvery messages.
func child(point string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema, dest := os.Getenv("INBOX_CRASH_SCHEMA"), os.Getenv("INBOX_CRASH_DEST")
	total, _ := strconv.Atoi(os.Getenv("INBOX_CRASH_TOTAL"))
	pool, err := pgxpool.New(ctx, pgenv.DSN())
	if err != nil {
		return err
	}
	defer pool.Close()
	inner, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	crashNow := func(at string) {
		if at == point && handled.Load() >= crashEvery {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	d := &crashDriver{Driver: inner, crash: crashNow}
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "crash", MaxAttempts: maxAttempts,
		Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		return err
	}
	src, err := source(ctx, os.Getenv("INBOX_CRASH_BROKER"), dest)
	if err != nil {
		return err
	}
	defer src.Close()
	h := func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		handled.Add(1)
		crashNow("after-claim")
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".ledger (id) VALUES ($1)", m.ID); err != nil {
			return err
		}
		crashNow("after-write")
		if strings.HasPrefix(m.ID, "poison-") {
			return errors.New("poison")
		}
		return nil
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { // stop once everything is done
		for cctx.Err() == nil {
			if n, err := doneCount(cctx, pool, schema); err == nil && n >= total {
				time.Sleep(1500 * time.Millisecond) // let the last acks go out
				stop()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	csrc := &crashSource{Source: src, crash: crashNow}
	switch os.Getenv("INBOX_CRASH_MODE") {
	case "batch":
		return inbox.Consume(cctx, ib, csrc, h, &inbox.ConsumerConfig{Workers: 2, BatchSize: 4, BatchLinger: 20 * time.Millisecond})
	case "queued":
		// The queued handler runs before the claim: its kill points are
		// before the round trip (after-claim, after-write) and around it
		// (before-commit, after-failure-commit: see crashDriver).
		qh := func(ctx context.Context, q *inbox.Queue, m *inbox.Message) error {
			handled.Add(1)
			crashNow("after-claim")
			q.Add("INSERT INTO "+schema+".ledger (id) VALUES ($1)", m.ID)
			crashNow("after-write")
			if strings.HasPrefix(m.ID, "poison-") {
				q.Add("SELECT 1/0") // fails after the write, which must not apply
			}
			return nil
		}
		return consumeQueued(cctx, ib, csrc, qh)
	}
	return inbox.Consume(cctx, ib, csrc, h, &inbox.ConsumerConfig{Workers: 4})
}

// consumeQueued consumes with ProcessQueued, one message at a time per
// worker, acking by outcome, as Consume does with Process.
func consumeQueued(ctx context.Context, ib *inbox.Inbox[pgx.Tx], src broker.Source, qh inbox.QueuedHandler) error {
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				d, err := src.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				m := d.Message()
				out, _ := ib.ProcessQueued(ctx, inbox.Message{ID: m.ID, Payload: m.Payload}, qh)
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if out.Ack() {
					_ = d.Ack(actx)
				} else {
					_ = d.Nack(actx, out.Delay)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// crashDriver kills the process just before the COMMIT of a message (or
// of a batch), and before and after the COMMIT of a failure's transaction
// (an attempt or a dead letter: the transactions that Begin opens for
// them, not BeginClaim, nor a batch's, which claims with ClaimBatch,
// unless it is the second pass that records its failures). It
// passes ProcessBatch's and ProcessQueued's methods through, with their
// kill points.
type crashDriver struct {
	*pgxstore.Driver
	crash    func(at string)
	failures sync.Map // pgx.Tx from Begin, not (yet) a batch's -> struct{}
}

func (d *crashDriver) Begin(ctx context.Context, p *store.BeginParams) (pgx.Tx, error) {
	tx, err := d.Driver.Begin(ctx, p)
	if err == nil {
		d.failures.Store(tx, struct{}{})
	}
	return tx, err
}

func (d *crashDriver) ClaimBatch(ctx context.Context, tx pgx.Tx, p *store.ClaimBatchParams) ([]store.ClaimResult, error) {
	d.failures.Delete(tx) // a batch's transaction: its COMMIT is a message's
	return d.Driver.ClaimBatch(ctx, tx, p)
}

// Savepoint marks a batch's second pass, which records the failures of
// the batch's failing messages: its COMMIT is a failure's.
func (d *crashDriver) Savepoint(ctx context.Context, tx pgx.Tx, name string) error {
	d.failures.Store(tx, struct{}{})
	return d.Driver.Savepoint(ctx, tx, name)
}

func (d *crashDriver) ClaimAndRun(ctx context.Context, p *store.ClaimParams, stmts []store.Statement) (*store.ClaimResult, error) {
	d.crash("before-commit")
	res, err := d.Driver.ClaimAndRun(ctx, p, stmts)
	if err == nil && res.Claimed {
		d.crash("after-failure-commit") // committed, not yet acked
	}
	return res, err
}

func (d *crashDriver) Commit(ctx context.Context, tx pgx.Tx) error {
	if _, failure := d.failures.LoadAndDelete(tx); failure {
		d.crash("before-failure-commit")
		err := d.Driver.Commit(ctx, tx)
		d.crash("after-failure-commit")
		return err
	}
	d.crash("before-commit")
	return d.Driver.Commit(ctx, tx)
}

func (d *crashDriver) Rollback(ctx context.Context, tx pgx.Tx) error {
	d.failures.Delete(tx)
	return d.Driver.Rollback(ctx, tx)
}

// crashSource kills the process after COMMIT, before the ack, or while
// the ack is in flight: sent 1 ms earlier, it may or may not have reached
// the server, and the process does not know which.
type crashSource struct {
	broker.Source
	crash func(at string)
}

func (s *crashSource) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := s.Source.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &crashDelivery{Delivery: d, crash: s.crash}, nil
}

type crashDelivery struct {
	broker.Delivery
	crash func(at string)
}

func (d *crashDelivery) Ack(ctx context.Context) error {
	d.crash("after-commit")
	errc := make(chan error, 1)
	go func() { errc <- d.Delivery.Ack(ctx) }()
	time.Sleep(time.Millisecond) // the ack is on the wire, not yet confirmed
	d.crash("during-ack")
	return <-errc
}

// source consumes dest: a stream with a short AckWait, an SQS queue with
// a short visibility timeout, or a RabbitMQ queue, whose unacked
// deliveries come back as soon as the killed process's connection closes.
func source(ctx context.Context, brokerName, dest string) (broker.Source, error) {
	if brokerName == "kafka" {
		// The children are one static member of the group, so that the next
		// one takes the killed one's place, and its partitions, at once.
		return kafka.NewSource(ctx, &kafka.Config{Brokers: strings.Split(os.Getenv("INBOX_CRASH_KAFKA"), ","), Topic: dest, Group: "crash",
			CommitInterval: 100 * time.Millisecond,
			Options:        []kgo.Opt{kgo.InstanceID("crash-child"), kgo.SessionTimeout(500 * time.Millisecond), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)}})
	}
	if brokerName == "sqs" {
		return sqs.NewSource(ctx, &sqs.Config{Client: sqsenv.ClientOn(os.Getenv("INBOX_CRASH_SQS")), Queue: dest,
			VisibilityTimeout: time.Second, WaitTime: time.Second})
	}
	if brokerName == "nats" {
		nc, err := nats.Connect(testenv.NATSURL())
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		return natsjs.NewSource(ctx, js, &natsjs.Config{Stream: dest, Durable: "crash", AckWait: time.Second})
	}
	return rabbitmq.NewSource(ctx, &rabbitmq.Config{URL: testenv.AMQPURL(), Queue: dest, NoDeclare: true})
}
