package main

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
)

// TestPruneKeys: inbox prune -keys deletes the idempotency keys older than
// its duration, on every dialect, and leaves younger ones; without -keys
// it leaves them all.
func TestPruneKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		dialect string
		// backdate ages every key by two days.
		backdate string
	}{
		{"sqlite", `UPDATE idempotency_keys SET created_at = created_at - 2 * 86400000`},
		{"postgres", `UPDATE %s.idempotency_keys SET created_at = created_at - interval '2 days'`},
		{"mysql", `UPDATE idempotency_keys SET created_at = created_at - INTERVAL 2 DAY`},
	} {
		t.Run(c.dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := openDB(t, c.dialect)
			storeKey := func(key string) {
				t.Helper()
				scope := sha256.Sum256([]byte("scope"))
				tx, res, err := e.driver.KeyBegin(ctx, &store.KeyClaimParams{Scope: scope[:], Key: []byte(key), Method: "POST",
					Route: "/charges", Fingerprint: scope[:], Wait: time.Second, LockTimeout: time.Second})
				if err != nil || !res.Claimed {
					t.Fatalf("claim %s: %+v, %v", key, res, err)
				}
				if err := e.driver.KeyCommit(ctx, tx, &store.KeyCommitParams{Scope: scope[:], Key: []byte(key),
					Response: store.KeyResponse{Status: 201, Header: []byte{1}}}); err != nil {
					t.Fatal(err)
				}
			}
			storeKey("old")
			backdate := c.backdate
			if strings.Contains(backdate, "%s") {
				backdate = strings.Replace(backdate, "%s", e.flags[3], 1) // the schema
			}
			if _, err := e.db.Exec(backdate); err != nil {
				t.Fatal(err)
			}
			storeKey("new")
			count := func() (n int) {
				t.Helper()
				table := "idempotency_keys"
				if c.dialect == "postgres" {
					table = e.flags[3] + "." + table
				}
				if err := e.db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if code, out, errOut := runCmd(t, append([]string{"prune"}, e.flags...)...); code != 0 || strings.Contains(out, "idempotency") || count() != 2 {
				t.Fatalf("prune without -keys: exit %d, %q %q, %d keys left; want both left and nothing said of keys", code, out, errOut, count())
			}
			code, out, errOut := runCmd(t, append([]string{"prune", "-keys", "24h"}, e.flags...)...)
			if code != 0 || !strings.Contains(out, "pruned 1 idempotency key in") {
				t.Fatalf("prune -keys 24h: exit %d, %q %q; want 1 idempotency key pruned", code, out, errOut)
			}
			if n := count(); n != 1 {
				t.Fatalf("%d keys left, want the young one", n)
			}
		})
	}
}
