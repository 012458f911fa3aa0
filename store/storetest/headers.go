package storetest

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/outbox"
)

// rawHeaders are headers of any bytes: names that are not valid UTF-8
// (Kafka's and AMQP's may be any bytes), which differ only in such bytes,
// and binary values.
var rawHeaders = map[string]string{
	"k\xfe": "b", "k\xff": "a", "k\uFFFD": "replacement", "ok": "c",
	"\x00": "\x00\xff", "bin": "\x00\xff\n", "empty": "",
}

// A dead letter and an outbox row give back the headers they got, byte
// for byte: through Inbox.DeadLetters, the Inspector (the command and the
// console) and the relay.
func testHeadersRoundTrip[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	m := msg("raw-headers")
	m.Headers = rawHeaders
	fail := func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(errors.New("dead on arrival"))
	}
	if out, err := ib.Process(ctx, m, fail); out.Status != inbox.DeadLettered {
		t.Fatalf("Process: %v %v, want DeadLettered", out.Status, err)
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v %v, want 1", dls, err)
	}
	if got := dls[0].Message.Headers; !maps.Equal(got, rawHeaders) {
		t.Errorf("the dead letter's headers came back as %q (%d), want %q (%d)", got, len(got), rawHeaders, len(rawHeaders))
	}
	det, err := inspector(t, env).DeadLetterGet(ctx, dls[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := headers.Decode(det.Headers); err != nil || !maps.Equal(got, rawHeaders) {
		t.Errorf("the Inspector's dead letter has headers %q (%v), want %q", got, err, rawHeaders)
	}

	e := openOutbox(t, h)
	om := outMsg("raw-headers")
	om.Headers = rawHeaders
	e.write(t, true, om)
	s := &sink{}
	if res := drain(t, e.relay(t, outbox.RelayConfig{Publish: s.publish})); res.Published != 1 {
		t.Fatalf("relayed %+v, want 1 published", res)
	}
	if got := s.msgs[0].Headers; !maps.Equal(got, rawHeaders) {
		t.Errorf("the outbox row's headers were published as %q (%d), want %q (%d)", got, len(got), rawHeaders, len(rawHeaders))
	}
}
