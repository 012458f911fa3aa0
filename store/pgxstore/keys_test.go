package pgxstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// A handler that ends the transaction block itself: KeyCommit refuses to
// store the response outside it. After KeyCommit, whatever its outcome,
// the transaction fails as pgx's own does after Commit, instead of
// reaching a connection back in the pool.
func TestKeyCommitOutsideTheBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgenv.PoolInSchema(t, 2)
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	scope := sha256.Sum256([]byte("scope"))
	for _, c := range []struct {
		name    string
		end     string // what the handler sends; "" for nothing
		wantErr error
	}{
		{"handler committed", "COMMIT", store.ErrTxUnusable},
		{"handler rolled back", "ROLLBACK", store.ErrTxUnusable},
		{"nothing", "", nil},
	} {
		p := &store.KeyClaimParams{Scope: scope[:], Key: []byte(c.name), Method: "POST", Route: "/",
			Fingerprint: scope[:], Wait: time.Second, LockTimeout: time.Second}
		tx, res, err := d.KeyBegin(ctx, p)
		if err != nil || !res.Claimed {
			t.Fatalf("%s: claim %+v, %v", c.name, res, err)
		}
		if c.end != "" {
			if _, err := tx.Exec(ctx, c.end); err != nil {
				t.Fatal(err)
			}
		}
		err = d.KeyCommit(ctx, tx, &store.KeyCommitParams{Scope: p.Scope, Key: p.Key, Response: store.KeyResponse{Status: 201, Header: []byte{1}}})
		if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: KeyCommit: %v, want %v", c.name, err, c.wantErr)
		}
		if c.wantErr == nil { // KeyCommit ended tx
			if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("%s: a statement after KeyCommit: %v, want pgx.ErrTxClosed", c.name, err)
			}
		}
		_ = d.Rollback(ctx, tx)
	}
}
