package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
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
	inboxsqs "github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// TestMain runs the command itself, as its main does, when a test starts
// this binary as a child (INBOX_CMD_MAIN=1): so that a test can SIGKILL a
// replay midway (killPointEnv).
func TestMain(m *testing.M) {
	// Every add writes on a terminal, also in a command run as a child:
	// a test of quiet means something, and a short one shows progress.
	progressInterval = 0
	if os.Getenv("INBOX_CMD_MAIN") == "1" {
		os.Exit(exitCode(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	// The command finds AWS credentials and a region as the AWS CLI does;
	// the emulator checks neither. Set here, before any test runs (they
	// are parallel), and so inherited by the commands run as children.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
	// The emulator's queues are made before any traffic (see sqsenv).
	if err := sqsenv.Precreate(2, 2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// replayBroker is a broker for TestReplay: a source for the consumer, a
// publisher for the test's messages, and the command's broker flags.
type replayBroker struct {
	src   broker.Source
	pub   broker.Publisher
	dest  string // subject or routing key
	flags []string
	// window is how long a NATS stream drops a republished ID (0: RabbitMQ).
	window time.Duration
}

const natsDupWindow = 1500 * time.Millisecond

func natsReplayBroker(t *testing.T) *replayBroker {
	t.Helper()
	ctx := context.Background()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS at "+testenv.NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	name := testenv.Name("CMDREPLAY_")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Duplicates: natsDupWindow}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "c", AckWait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := natsjs.NewPublisher(js, nil)
	return &replayBroker{src: src, pub: pub, dest: name + ".msgs", window: natsDupWindow,
		flags: []string{"-nats", testenv.NATSURL(), "-subject", name + ".msgs"}}
}

func rabbitReplayBroker(t *testing.T) *replayBroker {
	t.Helper()
	ctx := context.Background()
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ at "+testenv.AMQPURL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	queue := testenv.Name("cmdreplay_")
	src, err := rabbitmq.NewSource(ctx, &rabbitmq.Config{URL: testenv.AMQPURL(), Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
	})
	pub, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: testenv.AMQPURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return &replayBroker{src: src, pub: pub, dest: queue, flags: []string{"-amqp", testenv.AMQPURL(), "-routing-key", queue}}
}

func kafkaReplayBroker(t *testing.T) *replayBroker {
	t.Helper()
	ctx := context.Background()
	topic := testenv.Name("cmdreplay_")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: addrs, Topic: topic, Group: "c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	pub, err := kafka.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &replayBroker{src: src, pub: pub, dest: topic, flags: []string{"-kafka", strings.Join(addrs, ","), "-topic", topic}}
}

func sqsReplayBroker(t *testing.T) *replayBroker { return sqsQueueReplayBroker(t, false) }

// sqsFIFOReplayBroker: the queue drops a message whose deduplication ID
// it saw within 5 minutes; the replays must not be dropped.
func sqsFIFOReplayBroker(t *testing.T) *replayBroker { return sqsQueueReplayBroker(t, true) }

func sqsQueueReplayBroker(t *testing.T, fifo bool) *replayBroker {
	t.Helper()
	ctx := context.Background()
	cl := sqsenv.Client()
	queue := sqsenv.Queue(t, fifo)
	out, err := cl.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &queue})
	if err != nil {
		testenv.Unavailable(t, "SQS at "+sqsenv.Endpoint(), err)
	}
	src, err := inboxsqs.NewSource(ctx, &inboxsqs.Config{Client: cl, Queue: queue, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	pub, err := inboxsqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &replayBroker{src: src, pub: pub, dest: queue, flags: []string{"-sqs", *out.QueueUrl, "-sqs-endpoint", sqsenv.Endpoint()}}
}

// TestReplay: a consumer dead-letters messages whose handler fails for
// good; once the handler is fixed, dead-letters replay sends each back
// through the broker and the running consumer processes it exactly once:
// also when replay runs twice (exit 4), and when the command is SIGKILLed
// after the publish, before COMMIT (the copy is acked as a duplicate, the
// dead letter stays) and run again. On NATS, a replay within the stream's
// duplicate window fails with exit 75 and changes nothing. Kafka runs on
// kfake, SQS on the goaws emulator, with a standard queue and a FIFO one,
// which drops a deduplication ID it saw within 5 minutes: the replays
// there come at once after the originals.
func TestReplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, db string
		broker   func(*testing.T) *replayBroker
	}{{"nats", "postgres", natsReplayBroker}, {"rabbitmq", "sqlite", rabbitReplayBroker}, {"kafka", "mysql", kafkaReplayBroker},
		{"sqs", "postgres", sqsReplayBroker}, {"sqs-fifo", "sqlite", sqsFIFOReplayBroker}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testReplay(t, tc.broker(t), openDB(t, tc.db))
		})
	}
}

func testReplay(t *testing.T, b *replayBroker, e *dbEnv) {
	ctx := context.Background()
	counts := &inbox.Counts{}
	ib := e.inbox(t, inbox.Config{Consumer: "replay", Hooks: []inbox.Hook{counts}})
	var broken sync.Map // IDs whose handler fails for good
	handler := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		if _, ok := broken.Load(msg.ID); ok {
			return inbox.Permanent(errors.New("unknown account (until fixed)"))
		}
		return e.effect(ctx, tx, msg)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(runCtx, ib, b.src, handler, &inbox.ConsumerConfig{Workers: 2}) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	in := e.driver
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 15 s for %s", what)
			}
		}
	}
	// deadLetter publishes id with its handler broken and returns its dead
	// letter's ID once it is dead-lettered.
	deadLetter := func(id string) (int64, time.Time) {
		t.Helper()
		broken.Store(id, true)
		published := time.Now()
		if err := b.pub.Publish(ctx, &broker.Message{ID: id, Subject: b.dest, Type: "payment", Payload: []byte("pay " + id),
			Headers: map[string]string{"Trace": "t-" + id}}); err != nil {
			t.Fatal(err)
		}
		var dlID int64
		wait("the dead letter of "+id, func() bool {
			found, err := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				if string(f.Key.MessageID) == id {
					dlID = f.ID
					return true
				}
			}
			return false
		})
		return dlID, published
	}
	replay := func(dlID int64, wantCode int) []replayJSON {
		t.Helper()
		var out []replayJSON
		cmdJSON(t, &out, wantCode, append(append([]string{"dead-letters", "replay", "-json", "-consumer", "replay"}, append(b.flags, e.flags...)...), fmt.Sprint(dlID))...)
		return out
	}
	afterWindow := func(since time.Time) { time.Sleep(time.Until(since.Add(b.window + 300*time.Millisecond))) }
	gone := func(dlID int64) bool {
		_, err := in.DeadLetterGet(ctx, dlID)
		return errors.Is(err, store.ErrNotFound)
	}

	// A replay, then the same again.
	dl1, pub1 := deadLetter("m-1")
	broken.Delete("m-1")
	afterWindow(pub1)
	if out := replay(dl1, 0); len(out) != 1 || out[0].Status != "replayed" || out[0].MessageID != "m-1" || out[0].Consumer != "replay" {
		t.Fatalf("replay: %+v, want m-1 of consumer replay replayed", out)
	}
	wait("m-1's effect", func() bool { return e.effects(t, "m-1") == 1 })
	if out := replay(dl1, exitNotFound); len(out) != 1 || out[0].Status != "not_found" {
		t.Fatalf("second replay: %+v, want not_found", out)
	}

	// A replay killed after the publish, before COMMIT, then run again.
	dl2, pub2 := deadLetter("m-2")
	broken.Delete("m-2")
	afterWindow(pub2)
	dups := counts.Duplicates.Load()
	child := exec.Command(os.Args[0], append(append([]string{"dead-letters", "replay", "-consumer", "replay"}, append(b.flags, e.flags...)...), fmt.Sprint(dl2))...)
	child.Env = append(os.Environ(), "INBOX_CMD_MAIN=1", killPointEnv+"=replay-before-commit")
	out, err := child.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the replay to kill: %v, want SIGKILL\n%s", err, out)
	}
	killed := time.Now()
	wait("the published copy acked as a duplicate", func() bool { return counts.Duplicates.Load() > dups })
	if det, err := in.DeadLetterGet(ctx, dl2); err != nil || det.RowState != store.RowDead || e.effects(t, "m-2") != 0 {
		t.Fatalf("after the killed replay: %+v, %v, %d effects; want the dead letter, its dead row, no effect", det, err, e.effects(t, "m-2"))
	}
	afterWindow(killed)
	if out := replay(dl2, 0); len(out) != 1 || out[0].Status != "replayed" {
		t.Fatalf("replay after the kill: %+v, want replayed", out)
	}
	wait("m-2's effect", func() bool { return e.effects(t, "m-2") == 1 && gone(dl2) })

	if b.window > 0 {
		// Within the duplicate window: exit 75, nothing changed; after it, replayed.
		dl3, pub3 := deadLetter("m-3")
		broken.Delete("m-3")
		code, stdout, stderr := runCmd(t, append(append([]string{"dead-letters", "replay", "-consumer", "replay"}, append(b.flags, e.flags...)...), fmt.Sprint(dl3))...)
		t.Logf("replay %v after the publish: exit %d", time.Since(pub3), code)
		if time.Since(pub3) < b.window && (code != exitTempFail || stdout != "" || !strings.Contains(stderr, "duplicate window of 1.5s") ||
			!strings.Contains(stderr, "nothing changed")) {
			t.Fatalf("replay within the duplicate window: exit %d, stdout %q, stderr %q; want 75 and why on stderr", code, stdout, stderr)
		}
		if det, err := in.DeadLetterGet(ctx, dl3); code == exitTempFail && (err != nil || det.RowState != store.RowDead) {
			t.Fatalf("after the refused replay: %+v, %v; want the dead letter and its dead row", det, err)
		}
		afterWindow(pub3)
		if code == exitTempFail {
			replay(dl3, 0)
		}
		wait("m-3's effect", func() bool { return e.effects(t, "m-3") == 1 })
	}
	time.Sleep(300 * time.Millisecond) // a doubled effect would show by now
	for _, id := range []string{"m-1", "m-2", "m-3"} {
		if n := e.effects(t, id); n > 1 {
			t.Errorf("%s: %d effects, want at most 1", id, n)
		}
	}
	if left, _ := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 10}); len(left) != 0 {
		raw, _ := json.Marshal(left)
		t.Errorf("dead letters left: %s", raw)
	}
}
