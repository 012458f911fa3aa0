package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/internal/testenv"
)

// TestCheckBrokerUnreachable: a broker that cannot be reached is a
// failure of the check (exit 1), not a problem it found (exit 3).
func TestCheckBrokerUnreachable(t *testing.T) {
	t.Parallel()
	e := openDB(t, "sqlite")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nats", []string{"-nats", "nats://127.0.0.1:1", "-stream", "S"}, "connecting to NATS"},
		{"amqp", []string{"-amqp", "amqp://guest:guest@127.0.0.1:1/", "-queue", "q"}, "connecting to RabbitMQ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, append(append([]string{"check"}, e.flags...), tc.args...)...)
			if code != exitFailure || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("check with an unreachable broker: exit %d, stdout %q, stderr %q; want 1, nothing on stdout, %q on stderr", code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestCheckNATS: check reads the stream's info once (counted by a
// subscriber to the JetStream API's subject), reports its windows, and a
// missing stream is a problem (exit 3).
//
// The request is awaited, not counted at Flush: the server hands it to
// JetStream and to this subscriber in one loop over the subject's
// subscribers, and JetStream's answer can end the command before the copy
// for this subscriber is queued (CI saw 0 after a Flush; 3 in 300 runs
// under -race here).
func TestCheckNATS(t *testing.T) {
	t.Parallel()
	nc, _, name := natsStream(t, "CMDCHECK_", jetstream.StreamConfig{MaxAge: time.Hour, Duplicates: time.Minute})
	sub, err := nc.SubscribeSync("$JS.API.STREAM.INFO." + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e := openDB(t, "sqlite")
	var chk checkJSON
	cmdJSON(t, &chk, 0, append(append([]string{"check", "-json"}, e.flags...), "-nats", testenv.NATSURL(), "-stream", name)...)
	if !chk.OK || !chk.RetentionCompared || chk.RedeliveryWindow != "1h0m0s" || chk.DuplicateWindow != "1m0s" {
		t.Fatalf("check: %+v; want ok, retention compared, window 1h, duplicate window 1m", chk)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("check did not read the stream's info: %v", err)
	}
	if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("check read the stream's info twice (again on %s), want once", m.Subject)
	}
	cmdJSON(t, &chk, exitProblem, append(append([]string{"check", "-json"}, e.flags...), "-nats", testenv.NATSURL(), "-stream", name+"_MISSING")...)
	if chk.OK || len(chk.Problems) != 1 || !strings.Contains(chk.Problems[0], "stream") {
		t.Fatalf("check of a missing stream: %+v; want one problem naming the stream", chk)
	}
}

// TestCheckAMQPMissingQueue: a queue that does not exist is a problem
// found (exit 3), not a failure.
func TestCheckAMQPMissingQueue(t *testing.T) {
	t.Parallel()
	if conn, err := amqp.Dial(testenv.AMQPURL()); err != nil {
		testenv.Unavailable(t, "RabbitMQ at "+testenv.AMQPURL(), err)
	} else {
		_ = conn.Close()
	}
	e := openDB(t, "sqlite")
	var chk checkJSON
	cmdJSON(t, &chk, exitProblem, append(append([]string{"check", "-json"}, e.flags...), "-amqp", testenv.AMQPURL(), "-queue", testenv.Name("missing_"))...)
	if chk.OK || len(chk.Problems) != 1 || !strings.Contains(chk.Problems[0], "NOT_FOUND") {
		t.Fatalf("check of a missing queue: %+v; want one problem, NOT_FOUND", chk)
	}
}
