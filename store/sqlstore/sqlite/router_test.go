package sqlite_test

// inbox.Router end to end on SQLite, through each way in: Consume,
// ConsumeBatch, ProcessTx and ProcessBatchFunc. Its unit tests, without a
// database, are the root package's router_test.go.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
)

type orderCreated struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

type orderShipped struct {
	ID      string `json:"id"`
	Carrier string `json:"carrier"`
}

// ordersRouter writes order.created to orders and order.shipped to
// shipments.
func ordersRouter(t *testing.T) *inbox.Router[*sql.Tx] {
	t.Helper()
	r := inbox.NewRouter[*sql.Tx](nil)
	err := errors.Join(
		inbox.Route(r, "order.created", func(ctx context.Context, tx *sql.Tx, _ *inbox.Message, ev *orderCreated) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (id, cents) VALUES (?, ?)", ev.ID, ev.Cents)
			return err
		}),
		inbox.Route(r, "order.shipped", func(ctx context.Context, tx *sql.Tx, _ *inbox.Message, ev *orderShipped) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO shipments (order_id, carrier) VALUES (?, ?)", ev.ID, ev.Carrier)
			return err
		}),
	)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return r
}

// routerMessages are of two routed types, one unknown type, and one
// payload that does not decode: not JSON, with a NUL byte and invalid
// UTF-8, which its dead letter keeps byte for byte.
var routerMessages = []broker.Message{
	{ID: "c1", Type: "order.created", Payload: []byte(`{"id":"o-1","cents":250}`)},
	{ID: "s1", Type: "order.shipped", Payload: []byte(`{"id":"o-1","carrier":"DHL"}`)},
	{ID: "x1", Type: "order.cancelled", Payload: []byte(`{"id":"o-2"}`)},
	{ID: "c2", Type: "order.created", Payload: []byte(`{"id":"o-2","cents":100}`)},
	{ID: "bad", Type: "order.created", Payload: []byte("{\"id\":\x00\xff\xfe")},
	{ID: "s2", Type: "order.shipped", Payload: []byte(`{"id":"o-2","carrier":"UPS"}`)},
}

func TestRouterEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, ib *inbox.Inbox[*sql.Tx], db *sql.DB, r *inbox.Router[*sql.Tx])
	}{
		{"Consume", func(t *testing.T, ib *inbox.Inbox[*sql.Tx], _ *sql.DB, r *inbox.Router[*sql.Tx]) {
			consumeAll(t, func(ctx context.Context, src broker.Source) error {
				return inbox.Consume(ctx, ib, src, r.Handler(), &inbox.ConsumerConfig{Workers: 2})
			})
		}},
		{"Consume in batches", func(t *testing.T, ib *inbox.Inbox[*sql.Tx], _ *sql.DB, r *inbox.Router[*sql.Tx]) {
			consumeAll(t, func(ctx context.Context, src broker.Source) error {
				return inbox.Consume(ctx, ib, src, r.Handler(), &inbox.ConsumerConfig{BatchSize: 10, BatchLinger: 50 * time.Millisecond})
			})
		}},
		{"ConsumeBatch", func(t *testing.T, ib *inbox.Inbox[*sql.Tx], _ *sql.DB, r *inbox.Router[*sql.Tx]) {
			bh := r.BatchHandler()
			var most atomic.Int64 // the most messages given to bh at once
			counted := func(ctx context.Context, tx *sql.Tx, msgs []*inbox.Message) error {
				if n := int64(len(msgs)); n > most.Load() {
					most.Store(n)
				}
				return bh(ctx, tx, msgs)
			}
			consumeAll(t, func(ctx context.Context, src broker.Source) error {
				return inbox.ConsumeBatch(ctx, ib, src, counted, &inbox.ConsumerConfig{Workers: 1, BatchSize: len(routerMessages), BatchLinger: time.Second})
			})
			if n := most.Load(); n != int64(len(routerMessages)) {
				t.Errorf("batches of at most %d messages, want all %d in one: mixed types and failures together", n, len(routerMessages))
			}
		}},
		{"ProcessBatchFunc", func(t *testing.T, ib *inbox.Inbox[*sql.Tx], _ *sql.DB, r *inbox.Router[*sql.Tx]) {
			msgs := make([]inbox.Message, len(routerMessages))
			for i, m := range routerMessages {
				msgs[i] = inbox.Message{ID: m.ID, Type: m.Type, Payload: m.Payload}
			}
			outs, err := ib.ProcessBatchFunc(t.Context(), msgs, r.BatchHandler())
			if err != nil {
				t.Fatalf("ProcessBatchFunc: %v (%v)", err, outs)
			}
		}},
		{"ProcessTx", func(t *testing.T, ib *inbox.Inbox[*sql.Tx], db *sql.DB, r *inbox.Router[*sql.Tx]) {
			h := r.Handler()
			for _, m := range routerMessages {
				tx, err := db.BeginTx(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				out, err := ib.ProcessTx(t.Context(), tx, inbox.Message{ID: m.ID, Type: m.Type, Payload: m.Payload}, h)
				if !out.Commit() {
					_ = tx.Rollback()
					t.Fatalf("ProcessTx of %s: %v, %v; want an outcome to commit", m.ID, out, err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatalf("commit of %s: %v", m.ID, err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var counts inbox.Counts
			ib, db := routerInbox(t, &inbox.Config{Consumer: "orders", Hooks: []inbox.Hook{&counts},
				Logger: slog.New(slog.DiscardHandler)})
			if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER NOT NULL);
				CREATE TABLE shipments (order_id TEXT PRIMARY KEY, carrier TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			tc.run(t, ib, db, ordersRouter(t))

			if got, want := counts.String(), "processed 4, duplicates 0, retries 0, dead-lettered 2"; got != want {
				t.Errorf("counts: %s, want %s", got, want)
			}
			if got, want := rows(t, db, "SELECT id || ' ' || cents FROM orders ORDER BY id"), "o-1 250, o-2 100"; got != want {
				t.Errorf("orders: %s, want %s", got, want)
			}
			if got, want := rows(t, db, "SELECT order_id || ' ' || carrier FROM shipments ORDER BY order_id"), "o-1 DHL, o-2 UPS"; got != want {
				t.Errorf("shipments: %s, want %s", got, want)
			}
			dead, err := ib.DeadLetters(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantDead := map[string]string{
				"x1":  `no route for message type "order.cancelled"; the router knows "order.created", "order.shipped"`,
				"bad": `payload of message type "order.created" does not decode into sqlite_test.orderCreated`,
			}
			if len(dead) != len(wantDead) {
				t.Fatalf("%d dead letters, want %d: %v", len(dead), len(wantDead), dead)
			}
			for _, d := range dead {
				sent := sentMessage(d.Message.ID)
				if !bytes.Equal(d.Message.Payload, sent.Payload) || d.Message.Type != sent.Type {
					t.Errorf("dead letter %s: type %q payload %q, want type %q payload %q byte for byte",
						d.Message.ID, d.Message.Type, d.Message.Payload, sent.Type, sent.Payload)
				}
				if !strings.Contains(d.Error, wantDead[d.Message.ID]) || d.Attempts != 1 {
					t.Errorf("dead letter %s: error %q after %d attempts, want %q after 1 (Permanent)",
						d.Message.ID, d.Error, d.Attempts, wantDead[d.Message.ID])
				}
			}
		})
	}
}

// A dead letter keeps its message's type: a router that knows the type
// now processes its replay.
func TestRouterReplay(t *testing.T) {
	t.Parallel()
	ib, db := routerInbox(t, &inbox.Config{Consumer: "router", Logger: slog.New(slog.DiscardHandler)})
	if _, err := db.Exec(`CREATE TABLE cancelled (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	msg := inbox.Message{ID: "x1", Type: "order.cancelled", Payload: []byte(`{"id":"o-2"}`)}
	out, err := ib.Process(t.Context(), msg, inbox.NewRouter[*sql.Tx](nil).Handler())
	if err != nil || out.Status != inbox.DeadLettered {
		t.Fatalf("Process without a route: %v, %v; want DeadLettered", out, err)
	}
	dead, err := ib.DeadLetters(t.Context(), nil)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters: %v, %v; want 1", dead, err)
	}
	if !strings.Contains(dead[0].Error, `"order.cancelled"; the router has no routes`) {
		t.Errorf("dead letter's error %q, want it to name the type and no routes", dead[0].Error)
	}
	r := inbox.NewRouter[*sql.Tx](nil)
	err = inbox.Route(r, "order.cancelled", func(ctx context.Context, tx *sql.Tx, _ *inbox.Message, ev *struct{ ID string }) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO cancelled (id) VALUES (?)", ev.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ib.Replay(t.Context(), dead[0].ID, r.Handler()); err != nil || out.Status != inbox.Processed {
		t.Fatalf("Replay: %v, %v; want Processed", out, err)
	}
	if got := rows(t, db, "SELECT id FROM cancelled"); got != "o-2" {
		t.Errorf("cancelled: %q, want o-2", got)
	}
}

// consumeAll publishes routerMessages to an in-memory broker and runs
// consume on it until every message is settled.
func consumeAll(t *testing.T, consume func(ctx context.Context, src broker.Source) error) {
	t.Helper()
	b := inboxtest.NewBroker(nil)
	for _, m := range routerMessages {
		if err := b.Publish(t.Context(), &m); err != nil {
			t.Fatal(err)
		}
	}
	src := b.Source()
	defer src.Close()
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- consume(ctx, src) }()
	wctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	werr := b.WaitSettled(wctx)
	stop()
	if err := <-stopped; err != nil {
		t.Fatalf("consume: %v", err)
	}
	if werr != nil {
		t.Fatalf("messages unsettled: %v (%v)", b.Unsettled(), werr)
	}
	if nacks := b.Nacks(); len(nacks) > 0 {
		t.Errorf("nacks %v, want none: every message acked", nacks)
	}
}

func sentMessage(id string) broker.Message {
	for _, m := range routerMessages {
		if m.ID == id {
			return m
		}
	}
	return broker.Message{}
}

// rows returns the one-column rows of query, joined by ", ".
func rows(t *testing.T, db *sql.DB, query string) string {
	t.Helper()
	rs, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ", ")
}

// routerInbox is an inbox on a fresh SQLite file, and its database.
func routerInbox(t *testing.T, cfg *inbox.Config) (*inbox.Inbox[*sql.Tx], *sql.DB) {
	t.Helper()
	d, db := migrated(t, filepath.Join(t.TempDir(), "inbox.db"))
	ib, err := inbox.New(t.Context(), d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ib, db
}
