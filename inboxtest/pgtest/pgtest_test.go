package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest/pgtest"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
)

// TestMain skips the whole package when PostgreSQL does not answer, or
// fails it with INBOX_REQUIRE_SERVICES=1. The example cannot skip by
// itself: its Output must match.
func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	conn, err := pgx.Connect(ctx, pgenv.DSN())
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(ctx)
	}
	cancel()
	switch {
	case err != nil && testenv.Required():
		fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL is required (INBOX_REQUIRE_SERVICES=1) but unavailable: %v\n", err)
		os.Exit(1)
	case err != nil:
		fmt.Printf("pgtest: PostgreSQL unavailable, skipping the tests and the example (set INBOX_REQUIRE_SERVICES=1 to fail instead): %v\n", err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Each call gets a schema of its own, with the inbox's tables and the
// test's own unqualified tables in it. It is gone once the test ends.
func TestSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := pgenv.Pool(t, 1)
	var schemas []string
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			pool, schema := pgtest.Schema(t)
			schemas = append(schemas, schema)
			if _, err := pool.Exec(ctx, `CREATE TABLE ledger (id text)`); err != nil {
				t.Fatal(err)
			}
			rows, _ := admin.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
			tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(tables, " "); !strings.Contains(got, "inbox ") || !strings.Contains(got, "ledger") {
				t.Fatalf("tables in %s: %s; want the inbox's and ledger", schema, got)
			}
		})
	}
	if len(schemas) != 2 || schemas[0] == schemas[1] {
		t.Fatalf("schemas %q: want two distinct ones", schemas)
	}
	for _, schema := range schemas {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("schema %s still there after its test ended, want it dropped", schema)
		}
	}
}

// New's inbox works in its schema: a message is processed, then a
// duplicate. A nil Config gets the default consumer.
func TestNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, pool := pgtest.New(t, nil)
	if got := ib.Consumer(); got != pgtest.DefaultConsumer {
		t.Errorf("consumer %q, want %q", got, pgtest.DefaultConsumer)
	}
	noop := func(context.Context, pgx.Tx, *inbox.Message) error { return nil }
	for _, want := range []inbox.Status{inbox.Processed, inbox.Duplicate} {
		out, err := ib.Process(ctx, inbox.Message{ID: "m-1"}, noop)
		if err != nil || out.Status != want {
			t.Fatalf("Process: %v, %v; want %v", out.Status, err, want)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows in the schema's inbox table (%v), want 1", n, err)
	}
}

// Without PostgreSQL, Schema skips the test and says how to fail instead;
// with INBOX_REQUIRE_SERVICES=1 it fails.
func TestUnavailable(t *testing.T) {
	t.Setenv("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	for _, tc := range []struct {
		require, want string
	}{
		{"", "skip: PostgreSQL at 127.0.0.1 unavailable, skipping (set INBOX_REQUIRE_SERVICES=1 to fail instead)"},
		{"1", "fatal: PostgreSQL at 127.0.0.1 is required (INBOX_REQUIRE_SERVICES=1) but unavailable"},
	} {
		t.Setenv("INBOX_REQUIRE_SERVICES", tc.require)
		rec := &recorder{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			pgtest.Schema(rec)
			rec.ended = "returned"
		}()
		<-done
		if !strings.HasPrefix(rec.ended, tc.want) {
			t.Errorf("INBOX_REQUIRE_SERVICES=%q: Schema ended with %q, want %q", tc.require, rec.ended, tc.want)
		}
		rec.cleanup()
	}
}

// recorder is a testing.TB that records how a test ended. Its Skipf and
// Fatalf end the goroutine, as testing's do.
type recorder struct {
	testing.TB // nil: Schema calls only the methods below
	ended      string
	cleanups   []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *recorder) Skipf(format string, args ...any) {
	r.ended = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.ended = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}
