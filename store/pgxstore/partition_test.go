package pgxstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/storetest"
)

// hashPartitions is how many partitions partitionInbox gives the inbox.
const hashPartitions = 4

// TestStorePartitionedInbox runs the suite on an inbox table partitioned by
// HASH (consumer, message_id), as docs/scaling.md tells a user with
// billions of rows to do. The primary key holds the partition key, so the
// guard still spans every partition.
func TestStorePartitionedInbox(t *testing.T) {
	storetest.Run(t, storetest.Harness[pgx.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.Env[pgx.Tx], error) {
		env, err := open(tb, &pgxstore.Config{Tables: tables})
		if err != nil {
			return nil, err
		}
		env.Driver = &partitioning{Driver: env.Driver.(*pgxstore.Driver), env: env}
		return env, nil
	}})
}

// partitioning partitions the inbox table once its first Migrate made it.
// The cases that check an unmigrated schema still see none.
type partitioning struct {
	*pgxstore.Driver
	env  *storetest.Env[pgx.Tx]
	mu   sync.Mutex
	done bool
}

func (d *partitioning) Migrate(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Driver.Migrate(ctx); err != nil || d.done {
		return err
	}
	d.done = true
	return partitionInbox(ctx, d.env)
}

// partitionInbox swaps the migrated inbox table for a partitioned one with
// the same columns, key and index, as docs/scaling.md shows.
func partitionInbox(ctx context.Context, env *storetest.Env[pgx.Tx]) error {
	inbox := env.Tables.Name("inbox", store.QuoteDouble)
	old := env.Tables.Name("inbox_unpartitioned", store.QuoteDouble)
	index := env.Tables.Prefix + "inbox_received_at_btree_idx"
	stmts := []string{
		fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, inbox, quoteIdent(env.Tables.Prefix+"inbox_unpartitioned")),
		fmt.Sprintf(`ALTER INDEX %s.%s RENAME TO %s`, quoteIdent(env.Tables.Schema), quoteIdent(index), quoteIdent(index+"_old")),
		fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS, PRIMARY KEY (consumer, message_id)) PARTITION BY HASH (consumer, message_id)`, inbox, old),
	}
	for i := range hashPartitions {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d)`,
			env.Tables.Name(fmt.Sprintf("inbox_p%d", i), store.QuoteDouble), inbox, hashPartitions, i))
	}
	stmts = append(stmts,
		fmt.Sprintf(`CREATE INDEX %s ON %s (received_at)`, quoteIdent(index), inbox),
		fmt.Sprintf(`INSERT INTO %s SELECT * FROM %s`, inbox, old),
		fmt.Sprintf(`DROP TABLE %s`, old))
	for _, s := range stmts {
		if err := execPlain(ctx, env, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, inbox).Scan(&n); err != nil {
		return err
	}
	if n != hashPartitions {
		return fmt.Errorf("the inbox has %d partitions, want %d", n, hashPartitions)
	}
	return nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// TestPrunePartitionedBatch prunes a partitioned inbox a batch at a time.
// A ctid names a row only within its partition: a batch chosen by ctid
// alone took the rows at those ctids in every partition.
func TestPrunePartitionedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := open(t, &pgxstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := partitionInbox(ctx, env); err != nil {
		t.Fatal(err)
	}
	const rows, limit = 200, 10
	inbox := env.Tables.Name("inbox", store.QuoteDouble)
	if err := execPlain(ctx, env, fmt.Sprintf(`INSERT INTO %s (consumer, message_id, received_at)
		SELECT 'c', convert_to('m' || i, 'UTF8'), now() - interval '30 days' + i * interval '1 second'
		FROM generate_series(1, %d) i`, inbox, rows)); err != nil {
		t.Fatal(err)
	}
	d := env.Driver.(*pgxstore.Driver)
	p := &store.PruneParams{Retention: 7 * 24 * time.Hour, Limit: limit}
	for batch := 1; ; batch++ {
		res, err := d.Prune(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Deleted == 0 {
			if want := rows/limit + 1; batch != want {
				t.Fatalf("%d rows pruned in %d batches of %d, want %d", rows, batch, limit, want)
			}
			return
		}
		if res.Deleted != limit {
			t.Fatalf("batch %d of %d rows on %d partitions deleted %d rows", batch, limit, hashPartitions, res.Deleted)
		}
		p.From = res.Last
	}
}

// execPlain runs query in a transaction of its own.
func execPlain(ctx context.Context, env *storetest.Env[pgx.Tx], query string) error {
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, query); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
