package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store"
)

// TestReplayNATSControlHeaders: a dead letter whose message came with
// JetStream's control headers (through the Source, or stored so by an
// earlier release) replays without them. Before, a Nats-Rollup replayed
// purged the stream's other messages, and a Nats-Expected-Last-Sequence
// failed every replay ("wrong last sequence").
func TestReplayNATSControlHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers map[string]string
		stored  bool // the dead letter is written as an earlier release stored it
		replays int
	}{
		{"rollup all arrived", map[string]string{"Nats-Rollup": "all"}, false, 1},
		{"rollup sub stored", map[string]string{"Nats-Rollup": "sub"}, true, 1},
		{"expected last sequence arrived, replayed twice", map[string]string{"Nats-Expected-Last-Sequence": "0"}, false, 2},
		{"expected last sequence stored", map[string]string{"Nats-Expected-Last-Sequence": "1", "Nats-Expected-Stream": "x"}, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testReplayNATSControlHeaders(t, tc.headers, tc.stored, tc.replays)
		})
	}
}

func testReplayNATSControlHeaders(t *testing.T, hdrs map[string]string, stored bool, replays int) {
	ctx := context.Background()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS at "+testenv.NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	name := testenv.Name("CMDHDRS_")
	dest := name + ".msgs"
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
		Duplicates: natsDupWindow, AllowRollup: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	publish := func(subject, id string, h map[string]string) time.Time {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: []byte("pay " + id), Header: nats.Header{}}
		for k, v := range h {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("publish %s with %q: %v", id, h, err)
		}
		return time.Now()
	}

	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "replay"})
	handler := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		if msg.ID == "poison" {
			return inbox.Permanent(errors.New("unknown account"))
		}
		return e.effect(ctx, tx, msg)
	}
	var published time.Time
	if stored {
		dl := inbox.Message{ID: "poison", Type: "payment", Payload: []byte("pay poison"), Headers: map[string]string{"Trace": "t-1"}}
		for k, v := range hdrs {
			dl.Headers[k] = v
		}
		dl.Headers["Nats-Msg-Id"] = "poison"
		if out, err := ib.Process(ctx, dl, handler); out.Status != inbox.DeadLettered {
			t.Fatalf("the stored dead letter: %v %v", out.Status, err)
		}
	} else {
		published = publish(dest, "poison", hdrs) // first: its own rollup or expectation holds
	}
	others := 4 // and the poison message
	if stored {
		others = 5
	}
	for i := range others {
		subject := dest
		if i%2 == 1 {
			subject = name + ".other"
		}
		publish(subject, fmt.Sprintf("m-%d", i), map[string]string{"Trace": "t"})
	}
	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "c", AckWait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(runCtx, ib, src, handler, &inbox.ConsumerConfig{Workers: 1}) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	msgs := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	deadLetter := func(after int64) int64 {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			found, err := e.driver.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				if f.ID > after {
					return f.ID
				}
			}
		}
		t.Fatal("waited 15 s for the dead letter")
		return 0
	}
	if n := msgs(); n != 5 {
		t.Fatalf("%d messages in the stream before the replay, want 5", n)
	}
	var dl int64
	for r := range replays {
		dl = deadLetter(dl)
		time.Sleep(time.Until(published.Add(natsDupWindow + 300*time.Millisecond)))
		code, stdout, stderr := runCmd(t, append(append([]string{"dead-letters", "replay", "-consumer", "replay",
			"-nats", testenv.NATSURL(), "-subject", dest}, e.flags...), fmt.Sprint(dl))...)
		published = time.Now()
		if code != 0 {
			t.Fatalf("replay %d: exit %d, want 0\nstdout: %s\nstderr: %s", r+1, code, stdout, stderr)
		}
		if n, want := msgs(), uint64(5+r+1); n != want {
			t.Fatalf("after replay %d: %d messages in the stream, want %d: the replay's headers acted on the stream", r+1, n, want)
		}
	}
	for seq := uint64(1); seq <= 5; seq++ {
		if _, err := stream.GetMsg(ctx, seq); err != nil {
			t.Errorf("message %d of the stream: %v, want it kept", seq, err)
		}
	}
}
