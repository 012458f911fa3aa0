package galera

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// A COMMIT on node 1 returns once the write set is certified on every
// node, not once node 2 applied it. Right after it, node 2 may not show
// the effect, and a redelivery claimed on node 2 may not see the inbox
// row: it runs the handler, then fails certification (1213), a Retry.
// wsrep_sync_wait=1 makes a read, and each BEGIN, wait until the node
// applied what the cluster committed before: no stale read, and the
// redelivery is a Duplicate at once. Either way there is one effect.
func TestSyncWait(t *testing.T) {
	c := need(t)
	e := open(t, inbox.Config{})
	ctx := context.Background()
	n := messages(t, 150)
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wsrep_sync_wait=%d", wait), func(t *testing.T) {
			params := fmt.Sprintf("wsrep_sync_wait=%d", wait)
			reader := openDB(t, c.Nodes[1].DSN(e.name), params)
			db, err := mysql.Open(c.Nodes[1].DSN(e.name)+"?"+params, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
			if err != nil {
				t.Fatal(err)
			}
			node2, err := inbox.New(ctx, d, &inbox.Config{Consumer: "galera"})
			if err != nil {
				t.Fatal(err)
			}
			var stale, retries, duplicates int
			var y tally
			var keys []string
			begin := time.Now()
			for i := range n {
				m := inbox.Message{ID: fmt.Sprintf("w%d-%04d", wait, i)}
				keys = append(keys, m.ID)
				out, err := e.inboxes[0].Process(ctx, m, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
					return write(ctx, tx, m.ID, 0)
				})
				if out.Status != inbox.Processed {
					t.Fatalf("%s on node 1: %v %v", m.ID, out.Status, err)
				}
				var got int
				if err := reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger WHERE k = ?", m.ID).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got == 0 {
					stale++
				}
				out, err = node2.Process(ctx, m, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
					return write(ctx, tx, m.ID, 1)
				})
				switch out.Status {
				case inbox.Duplicate:
					duplicates++
				case inbox.Retry:
					retries++
					y.add(err)
				default:
					t.Fatalf("%s redelivered on node 2 right after its commit on node 1: %v %v", m.ID, out.Status, err)
				}
			}
			t.Logf("%d commits on node 1 in %v: on node 2 right after, %d stale reads; redeliveries %d Duplicate, %d Retry %v",
				n, time.Since(begin).Round(time.Millisecond), stale, duplicates, retries, y.String())
			if wait == 1 && (stale > 0 || retries > 0) {
				t.Fatalf("with wsrep_sync_wait=1: %d stale reads and %d Retry redeliveries, want none", stale, retries)
			}
			got := e.effects(t, 1)
			for _, k := range keys {
				if got[k] != 1 {
					t.Fatalf("%s: %d effects, want 1", k, got[k])
				}
			}
		})
	}
}
