package idempotencycrash

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/idempotency"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// TestFreshKeysNotInUse sends distinct keys, none ever sent before, from
// 16 goroutines through the middleware in-process. No request holds
// another's key, so none may get 409 "in use".
//
// It failed on 3 to 4 requests of 4000 while the claim set lock_timeout
// to Config.Wait (1 ms at least) for the whole INSERT: a wait for the
// table's extension lock then ended as ErrKeyInUse. The wait now applies
// to an advisory lock on the key alone (pgsql.Queries.KeyClaim).
func TestFreshKeysNotInUse(t *testing.T) {
	t.Parallel()
	const goroutines, requests = 16, 4000
	e := newEnv(t)
	ctx := context.Background()
	pool := pgenv.Pool(t, goroutines+2)
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: e.schema}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.New(ctx, d, &idempotency.Config{Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handle(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
		key := strings.Trim(r.Header.Get(idempotency.HeaderName), `"`)
		if _, err := tx.Exec(r.Context(), "INSERT INTO "+e.schema+".charges (idem_key, amount, nonce) VALUES ($1, 1, 'n')", key); err != nil {
			return err
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	})
	var next, inUse atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first string
	for range goroutines {
		wg.Go(func() {
			for i := next.Add(1); i <= requests; i = next.Add(1) {
				r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":1}`))
				r.Header.Set(idempotency.HeaderName, fmt.Sprintf(`"fresh-%d"`, i))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				switch w.Code {
				case http.StatusCreated:
				case http.StatusConflict:
					inUse.Add(1)
				default:
					mu.Lock()
					first = fmt.Sprintf("request %d: %d %s", i, w.Code, w.Body)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if first != "" {
		t.Fatal(first)
	}
	if n := inUse.Load(); n > 0 {
		t.Fatalf("%d of %d requests with fresh, distinct keys got 409 in use; want none (nobody held their keys)", n, requests)
	}
}
