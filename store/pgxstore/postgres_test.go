package pgxstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

func migrated(t *testing.T) (*pgxstore.Driver, func(ctx context.Context, tx pgx.Tx, key string) error, func(key string) int) {
	t.Helper()
	env, err := open(t, &pgxstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	count := func(key string) int {
		n, err := env.Count(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return env.Driver.(*pgxstore.Driver), env.Write, count
}

// A connection that dies before COMMIT answers leaves the outcome unknown to
// the client: the message must be retried, never acked, and its redelivery
// processed exactly once.
func TestConnectionKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, write, count := migrated(t)
	killer := pgenv.Pool(t, 2)
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ib.Process(ctx, inbox.Message{ID: "killed"}, func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		if err := write(ctx, tx, "killed"); err != nil {
			return err
		}
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		_, err := killer.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		return err
	})
	if out.Ack() || out.Status != inbox.Retry || !inbox.IsRetryable(err) {
		t.Fatalf("killed connection: %v %v, want Retry with a retryable error", out.Status, err)
	}
	if n := count("killed"); n != 0 {
		t.Fatalf("%d effects of a transaction whose connection died, want 0", n)
	}
	out, err = ib.Process(ctx, inbox.Message{ID: "killed"}, func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		return write(ctx, tx, "killed")
	})
	if err != nil || out.Status != inbox.Processed || count("killed") != 1 {
		t.Fatalf("redelivery: %v %v, %d effects; want processed once", out.Status, err, count("killed"))
	}
}

// PostgreSQL with synchronous_commit=off can lose acked messages in a
// crash: New warns.
func TestDurabilityWarning(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgenv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	pgenv.Pool(t, 1) // skips or fails when PostgreSQL is down
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := testenv.Name("inboxdur_")
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	var logs bytes.Buffer
	_, err = inbox.New(context.Background(), d, &inbox.Config{Consumer: "c", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "synchronous_commit=off") {
		t.Fatalf("no durability warning logged:\n%s", logs.String())
	}
}

// On a database that takes no writes every claim would fail: New says so
// at once, with an error wrapping store.ErrReadOnly. A standby is one;
// default_transaction_read_only=on makes the test's session another.
func TestNewOnReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tables := &pgxstore.Config{}
	env, err := open(t, tables)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pgenv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ro, err := pgxstore.New(pool, tables)
	if err != nil {
		t.Fatal(err)
	}
	_, err = inbox.New(ctx, ro, &inbox.Config{Consumer: "c"})
	if !errors.Is(err, store.ErrReadOnly) || !strings.Contains(err.Error(), "default_transaction_read_only") {
		t.Fatalf("inbox.New on a read-only session: %v, want store.ErrReadOnly naming the setting", err)
	}
	if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"}); err != nil {
		t.Fatalf("inbox.New on the same tables, writable: %v", err)
	}
}

// A handler that swallows an error leaves PostgreSQL's transaction aborted:
// COMMIT rolls back. That is the handler's failure, counted like any other,
// so the message is dead-lettered at MaxAttempts instead of looping.
func TestSwallowedErrorFailsAtCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, _, count := migrated(t)
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "c", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	swallow := func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		_, _ = tx.Exec(ctx, "SELECT 1/0") // error ignored: the transaction is now aborted
		return nil
	}
	out, err := ib.Process(ctx, inbox.Message{ID: "swallowed"}, swallow)
	if out.Status != inbox.Retry || out.Attempts != 1 || !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("first: %+v %v, want Retry after 1 counted attempt", out, err)
	}
	out, _ = ib.Process(ctx, inbox.Message{ID: "swallowed"}, swallow)
	if out.Status != inbox.DeadLettered || out.Attempts != 2 || count("swallowed") != 0 {
		t.Fatalf("second: %+v, want DeadLettered at MaxAttempts", out)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	// A pool that cannot connect: a bad config is refused without SQL.
	nowhere, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer nowhere.Close()
	tests := []struct {
		name   string
		call   func() error
		tables bool // also store.ErrInvalidTables
	}{
		{"nil pool", func() error { _, err := pgxstore.New(nil, nil); return err }, false},
		{"hostile prefix", func() error {
			_, err := pgxstore.New(nowhere, &pgxstore.Config{Tables: store.Tables{Prefix: `x"; DROP TABLE y; --`}})
			return err
		}, true},
		{"schema with a space", func() error {
			_, err := pgxstore.New(nowhere, &pgxstore.Config{Tables: store.Tables{Schema: "a b"}})
			return err
		}, true},
		{"200-byte prefix", func() error {
			_, err := pgxstore.New(nowhere, &pgxstore.Config{Tables: store.Tables{Prefix: strings.Repeat("p", 200)}})
			return err
		}, true},
		{"Migrations with a hostile prefix", func() error { _, err := pgxstore.Migrations(store.Tables{Prefix: "bad;"}); return err }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.call()
			if !errors.Is(err, pgxstore.ErrInvalidConfig) || tc.tables && !errors.Is(err, store.ErrInvalidTables) {
				t.Fatalf("err = %v, want pgxstore.ErrInvalidConfig (and store.ErrInvalidTables: %v)", err, tc.tables)
			}
		})
	}
}

// A dead letter that PostgreSQL refuses as too large (program_limit_exceeded,
// 54000; raised here by a trigger for payloads over 1 KiB, as a bytea over
// 1 GB would) is kept without its payload, once, and says why.
func TestDeadLetterTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := &pgxstore.Config{}
	env, err := open(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tables := cfg.Tables
	pool := pgenv.Pool(t, 2)
	dead := tables.Name("inbox_dead_letters", store.QuoteDouble)
	for _, sql := range []string{
		`CREATE FUNCTION ` + tables.Schema + `.refuse_large() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF length(NEW.payload) > 1024 THEN
				RAISE EXCEPTION 'payload too large' USING ERRCODE = '54000';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER refuse_large BEFORE INSERT ON ` + dead + ` FOR EACH ROW EXECUTE FUNCTION ` + tables.Schema + `.refuse_large()`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ib, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := inbox.Message{ID: "big", Payload: make([]byte, 2048), Headers: map[string]string{"h": "v"}}
	fail := func(context.Context, pgx.Tx, *inbox.Message) error { return errors.New("boom") }
	if out, err := ib.Process(ctx, m, fail); out.Status != inbox.DeadLettered || err != nil {
		t.Fatalf("%v (%v), want DeadLettered", out.Status, err)
	}
	if out, err := ib.Process(ctx, m, fail); out.Status != inbox.Duplicate || err != nil {
		t.Fatalf("redelivery: %v (%v), want Duplicate", out.Status, err)
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 || !dls[0].PayloadLost || dls[0].Message.Payload != nil || !strings.Contains(dls[0].Error, "54000") {
		t.Fatalf("dead letters %+v (%v), want one without its payload, naming 54000", dls, err)
	}
}
