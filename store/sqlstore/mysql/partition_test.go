package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/storetest"
)

// keyPartitions is how many partitions partitionInbox gives the inbox.
const keyPartitions = 4

// TestMySQLStorePartitionedInbox runs the suite on an inbox table
// partitioned by KEY (consumer, message_id), as docs/scaling.md shows. MySQL
// wants every unique key to hold the partitioning columns: the primary key
// does, so the guard still spans every partition.
func TestMySQLStorePartitionedInbox(t *testing.T) {
	open := mysqlOpen("", nil, time.Second)
	storetest.Run(t, storetest.Harness[*sql.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.Env[*sql.Tx], error) {
		env, err := open(tb, tables)
		if err != nil {
			return nil, err
		}
		env.Driver = &partitioning{Driver: env.Driver.(*sqlstore.Driver), env: env.Env}
		return env.Env, nil
	}})
}

// partitioning partitions the inbox table once its first Migrate made it.
// The cases that check an unmigrated schema still see none.
type partitioning struct {
	*sqlstore.Driver
	env  *storetest.Env[*sql.Tx]
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

// partitionInbox partitions the migrated inbox table in place.
func partitionInbox(ctx context.Context, env *storetest.Env[*sql.Tx]) error {
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err = tx.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s PARTITION BY KEY (consumer, message_id) PARTITIONS %d",
		env.Tables.Name("inbox", store.QuoteBacktick), keyPartitions)); err != nil {
		return err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PARTITIONS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL`,
		env.Tables.Schema, env.Tables.Prefix+"inbox").Scan(&n); err != nil {
		return err
	}
	if n != keyPartitions {
		return fmt.Errorf("the inbox has %d partitions, want %d", n, keyPartitions)
	}
	return nil
}
