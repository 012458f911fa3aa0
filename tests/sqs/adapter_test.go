package sqs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

func newSource(t *testing.T, cl *awssqs.Client, queue string, cfg sqs.Config) *sqs.Source {
	t.Helper()
	cfg.Client, cfg.Queue = cl, queue
	if cfg.WaitTime == 0 {
		cfg.WaitTime = waitTime
	}
	src, err := sqs.NewSource(context.Background(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// eventuallyEmpty waits until the queue holds no message, visible or in
// flight: every one was deleted.
func eventuallyEmpty(t *testing.T, cl *awssqs.Client, name string) {
	t.Helper()
	url := queueURL(t, cl, name)
	brokertest.Eventually(t, 10*time.Second, "the queue still holds messages: not all were deleted", func() bool {
		out, err := cl.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	})
}

// A handler that outlives the visibility timeout without a lease: the
// message is received again meanwhile, so the first delivery's receipt
// handle is stale. Its commit stands, its failed delete is logged, and
// the redelivery is a duplicate, which is deleted.
func TestExpiredReceiptHandle(t *testing.T) {
	t.Parallel()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	hooks := &inbox.Counts{}
	f := brokertest.NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	var calls atomic.Int32
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if calls.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond) // past the 1 s visibility timeout
		}
		return f.Write(ctx, tx, m)
	}
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), &broker.Message{ID: "slow", Subject: name, Payload: []byte("slow")}); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	src := newSource(t, cl, name, sqs.Config{VisibilityTimeout: time.Second})
	stop := f.Consume(t, src, handler, &inbox.ConsumerConfig{Workers: 2, LeaseInterval: -1, Logger: logs.Logger()})
	brokertest.Eventually(t, 15*time.Second, "the redelivery was not skipped as a duplicate", func() bool { return hooks.Duplicates.Load() >= 1 })
	eventuallyEmpty(t, cl, name)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := f.Effects(t, "slow"); n != 1 || hooks.Processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed; want the first commit to stand, once", n, hooks.Processed.Load())
	}
	// A real SQS may accept a stale receipt handle without deleting.
	if sqsenv.Emulated() && !logs.Has("level=WARN", "ack failed", " id=slow ") {
		t.Fatalf("no WARN line for the failed delete of the stale receipt handle; the log:\n%s", logs)
	}
	t.Logf("handler ran %d times, %d duplicates; the log:\n%s", calls.Load(), hooks.Duplicates.Load(), logs)
}

// A message without the ID attribute, or with an ID the inbox refuses
// (over 1024 bytes), is dead-lettered with its body and attributes, then
// deleted.
func TestBadIDDeadLetteredWithAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	hooks := &inbox.Counts{}
	f := brokertest.NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	sendRaw(t, cl, name, "no id", map[string]types.MessageAttributeValue{
		"trace": str("t-1"), "bin": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 0xff}},
	})
	sendRaw(t, cl, name, "long id", map[string]types.MessageAttributeValue{
		broker.DefaultIDHeader: str(strings.Repeat("x", 1025)), "trace": str("t-2"),
	})
	var calls atomic.Int32
	stop := f.Consume(t, newSource(t, cl, name, sqs.Config{VisibilityTimeout: time.Second}),
		func(context.Context, *sql.Tx, *inbox.Message) error { calls.Add(1); return nil }, nil)
	brokertest.Eventually(t, 15*time.Second, "the two messages were not dead-lettered", func() bool { return hooks.DeadLettered.Load() == 2 })
	eventuallyEmpty(t, cl, name)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dls, err := f.Inbox.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 2 || calls.Load() != 0 {
		t.Fatalf("dead letters %+v (%v), handler ran %d times; want 2 dead letters and no handler run", dls, err, calls.Load())
	}
	for _, dl := range dls {
		m := dl.Message
		switch string(m.Payload) {
		case "no id":
			if m.Headers["trace"] != "t-1" || m.Headers["bin"] != "\x00\xff" {
				t.Errorf("dead letter without ID: headers %q, want trace and bin", m.Headers)
			}
		case "long id":
			if m.Headers["trace"] != "t-2" || len(m.Headers[broker.DefaultIDHeader]) != 1025 {
				t.Errorf("dead letter with a long ID: headers %q, want trace and the ID", m.Headers)
			}
		default:
			t.Errorf("dead letter with payload %q", m.Payload)
		}
	}
}

// What a message carries reaches the Message: ID, type, subject, every
// attribute as a header (String, Number, Binary, empty), the body decoded,
// Deliveries from ApproximateReceiveCount; without the ID attribute the ID
// is empty, or SQS's MessageId with IDFromMessageID.
func TestMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, &broker.Message{ID: "m-1", Subject: name, Type: "credit", Payload: []byte{},
		Headers: map[string]string{"trace": "t-1", "bin": "\x00\xff", "empty": ""}}); err != nil {
		t.Fatal(err)
	}
	out, err := cl.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(queueURL(t, cl, name)), MessageBody: aws.String("raw"),
		MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("42")}}})
	if err != nil {
		t.Fatal(err)
	}
	rawID := aws.ToString(out.MessageId)
	src := newSource(t, cl, name, sqs.Config{IDFromMessageID: true, VisibilityTimeout: 5 * time.Second})
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for range 2 {
		d, err := src.Next(nctx)
		if err != nil {
			t.Fatal(err)
		}
		m := d.Message()
		switch {
		case m.ID == "m-1":
			if m.Type != "credit" || len(m.Payload) != 0 || m.Subject != name || m.Deliveries != 1 ||
				m.Headers["trace"] != "t-1" || m.Headers["bin"] != "\x00\xff" || m.Headers["empty"] != "" || len(m.Headers) != 5 {
				t.Errorf("published message %+v", m)
			}
		case m.ID == rawID:
			if string(m.Payload) != "raw" || m.Headers["n"] != "42" || m.Deliveries != 1 {
				t.Errorf("raw message %+v", m)
			}
		default:
			t.Errorf("message %+v: want ID m-1, or the raw message's MessageId %s", m, rawID)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// On a FIFO queue the message group is the Key (or the default group), and
// the deduplication ID the message ID: a re-publish is dropped, even of an
// ID that SQS would refuse as a deduplication ID (sent as its SHA-256).
// The emulator does not return a message's group, so the test reads what
// was sent.
func TestFIFO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	sent := map[string][2]string{} // message ID -> group, dedup ID
	endpoint := sqsenv.Intercepted(t, func(_ http.ResponseWriter, r *http.Request, action string) bool {
		if action != "SendMessage" {
			return false
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var in struct {
			MessageGroupId, MessageDeduplicationId string
			MessageAttributes                      map[string]struct{ StringValue string }
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Errorf("SendMessage request %s: %v", body, err)
		}
		mu.Lock()
		sent[in.MessageAttributes[broker.DefaultIDHeader].StringValue] = [2]string{in.MessageGroupId, in.MessageDeduplicationId}
		mu.Unlock()
		return false
	})
	cl := sqsenv.ClientOn(endpoint)
	name := sqsenv.Queue(t, true)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 100) // 200 bytes of non-ASCII
	sum := sha256.Sum256([]byte(long))
	want := map[string][2]string{"keyed": {"k-1", "keyed"}, "unkeyed": {sqs.DefaultMessageGroup, "unkeyed"}, long: {"k-2", "sha256-" + hex.EncodeToString(sum[:])}}
	for _, m := range []*broker.Message{
		{ID: "keyed", Key: "k-1"}, {ID: "unkeyed"}, {ID: "keyed", Key: "k-1"}, {ID: long, Key: "k-2"}, {ID: long, Key: "k-2"},
	} {
		m.Subject, m.Payload = name, []byte("p")
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatalf("publish %q: %v", m.ID, err)
		}
	}
	mu.Lock()
	for id, w := range want {
		if sent[id] != w {
			t.Errorf("message %q sent with group and deduplication ID %q, want %q", id, sent[id], w)
		}
	}
	mu.Unlock()
	err = pub.Publish(ctx, &broker.Message{ID: "bad-key", Subject: name, Key: "with space", Payload: []byte("p")})
	if !errors.Is(err, broker.ErrInvalidMessage) || !strings.Contains(err.Error(), `"with space"`) {
		t.Errorf("a key SQS refuses as a message group: %v, want broker.ErrInvalidMessage naming it", err)
	}
	src := newSource(t, cl, name, sqs.Config{VisibilityTimeout: 5 * time.Second})
	for range 3 {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := src.Next(nctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		m := d.Message()
		w, ok := want[m.ID]
		switch {
		case !ok:
			t.Errorf("message %q received; want each of %q once", m.ID, want)
		case m.Key != w[0] && !(sqsenv.Emulated() && m.Key == ""):
			t.Errorf("message %q with key %q, want its group %q", m.ID, m.Key, w[0])
		}
		delete(want, m.ID)
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	nctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if d, err := src.Next(nctx); err == nil {
		t.Fatalf("received %q again: the re-publish was not deduplicated", d.Message().ID)
	}
}

// Deletes due together go out in batches: with the delete requests slowed
// down, acks gather behind them.
func TestDeletesBatched(t *testing.T) {
	t.Parallel()
	var single, batch atomic.Int32
	endpoint := sqsenv.Intercepted(t, func(_ http.ResponseWriter, _ *http.Request, action string) bool {
		switch action {
		case "DeleteMessage":
			single.Add(1)
		case "DeleteMessageBatch":
			batch.Add(1)
		default:
			return false
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
	cl := sqsenv.ClientOn(endpoint)
	name := sqsenv.Queue(t, false)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	for i := range n {
		if err := pub.Publish(context.Background(), &broker.Message{ID: fmt.Sprintf("m-%d", i), Subject: name, Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
	}
	f := brokertest.NewFixture(t, inbox.Config{})
	stop := f.Consume(t, newSource(t, cl, name, sqs.Config{}), f.Write, &inbox.ConsumerConfig{Workers: 8})
	brokertest.Eventually(t, 30*time.Second, "not every message was processed", func() bool { return f.Count(t) == n })
	eventuallyEmpty(t, cl, name)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if batch.Load() == 0 || int(single.Load()+batch.Load()) >= n {
		t.Fatalf("%d DeleteMessage and %d DeleteMessageBatch requests for %d acks; want batches", single.Load(), batch.Load(), n)
	}
	t.Logf("%d acks in %d DeleteMessage and %d DeleteMessageBatch requests", n, single.Load(), batch.Load())
}

// Credentials that SQS refuses end Consume with ErrAccessDenied; so does
// NewSource when it cannot resolve the queue for that reason.
func TestAccessDeniedEndsConsume(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	endpoint := sqsenv.Intercepted(t, func(w http.ResponseWriter, _ *http.Request, action string) bool {
		if refuse.Load() {
			sqsenv.WriteError(w, http.StatusForbidden, "InvalidClientTokenId")
			return true
		}
		return false
	})
	cl := sqsenv.ClientOn(endpoint)
	name := sqsenv.Queue(t, false)
	src := newSource(t, cl, name, sqs.Config{})
	f := brokertest.NewFixture(t, inbox.Config{})
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(context.Background(), f.Inbox, src, f.Write, nil) }()
	time.Sleep(200 * time.Millisecond)
	refuse.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, sqs.ErrAccessDenied) || !strings.Contains(err.Error(), "InvalidClientTokenId") {
			t.Fatalf("Consume returned %v, want sqs.ErrAccessDenied with SQS's code", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Consume did not return when SQS refused the credentials")
	}
	if _, err := sqs.NewSource(context.Background(), &sqs.Config{Client: cl, Queue: name}); !errors.Is(err, sqs.ErrAccessDenied) {
		t.Fatalf("NewSource with refused credentials: %v, want sqs.ErrAccessDenied", err)
	}
}

// Receives that fail for another reason (SQS answers 500) are retried
// with a backoff, and logged; the message is then processed.
func TestTransientReceiveErrorsRetried(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	endpoint := sqsenv.Intercepted(t, func(w http.ResponseWriter, _ *http.Request, action string) bool {
		if action == "ReceiveMessage" && failures.Add(1) <= 8 {
			sqsenv.WriteError(w, http.StatusInternalServerError, "InternalError")
			return true
		}
		return false
	})
	cl := sqsenv.ClientOn(endpoint)
	name := sqsenv.Queue(t, false)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), &broker.Message{ID: "after-trouble", Subject: name, Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	f := brokertest.NewFixture(t, inbox.Config{})
	stop := f.Consume(t, newSource(t, cl, name, sqs.Config{Logger: logs.Logger()}), f.Write, nil)
	brokertest.Eventually(t, 20*time.Second, "the message was not processed after the failed receives", func() bool {
		return f.Effects(t, "after-trouble") == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !logs.Has("level=WARN", "receive failed; retrying", "InternalError") {
		t.Fatalf("no WARN line for the failed receives; the log:\n%s", logs)
	}
}

// What Publish refuses, wrapping broker.ErrInvalidMessage, and what it
// takes at the limits: ten attributes, a message of exactly
// MaxMessageSize.
func TestPublishLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	pub, err := sqs.NewPublisher(cl, &sqs.PublisherConfig{MaxMessageSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	headers := func(n int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("h%d", i)] = "v"
		}
		return h
	}
	// ID attribute: "Inbox-Id" (8) + "String" (6) + "m" (1) = 15 bytes.
	tests := []struct {
		name string
		msg  broker.Message
		ok   bool
	}{
		{"no ID", broker.Message{Payload: []byte("p")}, false},
		{"ten attributes", broker.Message{ID: "m", Type: "t", Payload: []byte("p"), Headers: headers(8)}, true},
		{"eleven attributes", broker.Message{ID: "m", Type: "t", Payload: []byte("p"), Headers: headers(9)}, false},
		{"eleven with the body's encoding", broker.Message{ID: "m", Type: "t", Payload: []byte{0}, Headers: headers(8)}, false},
		{"exactly the size", broker.Message{ID: "m", Payload: []byte(strings.Repeat("a", 4096-15))}, true},
		{"a byte over", broker.Message{ID: "m", Payload: []byte(strings.Repeat("a", 4096-15+1))}, false},
		{"a header named by the ID attribute is the ID", broker.Message{ID: "m", Payload: []byte("p"),
			Headers: map[string]string{broker.DefaultIDHeader: "other"}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.msg
			m.Subject = name
			err := pub.Publish(ctx, &m)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Publish: %v, want success", err)
			case !tc.ok && !errors.Is(err, broker.ErrInvalidMessage):
				t.Fatalf("Publish: %v, want broker.ErrInvalidMessage", err)
			}
		})
	}
	// By URL as well as by name.
	if err := pub.Publish(ctx, &broker.Message{ID: "by-url", Subject: queueURL(t, cl, name), Payload: []byte("p")}); err != nil {
		t.Fatalf("Publish to the queue's URL: %v", err)
	}
}

func TestNewSourceRejects(t *testing.T) {
	t.Parallel()
	cl := sqsenv.Client()
	tests := []struct {
		name string
		cfg  *sqs.Config
		want error
	}{
		{"nil", nil, sqs.ErrInvalidConfig},
		{"no client", &sqs.Config{Queue: "q"}, sqs.ErrInvalidConfig},
		{"no queue", &sqs.Config{Client: cl}, sqs.ErrInvalidConfig},
		{"visibility over 12 h", &sqs.Config{Client: cl, Queue: "q", VisibilityTimeout: 13 * time.Hour}, sqs.ErrInvalidConfig},
		{"wait over 20 s", &sqs.Config{Client: cl, Queue: "q", WaitTime: 21 * time.Second}, sqs.ErrInvalidConfig},
		{"eleven messages", &sqs.Config{Client: cl, Queue: "q", MaxMessages: 11}, sqs.ErrInvalidConfig},
		{"bad ID attribute", &sqs.Config{Client: cl, Queue: "q", IDAttribute: "AWS.Id"}, sqs.ErrInvalidConfig},
		{"no such queue", &sqs.Config{Client: cl, Queue: "inboxtest_does_not_exist"}, sqs.ErrQueueNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if src, err := sqs.NewSource(context.Background(), tc.cfg); !errors.Is(err, tc.want) {
				if src != nil {
					_ = src.Close()
				}
				t.Fatalf("NewSource(%+v): %v, want %v", tc.cfg, err, tc.want)
			}
		})
	}
	for _, cfg := range []*sqs.PublisherConfig{{MessageGroup: "a b"}, {MaxMessageSize: 2 << 20}, {TypeAttribute: "a..b"}} {
		if _, err := sqs.NewPublisher(cl, cfg); !errors.Is(err, sqs.ErrInvalidConfig) {
			t.Errorf("NewPublisher(%+v): %v, want sqs.ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := sqs.NewPublisher(nil, nil); !errors.Is(err, sqs.ErrInvalidConfig) {
		t.Errorf("NewPublisher(nil): %v, want sqs.ErrInvalidConfig", err)
	}
}

// A queue deleted while it is consumed ends Consume with
// ErrQueueNotFound. Not parallel: on the emulator a queue deleted while
// other tests receive is a data race (see sqsenv).
func TestQueueDeletedEndsConsume(t *testing.T) {
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	src := newSource(t, cl, name, sqs.Config{WaitTime: 5 * time.Second})
	f := brokertest.NewFixture(t, inbox.Config{})
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(context.Background(), f.Inbox, src, f.Write, nil) }()
	time.Sleep(500 * time.Millisecond) // in a long poll
	if _, err := cl.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL(t, cl, name))}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sqs.ErrQueueNotFound) {
			t.Fatalf("Consume returned %v, want sqs.ErrQueueNotFound", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Consume did not return after its queue was deleted")
	}
}

// The queue's MessageRetentionPeriod is the redelivery window: SQS's 4
// days by default are within the inbox's 7; 14 days are not, and
// CheckRetention says so.
func TestRedeliveryWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	src := newSource(t, cl, name, sqs.Config{})
	if got, err := src.RedeliveryWindow(ctx); err != nil || got != 4*24*time.Hour {
		t.Fatalf("default window %v, %v; want 4 days", got, err)
	}
	if _, err := cl.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(queueURL(t, cl, name)),
		Attributes: map[string]string{"MessageRetentionPeriod": "1209600"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := src.RedeliveryWindow(ctx); err != nil || got != 14*24*time.Hour {
		t.Fatalf("window %v, %v; want 14 days", got, err)
	}
	warning, _, err := inbox.CheckRetention(ctx, src, inbox.DefaultRetention)
	if err != nil || !strings.Contains(warning, "336h0m0s") {
		t.Fatalf("CheckRetention: %q %v, want a warning naming 14 days (336h)", warning, err)
	}
}

// Prefetch is MaxMessages: one receive's worth waits in the Source.
func TestPrefetch(t *testing.T) {
	t.Parallel()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	for _, tc := range []struct{ max, want int }{{0, sqs.DefaultMaxMessages}, {3, 3}} {
		if got := newSource(t, cl, name, sqs.Config{MaxMessages: tc.max}).Prefetch(); got != tc.want {
			t.Fatalf("MaxMessages %d: Prefetch() = %d, want %d", tc.max, got, tc.want)
		}
	}
}

// Empty receives that answer at once (short polling, WaitTime < 0) are
// followed by a pause that doubles up to EmptyMaxDelay, so that an idle
// Source does not spin (each receive is a billed request); a message
// that arrives later is still received, and then the pause starts over.
func TestShortPollingBacksOff(t *testing.T) {
	t.Parallel()
	var receives atomic.Int32
	endpoint := sqsenv.Intercepted(t, func(_ http.ResponseWriter, _ *http.Request, action string) bool {
		if action == "ReceiveMessage" {
			receives.Add(1)
		}
		return false
	})
	cl := sqsenv.ClientOn(endpoint)
	name := sqsenv.Queue(t, false)
	src := newSource(t, cl, name, sqs.Config{WaitTime: -1})

	time.Sleep(2 * time.Second)
	// Pauses of 100, 200, 400, 800 ms and then 1 s (±20 %): about 5
	// receives in 2 s; the old loop made thousands.
	if n := receives.Load(); n > 12 {
		t.Fatalf("%d ReceiveMessage requests in 2 s on an empty queue with short polling, want at most 12", n)
	} else {
		t.Logf("%d ReceiveMessage requests in 2 s on an empty queue", n)
	}
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), &broker.Message{ID: "late", Subject: name, Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := src.Next(ctx)
	if err != nil {
		t.Fatalf("the message sent after the idle receives was not received: %v", err)
	}
	if got := d.Message().ID; got != "late" {
		t.Fatalf("received %q, want late", got)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// With FreshDeduplication, a FIFO queue takes a second publish of one
// message ID at once: each has a deduplication ID of its own. Without it,
// the emulator drops the second, as SQS does.
func TestFIFOFreshDeduplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := sqsenv.Client()
	for _, fresh := range []bool{false, true} {
		name := sqsenv.Queue(t, true)
		pub, err := sqs.NewPublisher(cl, &sqs.PublisherConfig{FreshDeduplication: fresh})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := pub.Publish(ctx, &broker.Message{ID: "again", Subject: name, Payload: []byte("p")}); err != nil {
				t.Fatal(err)
			}
		}
		src := newSource(t, cl, name, sqs.Config{VisibilityTimeout: 5 * time.Second})
		got := 0
		for {
			nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := src.Next(nctx)
			cancel()
			if err != nil {
				break
			}
			got++
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if want := map[bool]int{false: 1, true: 2}[fresh]; got != want {
			t.Errorf("FreshDeduplication %v: %d of 2 publishes received, want %d", fresh, got, want)
		}
	}
}
