package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
)

// At the default level a consumer says what it does: a retry at INFO, a
// dead letter at WARN with its consumer, ID, type, attempts and error;
// nothing for a message processed at the first try.
func testLogsAtDefaultLevel(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, 5*time.Second)
	logs := &logtest.Buffer{}
	f := NewFixture(t, inbox.Config{MaxAttempts: 2, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}})
	var flaky atomic.Int32
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		switch {
		case m.ID == "poison":
			return errors.New("card declined")
		case m.ID == "flaky" && flaky.Add(1) == 1:
			return errors.New("flaky once")
		}
		return f.Write(ctx, tx, m)
	}
	for _, id := range []string{"fine", "flaky", "poison"} {
		publish(t, env, id)
	}
	stop := f.Consume(t, env.Source(t), handler, nil)
	var state string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		dls, err := f.Inbox.DeadLetters(ctx, nil)
		fine, flakyDone := f.Effects(t, "fine"), f.Effects(t, "flaky")
		if err == nil && len(dls) == 1 && fine == 1 && flakyDone == 1 {
			break
		}
		state = fmt.Sprintf("%d dead letters (%v), fine %d, flaky %d (handler ran %d times)", len(dls), err, fine, flakyDone, flaky.Load())
		if time.Now().After(deadline) {
			t.Fatalf("after 15 s: %s, want 1 dead letter and each other message once; the log:\n%s", state, logs)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dead := logs.Lines("level=WARN", "message dead-lettered", "consumer=brokertest", " id=poison ", "type=test",
		"attempts=2", `error="card declined"`)
	if len(dead) != 1 {
		t.Errorf("want one WARN line for the dead letter, with consumer, ID, type, attempts and error; got %q", dead)
	}
	if retried := logs.Lines("level=INFO", "will be retried", "consumer=brokertest", "attempts=1"); len(retried) == 0 {
		t.Errorf("no INFO line for a retry")
	}
	if fine := logs.Lines(" id=fine "); len(fine) != 0 {
		t.Errorf("lines for a message processed at once: %q", fine)
	}
	if t.Failed() {
		t.Logf("the log:\n%s", logs)
	}
}

// A database error that no retry fixes (the inbox's table is gone) stops
// Consume with ErrUnrecoverable, loudly, without acking: once the table is
// back, a new consumer processes the message.
func testUnrecoverableStopsConsume(t *testing.T, h Harness) {
	env := h.Open(t, 2*time.Second)
	logs := &logtest.Buffer{}
	f := NewFixture(t, inbox.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if _, err := f.DB.Exec(`ALTER TABLE inbox RENAME TO inbox_away`); err != nil {
		t.Fatal(err)
	}
	publish(t, env, "m-gone")
	src := env.Source(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- inbox.Consume(ctx, f.Inbox, src, f.Write, &inbox.ConsumerConfig{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, inbox.ErrUnrecoverable) {
			t.Fatalf("Consume returned %v, want ErrUnrecoverable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Consume did not stop on a missing inbox table; the log:\n%s", logs)
	}
	src.Close()
	if l := logs.Lines("level=ERROR", "stopping"); len(l) != 1 {
		t.Fatalf("want one ERROR line saying that Consume stops; the log:\n%s", logs)
	}
	if _, err := f.DB.Exec(`ALTER TABLE inbox_away RENAME TO inbox`); err != nil {
		t.Fatal(err)
	}
	stop := f.Consume(t, env.Source(t), f.Write, nil)
	Eventually(t, 15*time.Second, "the message was lost: not processed after the table came back", func() bool {
		return f.Effects(t, "m-gone") == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
