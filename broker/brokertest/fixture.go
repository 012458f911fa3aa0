package brokertest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// Fixture is an inbox on a fresh SQLite file with a ledger of effects, for
// adapters' own tests as well as the suite's.
type Fixture struct {
	DB    *sql.DB
	Inbox *inbox.Inbox[*sql.Tx]
}

// NewFixture makes a Fixture. The zero fields of cfg get the suite's
// defaults, the consumer "brokertest" and a backoff from 100 ms to 1 s.
func NewFixture(t *testing.T, cfg inbox.Config) *Fixture {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "brokertest"
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff = inbox.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	}
	ib, err := inbox.New(ctx, d, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Fixture{DB: db, Inbox: ib}
}

// Write records an effect of m in tx. It is a handler.
func (f *Fixture) Write(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO ledger (id) VALUES (?)`, m.ID)
	return err
}

// Effects counts the effects of message id.
func (f *Fixture) Effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := f.DB.QueryRow(`SELECT count(*) FROM ledger WHERE id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Consume runs inbox.Consume in the background until the test ends or stop
// is called. stop waits for it and returns its error.
func (f *Fixture) Consume(t *testing.T, src broker.Source, h inbox.Handler[*sql.Tx], cfg *inbox.ConsumerConfig) (stop func() error) {
	t.Helper()
	return inBackground(t, src, "Consume", func(ctx context.Context) error { return inbox.Consume(ctx, f.Inbox, src, h, cfg) })
}

// inBackground runs consume, named name, until the test ends or stop is
// called. stop cancels it, waits up to 30 s for it, closes src and
// returns its error.
func inBackground(t *testing.T, src broker.Source, name string, consume func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("%s did not return 30 s after its context was canceled", name)
			}
			src.Close()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Count counts the distinct messages with an effect.
func (f *Fixture) Count(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.DB.QueryRow(`SELECT count(DISTINCT id) FROM ledger`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func publish(t *testing.T, env *Env, id string) {
	t.Helper()
	err := env.Publisher.Publish(context.Background(), &broker.Message{ID: id, Subject: env.Subject, Type: "test", Payload: []byte("payload of " + id)})
	if err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}
