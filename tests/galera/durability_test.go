package galera

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/tests/internal/inboxcmd"
)

// The durability check on Galera: a synced node takes writes; a node cut
// off from the others (wsrep_ready OFF) does not, and inbox.New says so
// instead of failing on its first claim; so does a server with
// read_only=ON, here the standalone one.
func TestDurabilityCheck(t *testing.T) {
	c := need(t)
	e := open(t, inbox.Config{})
	ctx := context.Background()
	for i, d := range e.drivers {
		if w, err := d.DurabilityWarnings(ctx); err != nil {
			t.Fatalf("node %d, synced: DurabilityWarnings = %q, %v; want no error", i+1, w, err)
		}
	}

	const node = 2 // node 3
	admin := openDB(t, c.Nodes[node].DSN(""), "")
	isolate := func(v string) {
		t.Helper()
		if _, err := admin.ExecContext(ctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate="+v+"'"); err != nil {
			t.Fatal(err)
		}
	}
	isolate("1")
	defer func() {
		isolate("0")
		if err := c.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var name, ready string
		if err := admin.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep_ready'").Scan(&name, &ready); err != nil {
			t.Fatal(err)
		}
		if ready == "OFF" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 3 is still ready 30 s after it was cut off")
		}
	}
	_, err := e.drivers[node].DurabilityWarnings(ctx)
	if !errors.Is(err, store.ErrReadOnly) || !strings.Contains(err.Error(), "wsrep_ready is OFF") {
		t.Errorf("node 3, cut off: DurabilityWarnings: %v; want store.ErrReadOnly saying wsrep_ready is OFF", err)
	}
	if _, err := inbox.New(ctx, e.drivers[node], &inbox.Config{Consumer: "galera"}); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("inbox.New on node 3, cut off: %v; want store.ErrReadOnly", err)
	}
	// inbox check says it too, though the node refuses the schema's read.
	if code, out := inboxcmd.Check(t, inboxcmd.Build(t), "-mysql", c.Nodes[node].DSN(e.name)); code != 3 || !strings.Contains(out, "problem: ") || !strings.Contains(out, "wsrep_ready is OFF") {
		t.Errorf("inbox check on node 3, cut off: exit %d, output:\n%s\nwant exit 3 and a problem saying wsrep_ready is OFF", code, out)
	}

	solo := openDB(t, c.Standalone.DSN(""), "")
	if _, err := solo.ExecContext(ctx, "SET GLOBAL read_only = ON"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := solo.ExecContext(ctx, "SET GLOBAL read_only = OFF"); err != nil {
			t.Error(err)
		}
	}()
	db, err := mysql.Open(c.Standalone.DSN(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DurabilityWarnings(ctx); !errors.Is(err, store.ErrReadOnly) || !strings.Contains(err.Error(), "read_only=ON") {
		t.Errorf("standalone with read_only=ON: DurabilityWarnings: %v; want store.ErrReadOnly saying read_only=ON", err)
	}
}
