package browser

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// stream is a JetStream stream of its own on the NATS service, deleted
// when the test ends: subjects name.>.
func stream(t *testing.T) (jetstream.JetStream, string) {
	t.Helper()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS at "+testenv.NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name("CONSOLE_")
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return js, name
}

// click clicks sel and waits for the page it leads to.
func click(t *testing.T, ctx context.Context, sel string, want func(href string) bool) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(sel)); err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	waitForPage(t, ctx, want)
}

// TestConsoleActionsInBrowser does what an operator does after a bad
// deploy, in Chromium, on SQLite and NATS JetStream: replay a dead letter
// through the broker while billing's consumer runs (its effect happens
// once, counted in the database), discard the rest of its error group
// after the page that counts them, and unpark an outbox row that a
// running relay then publishes.
func TestConsoleActionsInBrowser(t *testing.T) {
	t.Parallel()
	d, db := openConsoleDB(t)
	js, name := stream(t)
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE charges (message_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	// billing's consumer, fixed now: it records one charge per message,
	// in the inbox's transaction.
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() {
		consumed <- inbox.Consume(cctx, ib, src, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO charges (message_id) VALUES (?)`, m.ID)
			return err
		}, nil)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-consumed; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})

	// The outbox's relay publishes to the stream; every row is parked
	// first, as after a broker outage.
	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"refund-1", "refund-2"} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Write(ctx, tx, &outbox.Message{ID: id, Destination: name + ".refunds", Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	parkAll(t, d)
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{Publish: outbox.ToBroker(pub), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayed })

	replayPub, err := natsjs.NewPublisher(js, &natsjs.PublisherConfig{RefuseDuplicates: true})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, d, &console.Config{Replay: map[string]*console.Destination{
		"billing": {Publisher: replayPub, Subject: name + ".billing"},
	}})
	bctx := New(t, 1280, 800)
	bctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	const group = "charge poison-<n>: card declined"
	// Replay poison-00000 from its page.
	navigate(t, bctx, base+"dead-letters?message-id=poison-00000")
	click(t, bctx, "a.dl", func(href string) bool { return lastPart(href) != "" })
	shot(t, bctx, "dead-letter-replay")
	click(t, bctx, "button.replay", func(href string) bool { return strings.Contains(href, "done=replayed") })
	if got := eval[string](t, bctx, `document.querySelector(".notice").textContent`); !strings.Contains(got, "was replayed") {
		t.Errorf("after the replay, the notice reads %q", got)
	}
	waitFor(t, "the replayed charge", func() bool { return charges(t, db, "poison-00000") > 0 })

	// Discard the rest of its group, after the page that counts them.
	navigate(t, bctx, base+"dead-letters?group="+url.QueryEscape(group))
	click(t, bctx, "a.bulk-discard", func(href string) bool { return strings.Contains(href, "/dead-letters/bulk?") })
	if got := eval[string](t, bctx, `document.querySelector("#bulk-count").textContent`); got != "3" {
		t.Errorf("the bulk discard counts %s dead letters, want 3", got)
	}
	shot(t, bctx, "bulk-discard-confirm")
	click(t, bctx, "form.confirm button", func(href string) bool { return strings.HasSuffix(href, "/dead-letters/bulk") })
	if got := eval[string](t, bctx, `document.querySelector("#bulk-done").textContent`); got != "3" {
		t.Errorf("the bulk discard says %s done, want 3", got)
	}
	shot(t, bctx, "bulk-discard-done")
	if left, err := d.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Group: group, Limit: 10}); err != nil || len(left) != 0 {
		t.Errorf("the group's dead letters left: %d, %v; want none", len(left), err)
	}

	// Unpark refund-1: the relay publishes it, and the consumer takes it.
	navigate(t, bctx, base+"outbox?state=parked&message-id=refund-1")
	click(t, bctx, "a.ob", func(href string) bool { return lastPart(href) != "" })
	shot(t, bctx, "outbox-parked")
	click(t, bctx, "button.unpark", func(href string) bool { return strings.Contains(href, "done=unparked") })
	waitFor(t, "refund-1 published and consumed", func() bool { return charges(t, db, "refund-1") > 0 })
	st, err := d.OutboxStats(ctx)
	if err != nil || st.Parked != 4 || st.Pending != 0 {
		t.Errorf("the outbox after the unpark: %+v, %v; want the 4 others parked, none pending", st, err)
	}

	// The effect happened once. The consumer had its chance at a second
	// copy: the relay's message came after the replay's, on one stream.
	if n := charges(t, db, "poison-00000"); n != 1 {
		t.Errorf("poison-00000 charged %d times, want once", n)
	}
	if n := charges(t, db, "refund-2"); n != 0 {
		t.Errorf("refund-2, still parked, charged %d times", n)
	}
}

// charges counts the charges of message id.
func charges(t *testing.T, db *sql.DB, id string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM charges WHERE message_id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// parkAll parks every outbox row, as a relay does when the broker
// refuses them.
func parkAll(t *testing.T, d *sqlstore.Driver) {
	t.Helper()
	ctx := context.Background()
	tok := []byte("tok-browser-0001")
	recs, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 100, Lease: time.Minute, Token: tok})
	if err != nil || len(recs) == 0 {
		t.Fatalf("claimed %d outbox rows, %v", len(recs), err)
	}
	var fails []store.OutboxFailure
	for _, r := range recs {
		fails = append(fails, store.OutboxFailure{Seq: r.Seq, Park: true, Error: "nats: no responders"})
	}
	if err := d.OutboxFail(ctx, tok, fails); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 20 s", what)
}
