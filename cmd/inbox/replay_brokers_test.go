package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	inboxsqs "github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// TestReplayBrokerFlags: a broker missing, two brokers, a destination
// flag of another broker and hostile values are a wrong command line
// (exit 2) that says what is wrong, and shows no password.
func TestReplayBrokerFlags(t *testing.T) {
	t.Parallel()
	db := []string{"dead-letters", "replay", "-sqlite", "x.db", "-consumer", "c", "1"}
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"no broker", nil, "give a broker: -nats URL -subject S, -amqp URL -routing-key K, -kafka BROKERS -topic T or -sqs QUEUE_URL"},
		{"two brokers", []string{"-kafka", "k:9092", "-topic", "t", "-sqs", "https://q/1/q"}, "give one broker"},
		{"kafka without topic", []string{"-kafka", "k:9092"}, "-kafka needs -topic"},
		{"topic without kafka", []string{"-nats", "nats://n", "-subject", "s", "-topic", "t"}, "-topic with -kafka"},
		{"endpoint without sqs", []string{"-kafka", "k:9092", "-topic", "t", "-sqs-endpoint", "http://e"}, "-sqs-endpoint with -sqs"},
		{"kafka not host:port", []string{"-kafka", "k:9092,user:hunter2@k", "-topic", "t"}, `-kafka: "xxxxx@k" is not host:port`},
		{"kafka empty broker", []string{"-kafka", "k:9092,", "-topic", "t"}, `-kafka: "" is not host:port`},
		{"topic invalid", []string{"-kafka", "k:9092", "-topic", "a/b"}, `-topic "a/b" is not a Kafka topic name`},
		{"topic invalid UTF-8", []string{"-kafka", "k:9092", "-topic", "t\xff"}, `-topic "t\xff" is not a Kafka topic name`},
		{"sqs not a URL", []string{"-sqs", "payments"}, `-sqs: "payments" is not an http or https URL`},
		{"sqs no queue", []string{"-sqs", "https://sqs.eu-west-1.amazonaws.com/"}, "names no queue"},
		{"sqs password", []string{"-sqs", "ftp://user:hunter2@q/1/q"}, `-sqs: "ftp://user:xxxxx@q/1/q" is not an http or https URL`},
		{"sqs invalid UTF-8", []string{"-sqs", "https://q/1/\xff"}, "-sqs: the URL is not valid UTF-8"},
		{"sqs endpoint invalid", []string{"-sqs", "https://q/1/q", "-sqs-endpoint", "::"}, `-sqs-endpoint: "::" is not a URL`},
		{"empty type header", []string{"-kafka", "k:9092", "-topic", "t", "-type-header", ""}, "must not be empty"},
		{"timeout", []string{"-kafka", "k:9092", "-topic", "t", "-timeout", "-1s"}, "-timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append(append([]string{}, db...), tc.flags...)...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "hunter2") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q on stderr, no password", code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestReplayUnreachable: a Kafka cluster or an SQS endpoint that does
// not answer fails (exit 1) within -timeout, before the database is
// opened (the SQLite file does not exist), and says where.
func TestReplayUnreachable(t *testing.T) {
	t.Parallel()
	db := []string{"dead-letters", "replay", "-sqlite", "missing.db", "-consumer", "c", "-timeout", "500ms", "1"}
	code, _, stderr := runCmd(t, append(db, "-kafka", "127.0.0.1:1", "-topic", "t")...)
	if code != exitFailure || !strings.Contains(stderr, "connecting to Kafka at 127.0.0.1:1") {
		t.Fatalf("Kafka unreachable: exit %d, stderr %q; want 1 and where", code, stderr)
	}
}

// TestReplaySQSFIFO: an SQS FIFO queue drops, reported sent, a message
// whose deduplication ID it saw within 5 minutes. The original, sent with
// the message ID as that ID, is still in the queue (the emulator forgets
// an ID once its message is deleted; SQS does not): the replay's copy
// must get through beside it, at once.
func TestReplaySQSFIFO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queue := sqsenv.Queue(t, true)
	out, err := sqsenv.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &queue})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := inboxsqs.NewPublisher(sqsenv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, &broker.Message{ID: "f-1", Subject: *out.QueueUrl, Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "fifo"})
	dl := deadLetterOf(t, e, ib, inbox.Message{ID: "f-1", Type: "t", Payload: []byte("p")})
	var res []replayJSON
	cmdJSON(t, &res, 0, append(append([]string{"dead-letters", "replay", "-json", "-consumer", "fifo",
		"-sqs", *out.QueueUrl, "-sqs-endpoint", sqsenv.Endpoint()}, e.flags...), fmt.Sprint(dl))...)
	if len(res) != 1 || res[0].Status != "replayed" {
		t.Fatalf("replay to a FIFO queue just after the original: %+v; want replayed", res)
	}
	// A FIFO queue hands out one message of a group at a time: receive,
	// delete, receive again.
	ids := 0
	for range 3 {
		got, err := sqsenv.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: out.QueueUrl, MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got.Messages {
			if a, ok := m.MessageAttributes[broker.DefaultIDHeader]; ok && a.StringValue != nil && *a.StringValue == "f-1" {
				ids++
			}
			if _, err := sqsenv.Client().DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: out.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ids != 2 {
		t.Fatalf("the queue holds %d messages of ID f-1, want the original and the replay's copy", ids)
	}
}
