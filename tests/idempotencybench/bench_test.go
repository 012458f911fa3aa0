// The figures of docs/performance.md come from six runs of the whole
// benchmark, one after the other, so that the variants interleave: each
// run's sub-benchmarks then share the machine's slow and fast minutes. In
// tests/ (2 cores, PostgreSQL on loopback):
//
//	go test -c -o /tmp/ibench.test ./idempotencybench/ && for i in 1 2 3 4 5 6; do
//		INBOX_REQUIRE_SERVICES=1 /tmp/ibench.test -test.run '^$' -test.bench BenchmarkIdempotency -test.benchtime 2000x
//	done

package idempotencybench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/idempotency"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store/pgxstore"
)

const (
	// accounts are the principals whose balances the charges update; each
	// parallel goroutine charges its own, so that no two wait for one row.
	accounts = 64
	// parallelism times GOMAXPROCS goroutines send in the parallel runs:
	// 16 on 2 cores, enough to keep PostgreSQL busy while each waits on
	// its round trips.
	parallelism = 8
)

const schemaSQL = `
CREATE TABLE accounts (principal text PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts SELECT 'acct-' || i, 0 FROM generate_series(0, 63) i;
CREATE TABLE ledger (id bigserial PRIMARY KEY, principal text NOT NULL, amount bigint NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE my_keys (principal text NOT NULL, idem_key text NOT NULL, fingerprint bytea NOT NULL,
	status integer NOT NULL DEFAULT 0, body bytea, created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (principal, idem_key));`

// BenchmarkIdempotency charges an account (a ledger row and a balance
// update in one transaction) four ways, in-process (ServeHTTP on a
// recorder) and over loopback HTTP, serially and from 16 goroutines:
// plain, without a key; handwritten, with a key table written by hand in
// the same transaction; middleware, idempotency.Middleware on pgxstore;
// replay, the middleware answering a key it stored. Every op takes a
// fresh key.
func BenchmarkIdempotency(b *testing.B) {
	ctx := context.Background()
	pool, _ := pgenv.PoolInSchema(b, 2*parallelism+4)
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		b.Fatal(err)
	}
	d, err := pgxstore.New(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	mw, err := idempotency.New(ctx, d, &idempotency.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /plain/charges", plain(pool))
	mux.Handle("POST /handwritten/charges", handwritten(pool))
	mux.Handle("POST /middleware/charges", mw.Handle(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
		amount, err := readAmount(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return nil
		}
		c, err := charge(r.Context(), tx, r.Header.Get("X-Account"), amount)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, c)
		return nil
	}))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * parallelism}}
	b.Cleanup(client.CloseIdleConnections)

	inProcess := func(path, key, account string) (int, bool, error) {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100}`))
		header(r, key, account)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code, w.Header().Get(idempotency.ReplayedHeader) == "true", nil
	}
	overHTTP := func(path, key, account string) (int, bool, error) {
		r, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"amount":100}`))
		if err != nil {
			return 0, false, err
		}
		header(r, key, account)
		resp, err := client.Do(r)
		if err != nil {
			return 0, false, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader) == "true", err
	}
	run := testenv.Name("") // keys of one run are its own
	var seq atomic.Int64
	for _, tr := range []struct {
		name string
		send func(path, key, account string) (int, bool, error)
	}{{"inprocess", inProcess}, {"http", overHTTP}} {
		for _, v := range []string{"plain", "handwritten", "middleware", "replay"} {
			path := "/" + v + "/charges"
			if v == "replay" {
				path = "/middleware/charges"
			}
			for _, parallel := range []bool{false, true} {
				name := tr.name + "/" + v + "/serial"
				if parallel {
					name = tr.name + "/" + v + "/parallel"
				}
				b.Run(name, func(b *testing.B) {
					keys := make([]string, b.N)
					for i := range keys {
						keys[i] = fmt.Sprintf("%s-%d", run, seq.Add(1))
					}
					if v == "replay" {
						store(b, inProcess, keys)
					}
					var next, worker, inUse atomic.Int64
					// op sends a fresh key's request, again after a 409 (the
					// middleware's claim gives up on any lock wait over 1 ms,
					// as for a relation's extension under load: counted).
					op := func(account string) bool {
						key := keys[next.Add(1)-1]
						if v == "replay" { // the stored key's own scope
							account = accountOf(key)
						}
						status, replayed, err := tr.send(path, key, account)
						for ; err == nil && status == http.StatusConflict; status, replayed, err = tr.send(path, key, account) {
							inUse.Add(1)
						}
						if err != nil || status != http.StatusCreated || replayed != (v == "replay") {
							b.Errorf("%s %s: status %d replayed=%v, %v; want 201, replayed only in replay", name, key, status, replayed, err)
							return false
						}
						return true
					}
					defer func() { b.ReportMetric(float64(inUse.Load())/float64(b.N), "409/op") }()
					b.ResetTimer()
					if !parallel {
						for range b.N {
							if !op("acct-0") {
								return
							}
						}
						return
					}
					b.SetParallelism(parallelism)
					b.RunParallel(func(pb *testing.PB) {
						account := fmt.Sprintf("acct-%d", worker.Add(1)%accounts)
						for pb.Next() {
							if !op(account) {
								return
							}
						}
					})
				})
			}
		}
	}
}

// store sends each key's request once, from 16 goroutines, so that the
// replay benchmark finds them stored.
// accountOf is the principal that stores key for the replay runs: a
// replay must come from the same principal, whose scope holds the key.
func accountOf(key string) string {
	h := sha256.Sum256([]byte(key))
	return fmt.Sprintf("acct-%d", int(h[0])%accounts)
}

func store(b *testing.B, send func(path, key, account string) (int, bool, error), keys []string) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 2 * parallelism {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				account := accountOf(keys[i])
				status, _, err := send("/middleware/charges", keys[i], account)
				for err == nil && status == http.StatusConflict { // see op
					status, _, err = send("/middleware/charges", keys[i], account)
				}
				if err != nil || status != http.StatusCreated {
					b.Errorf("storing %s: status %d, %v", keys[i], status, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

func header(r *http.Request, key, account string) {
	r.Header.Set(idempotency.HeaderName, `"`+key+`"`)
	r.Header.Set("X-Account", account)
	r.Header.Set("Content-Type", "application/json")
}

// result is a charge's response.
type result struct {
	ID      int64 `json:"id"`
	Balance int64 `json:"balance"`
}

// charge is the business write: a ledger row and the account's balance.
func charge(ctx context.Context, tx pgx.Tx, account string, amount int64) (result, error) {
	var c result
	if err := tx.QueryRow(ctx, "INSERT INTO ledger (principal, amount) VALUES ($1, $2) RETURNING id", account, amount).Scan(&c.ID); err != nil {
		return c, err
	}
	err := tx.QueryRow(ctx, "UPDATE accounts SET balance = balance + $2 WHERE principal = $1 RETURNING balance", account, amount).Scan(&c.Balance)
	return c, err
}

func readAmount(r *http.Request) (int64, error) {
	var req struct {
		Amount int64 `json:"amount"`
	}
	err := json.NewDecoder(r.Body).Decode(&req)
	return req.Amount, err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// plain charges in a transaction of its own, without a key: BEGIN, the
// two writes, COMMIT.
func plain(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		amount, err := readAmount(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var c result
		if err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			c, err = charge(r.Context(), tx, r.Header.Get("X-Account"), amount)
			return err
		}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusCreated, c)
	})
}

// handwritten is what a careful user writes with pgx alone: the key
// claimed in the charge's transaction, the response stored in its row
// before the COMMIT, a stored key answered from its row.
func handwritten(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		amount, err := readAmount(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		account, key := r.Header.Get("X-Account"), strings.Trim(r.Header.Get(idempotency.HeaderName), `"`)
		fp := sha256.Sum256(body)
		status, resp, err := func() (int, []byte, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return 0, nil, err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			var claimed bool
			err = tx.QueryRow(ctx, `INSERT INTO my_keys (principal, idem_key, fingerprint) VALUES ($1, $2, $3)
				ON CONFLICT DO NOTHING RETURNING true`, account, key, fp[:]).Scan(&claimed)
			if errors.Is(err, pgx.ErrNoRows) {
				var stored []byte
				var status int
				var resp []byte
				if err := tx.QueryRow(ctx, "SELECT fingerprint, status, body FROM my_keys WHERE principal = $1 AND idem_key = $2",
					account, key).Scan(&stored, &status, &resp); err != nil {
					return 0, nil, err
				}
				if !bytes.Equal(stored, fp[:]) {
					return http.StatusUnprocessableEntity, nil, nil
				}
				return status, resp, nil
			}
			if err != nil {
				return 0, nil, err
			}
			c, err := charge(ctx, tx, account, amount)
			if err != nil {
				return 0, nil, err
			}
			resp, err := json.Marshal(c)
			if err != nil {
				return 0, nil, err
			}
			if _, err := tx.Exec(ctx, "UPDATE my_keys SET status = $3, body = $4 WHERE principal = $1 AND idem_key = $2",
				account, key, http.StatusCreated, resp); err != nil {
				return 0, nil, err
			}
			return http.StatusCreated, resp, tx.Commit(ctx)
		}()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(resp)
	})
}
