package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

// badInputWithin bounds a Publish of bad input: it must fail, not hang.
const badInputWithin = 5 * time.Second

// A message published twice with the same ID (a relay killed between its
// publish and the deletion of its row) has one effect: the broker drops
// the second (Features.Dedup) or delivers it, and the inbox skips it as a
// duplicate. One worker takes the deliveries in the broker's order, so
// once the messages published after the two (one per partition) are
// processed, any copy is too.
func testRepublish(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	publish(t, env, "twice")
	publish(t, env, "twice")
	var after []string
	for i := range max(env.Partitions, 1) {
		after = append(after, fmt.Sprintf("after-twice-%d", i))
		publish(t, env, after[i])
	}
	stop := f.Consume(t, env.Source(t), f.Write, &inbox.ConsumerConfig{Workers: 1})
	Eventually(t, 15*time.Second, "the messages published after the re-published one were not all processed", func() bool {
		for _, id := range after {
			if f.Effects(t, id) != 1 {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	if n := f.Effects(t, "twice"); n != 1 {
		t.Fatalf("%d effects of the message published twice, want 1 (%s)", n, hooks)
	}
	processed, dups := hooks.Processed.Load(), hooks.Duplicates.Load()
	switch want := int64(1 + len(after)); {
	case processed != want:
		t.Fatalf("%d processed, want %d (%s)", processed, want, hooks)
	case h.Features.Dedup && dups != 0:
		t.Fatalf("the inbox saw %d duplicates; want 0: with Features.Dedup the broker drops the re-publish", dups)
	case !h.Features.Dedup && dups != 1:
		t.Fatalf("the inbox saw %d duplicates; want 1: without Features.Dedup the broker delivers the re-publish", dups)
	}
}

// headerValues are values that every broker carries as they are, with
// names whose case must survive.
var headerValues = map[string]string{
	"Mixed-Case":   "Value",
	"lower-case":   "value",
	"Empty":        "",
	"Inner-Tab":    "a\tb",
	"Nul":          "a\x00b",
	"Invalid-Utf8": "\xff\xfe",
	"Utf8":         "é 日本",
	"Punctuation":  `a=b; c:d, "q" (x) [y] {z} \ /`,
	"Controls":     "\x01\x1f\x7f",
	"Long":         strings.Repeat("0123456789", 400),
}

// The ID, subject, type, payload (every byte value) and headers arrive as
// published; Key arrives empty where the broker has no keys. With
// Env.MaxHeaders the headers are spread over several messages.
func testFieldsArrive(t *testing.T, h Harness) {
	env := h.Open(t, 5*time.Second)
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	names := slices.Sorted(maps.Keys(headerValues))
	per := len(names)
	if env.MaxHeaders > 0 {
		per = env.MaxHeaders
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sent := map[string]*broker.Message{}
	for i := 0; i < len(names); i += per {
		headers := map[string]string{}
		for _, k := range names[i:min(i+per, len(names))] {
			headers[k] = headerValues[k]
		}
		m := &broker.Message{ID: fmt.Sprintf("fields-%d", len(sent)+1), Subject: env.Subject, Type: "fields.type", Key: "key-1", Payload: payload, Headers: headers}
		if err := env.Publisher.Publish(ctx, m); err != nil {
			t.Fatalf("publish %s: %v", m.ID, err)
		}
		sent[m.ID] = m
	}
	src := env.Source(t)
	for range len(sent) {
		d, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("delivery: %v", err)
		}
		got := d.Message()
		want, ok := sent[got.ID]
		if !ok {
			t.Fatalf("got ID %q, want one of the %d sent", got.ID, len(sent))
		}
		delete(sent, got.ID)
		if got.Subject != want.Subject || got.Type != want.Type {
			t.Errorf("got ID %q subject %q type %q, want %q %q %q", got.ID, got.Subject, got.Type, want.ID, want.Subject, want.Type)
		}
		if !bytes.Equal(got.Payload, payload) {
			t.Errorf("%s: got a payload of %d bytes, want the 256 byte values in order", got.ID, len(got.Payload))
		}
		for k, v := range want.Headers {
			if g, ok := got.Headers[k]; !ok || g != v {
				t.Errorf("header %q: got %q (present: %v), want %q", k, g, ok, v)
			}
		}
		if !h.Features.Keys && got.Key != "" {
			t.Errorf("key %q from an adapter without Features.Keys, want it empty", got.Key)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Message.Key arrives as published, and a message without one has none.
func testKeyArrives(t *testing.T, h Harness) {
	if !h.Features.Keys {
		t.Skip("Features.Keys is false: the broker has no message key, and Publish ignores Message.Key")
	}
	env := h.Open(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	want := map[string]string{"keyed": "key-\x00\xff-é", "unkeyed": ""}
	for id, key := range want {
		if err := env.Publisher.Publish(ctx, &broker.Message{ID: id, Subject: env.Subject, Key: key, Payload: []byte(id)}); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
	}
	src := env.Source(t)
	for range want {
		d, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("delivery: %v", err)
		}
		m := d.Message()
		if k, ok := want[m.ID]; !ok || m.Key != k {
			t.Errorf("message %q arrived with key %q, want %q", m.ID, m.Key, k)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// publishBad publishes msg, which the broker must refuse: Publish returns
// an error, naming the message and its subject, well within
// badInputWithin. Then a good message is published: the Publisher still
// works.
func publishBad(t *testing.T, env *Env, msg *broker.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), badInputWithin)
	defer cancel()
	start := time.Now()
	err := env.Publisher.Publish(ctx, msg)
	took := time.Since(start)
	switch {
	case err == nil:
		t.Fatalf("Publish of %q to %q returned nil after %v: a silent success, want an error", msg.ID, msg.Subject, took)
	case ctx.Err() != nil:
		t.Fatalf("Publish of %q to %q hung until its %v deadline (%v), want an error at once", msg.ID, msg.Subject, badInputWithin, err)
	case !strings.Contains(err.Error(), msg.ID) || !strings.Contains(err.Error(), msg.Subject):
		t.Errorf("the error %q does not name the message %q and its subject %q", err, msg.ID, msg.Subject)
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	publish(t, env, "good-after-"+msg.ID)
	return err
}

// A subject the broker does not take is an error, not a hang, not a
// message lost in silence.
func testPublishNowhere(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	if env.Nowhere == "" {
		t.Fatal("Env.Nowhere is empty: the harness must name a subject the broker refuses")
	}
	publishBad(t, env, &broker.Message{ID: "nowhere-1", Subject: env.Nowhere, Payload: []byte("nowhere")})
}

// A payload one byte over the broker's limit is an error wrapping
// broker.ErrInvalidMessage.
func testPublishOversized(t *testing.T, h Harness) {
	if !h.Features.PayloadLimit {
		t.Skip("Features.PayloadLimit is false: the broker's payload limit is not one a test can reach cheaply (see the adapter's harness)")
	}
	env := h.Open(t, time.Second)
	if env.MaxPayload <= 0 {
		t.Fatal("Features.PayloadLimit without Env.MaxPayload")
	}
	err := publishBad(t, env, &broker.Message{ID: "oversized-1", Subject: env.Subject, Payload: make([]byte, env.MaxPayload+1)})
	if !errors.Is(err, broker.ErrInvalidMessage) {
		t.Errorf("the error %q does not wrap broker.ErrInvalidMessage: publishing it again fails again", err)
	}
}

// Headers the broker cannot carry (or would alter) are an error wrapping
// broker.ErrInvalidMessage and naming the header.
func testPublishBadHeaders(t *testing.T, h Harness) {
	if !h.Features.HeaderLimits {
		t.Skip("Features.HeaderLimits is false: the broker carries any header name and value")
	}
	env := h.Open(t, time.Second)
	if len(env.BadHeaders) == 0 {
		t.Fatal("Features.HeaderLimits without Env.BadHeaders")
	}
	for i, hs := range env.BadHeaders {
		err := publishBad(t, env, &broker.Message{ID: fmt.Sprintf("bad-headers-%d", i), Subject: env.Subject, Payload: []byte("x"), Headers: hs})
		if !errors.Is(err, broker.ErrInvalidMessage) {
			t.Errorf("headers %q: the error %q does not wrap broker.ErrInvalidMessage", hs, err)
		}
		for k := range hs {
			if name := fmt.Sprintf("%q", k); len(k) <= 32 && !strings.Contains(err.Error(), name) {
				t.Errorf("headers %q: the error %q does not name the header %s", hs, err, name)
			}
		}
	}
}

// A canceled context makes Publish return its error at once, and nothing
// is published: a fresh source receives only the markers.
func testPublishCanceled(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := env.Publisher.Publish(ctx, &broker.Message{ID: "canceled-1", Subject: env.Subject, Payload: []byte("canceled")})
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > time.Second {
		t.Fatalf("Publish with a canceled context returned %v after %v; want context.Canceled at once", err, took)
	}
	if got := redelivered(t, h, env, 0); len(got) > 0 {
		t.Fatalf("a fresh source received %q; want nothing but the markers: a publish with a canceled context went out", got)
	}
}
