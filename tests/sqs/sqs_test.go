// Package sqs_test holds the tests of package sqs that need a database
// (broker/brokertest's fixture, on SQLite; its benchmarks, on PostgreSQL)
// or the emulator. They live apart from the adapter so that go mod tidy in
// a program that imports the adapter does not load them, and so downloads
// neither a database driver nor the emulator for them.
//
// They run on the goaws emulator in this process (see
// tests/sqsenv for its gaps), or on INBOX_SQS_ENDPOINT.
package sqs_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// TestMain makes the emulator's queues before any traffic (see sqsenv).
func TestMain(m *testing.M) {
	if err := sqsenv.Precreate(80, 12); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// waitTime is the tests' long poll: short, so that a test's last poll
// ends soon after it.
const waitTime = time.Second

// open makes a fresh queue whose Sources have the visibility timeout
// ackWait.
func open(tb testing.TB, ackWait time.Duration, fifo bool) *brokertest.Env {
	tb.Helper()
	cl := sqsenv.Client()
	name := sqsenv.Queue(tb, fifo)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		tb.Fatal(err)
	}
	many := map[string]string{}
	for i := range 10 {
		many[fmt.Sprintf("h%d", i)] = "v"
	}
	return &brokertest.Env{
		Source: func(tb testing.TB) broker.Source {
			src, err := sqs.NewSource(context.Background(), &sqs.Config{Client: cl, Queue: name, VisibilityTimeout: ackWait, WaitTime: waitTime})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { src.Close() })
			if sqsenv.Emulated() {
				return uncounted{src}
			}
			return src
		},
		Publisher: pub,
		Subject:   name,
		PublishNoID: func(ctx context.Context, payload []byte) error {
			in := &awssqs.SendMessageInput{QueueUrl: aws.String(queueURL(tb, cl, name)), MessageBody: aws.String(string(payload))}
			if fifo {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(string(payload))
			}
			_, err := cl.SendMessage(ctx, in)
			return err
		},
		Nowhere: name + "_nowhere",
		// Zeros go in base64: this many make a body over 256 KiB.
		MaxPayload: sqs.DefaultMaxMessageSize / 4 * 3,
		BadHeaders: []map[string]string{
			{"Space Name": "v"}, {"": "v"}, {"AWS.Reserved": "v"}, {"amazon.reserved": "v"}, {".Leading": "v"},
			{"Trailing.": "v"}, {"Two..Periods": "v"}, {"Ünicode": "v"}, {strings.Repeat("n", 257): "v"},
			many, // with the ID, 11 attributes
		},
		// Ten attributes: the ID, the type, the body's encoding (the
		// suite's payload is binary) and seven headers.
		MaxHeaders: 7,
	}
}

func queueURL(tb testing.TB, cl *awssqs.Client, name string) string {
	tb.Helper()
	out, err := cl.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		tb.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// uncounted hides Message.Deliveries on the emulator, whose
// ApproximateReceiveCount stays 1: the suite then checks that it is not
// claimed (Features.Deliveries false) rather than failing on the
// emulator's gap. TestDeliveriesFromReceiveCount checks where it comes
// from.
type uncounted struct{ *sqs.Source }

func (u uncounted) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := u.Source.Next(ctx)
	if err != nil {
		return nil, err
	}
	d.Message().Deliveries = 0
	return d, nil
}

// features: a visibility timeout is an AckWait, which InProgress
// (ChangeMessageVisibility) starts again; SQS counts receives (not on the
// emulator: see uncounted). A standard queue has no key and no
// deduplication. Publish refuses a message over 256 KiB and attribute
// names SQS refuses, or more than ten attributes. No OwnHeaders: SQS
// keeps its own (the system attributes) apart from message attributes,
// and refuses the names it reserves (AWS., Amazon.) from a producer.
var features = brokertest.Features{AckWait: true, Lease: true, Deliveries: !sqsenv.Emulated(), PayloadLimit: true, HeaderLimits: true, PublishTime: true}

func TestBroker(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{Features: features, Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
		return open(tb, ackWait, false)
	}})
}

func BenchmarkEndToEnd(b *testing.B) {
	brokertest.Bench(b, brokertest.Harness{Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
		return open(tb, ackWait, false)
	}})
}

func BenchmarkPublish(b *testing.B) {
	brokertest.BenchPublish(b, brokertest.Harness{Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
		return open(tb, ackWait, false)
	}})
}

// sendRaw sends body with attrs to the queue name, as a producer other
// than Publisher would.
func sendRaw(t *testing.T, cl *awssqs.Client, name, body string, attrs map[string]types.MessageAttributeValue) {
	t.Helper()
	_, err := cl.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(queueURL(t, cl, name)),
		MessageBody: aws.String(body), MessageAttributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
}
