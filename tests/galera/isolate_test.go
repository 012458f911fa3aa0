package galera

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

// A node cut off from the others (gmcast.isolate) leaves the primary
// component. Its open transactions cannot certify: their COMMIT fails
// with 1047, "WSREP has not yet prepared node for application use". That
// is transient, a Retry that counts no attempt: nothing committed. With
// MaxAttempts 1, counting it would dead-letter the message.
func TestNonPrimaryNodeIsRetry(t *testing.T) {
	c := need(t)
	e := open(t, inbox.Config{MaxAttempts: 1,
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}})
	ctx := context.Background()
	const node = 2 // node 3
	admin := openDB(t, c.Nodes[node].DSN(""), "")
	isolate := func(on bool) {
		t.Helper()
		v := "0"
		if on {
			v = "1"
		}
		if _, err := admin.ExecContext(ctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate="+v+"'"); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		isolate(false)
		if err := c.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	var status string
	out, err := e.inboxes[node].Process(ctx, inbox.Message{ID: "isolated"}, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if err := write(ctx, tx, m.ID, node); err != nil {
			return err
		}
		isolate(true)
		// The others declare the node gone after evs.suspect_timeout, 5 s.
		deadline := time.Now().Add(30 * time.Second)
		for status != "non-Primary" && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			var name string
			if err := admin.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_status'").Scan(&name, &status); err != nil {
				return err
			}
		}
		return nil
	})
	if status != "non-Primary" {
		t.Fatalf("node 3's wsrep_cluster_status %q after isolating it, want non-Primary", status)
	}
	t.Logf("COMMIT on the isolated node: %v %v (error %s)", out.Status, err, errClass(err))
	if out.Status != inbox.Retry || !(inbox.IsRetryable(err) || e.drivers[node].Retryable(err)) {
		t.Fatalf("COMMIT on a non-primary node: %v %v, want Retry with a transient error", out.Status, err)
	}
	// The broker redelivers to a consumer on a live node: processed there.
	var y tally
	out, err = deliver(ctx, e.inboxes[0], inbox.Message{ID: "isolated"}, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		return write(ctx, tx, m.ID, 0)
	}, &y)
	if !out.Ack() {
		t.Fatalf("redelivery on node 1: %v %v (retries %v), want an outcome to ack", out.Status, err, y.String())
	}
	t.Logf("redelivery on node 1 while node 3 is cut off: %v", out.Status)
	isolate(false)
	if err := c.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	// The refused COMMIT left its transaction open on its pooled
	// connection. Use every connection of node 3's pool: the next BEGIN
	// on that one commits it implicitly, or certification refuses it.
	var wg sync.WaitGroup
	var others []string
	for i := range 2 * poolSize {
		id := fmt.Sprintf("after-%02d", i)
		others = append(others, id)
		wg.Go(func() {
			out, err := deliver(ctx, e.inboxes[node], inbox.Message{ID: id}, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				return write(ctx, tx, m.ID, node)
			}, &y)
			if !out.Ack() {
				t.Errorf("%s on node 3 after the rejoin: %v %v", id, out.Status, err)
			}
		})
	}
	wg.Wait()
	e.wantOnce(t, append(others, "isolated"))
	t.Logf("retries on node 3 after the rejoin, by error: %v", y.String())
}
