package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
)

// The cases of store.KeyStore, the seam of package idempotency: a key is
// claimed in the transaction that runs the handler, its response stored
// there, and the commit makes both visible at once.

// openKeys opens and migrates an environment and returns its store as a
// store.KeyStore, which every store implements.
func openKeys[TTx any](t *testing.T, h Harness[TTx]) (*Env[TTx], store.KeyStore[TTx]) {
	t.Helper()
	env := open(t, h)
	return env, driverAs[store.KeyStore[TTx]](t, env)
}

// digest is a 32-byte digest of s: a scope or a fingerprint.
func digest(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// keyParams are the claim parameters of key in scope, with a wait of 1 s.
func keyParams(scope, key string) *store.KeyClaimParams {
	return &store.KeyClaimParams{Scope: digest(scope), Key: []byte(key), Method: "POST", Route: "/orders",
		Fingerprint: digest("request " + key), Wait: time.Second, LockTimeout: store.DefaultLockTimeout}
}

// claimKey claims p's key and returns the open transaction, rolled back
// when the test ends unless committed.
func claimKey[TTx any](t *testing.T, ks store.KeyStore[TTx], p *store.KeyClaimParams) TTx {
	t.Helper()
	ctx := context.Background()
	tx, res, err := ks.KeyBegin(ctx, p)
	if err != nil || res == nil || !res.Claimed {
		t.Fatalf("claim of %q: %+v, %v; want it claimed", p.Key, res, err)
	}
	t.Cleanup(func() { _ = ks.Rollback(ctx, tx) })
	return tx
}

// storeKey claims p's key and commits resp with it.
func storeKey[TTx any](t *testing.T, ks store.KeyStore[TTx], p *store.KeyClaimParams, resp store.KeyResponse) {
	t.Helper()
	tx := claimKey(t, ks, p)
	if err := ks.KeyCommit(context.Background(), tx, &store.KeyCommitParams{Scope: p.Scope, Key: p.Key, Response: resp}); err != nil {
		t.Fatalf("commit of %q: %v", p.Key, err)
	}
}

// storedKey returns the row that holds p's key, failing the test unless
// KeyBegin finds one.
func storedKey[TTx any](t *testing.T, ks store.KeyStore[TTx], p *store.KeyClaimParams) *store.StoredKey {
	t.Helper()
	tx, res, err := ks.KeyBegin(context.Background(), p)
	if err == nil && res != nil && res.Claimed {
		_ = ks.Rollback(context.Background(), tx)
	}
	if err != nil || res == nil || res.Claimed || res.Stored == nil {
		t.Fatalf("claim of %q, stored before: %+v, %v; want not claimed, and the stored row", p.Key, res, err)
	}
	return res.Stored
}

// wantClaimable checks that p's key is free: KeyBegin claims it. The
// claim is rolled back.
func wantClaimable[TTx any](t *testing.T, ks store.KeyStore[TTx], p *store.KeyClaimParams, why string) {
	t.Helper()
	tx, res, err := ks.KeyBegin(context.Background(), p)
	if err != nil || res == nil || !res.Claimed {
		t.Fatalf("claim of %q %s: %+v, %v; want it claimed", p.Key, why, res, err)
	}
	if err := ks.Rollback(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
}

func wantStored(t *testing.T, got *store.StoredKey, fingerprint []byte, want store.KeyResponse) {
	t.Helper()
	if !bytes.Equal(got.Fingerprint, fingerprint) || got.Response.Status != want.Status ||
		!bytes.Equal(got.Response.Header, want.Header) || !bytes.Equal(got.Response.Body, want.Body) {
		t.Fatalf("stored fingerprint %x, status %d, header %q, body %.64q;\nwant %x, %d, %q, %.64q, byte for byte",
			got.Fingerprint, got.Response.Status, got.Response.Header, got.Response.Body,
			fingerprint, want.Status, want.Header, want.Body)
	}
}

// A key claimed and committed with its response is stored byte for byte:
// the next KeyBegin does not claim it and returns the first request's
// fingerprint and the response, with the database's time of the claim.
func testKeysRoundTrip[TTx any](t *testing.T, h Harness[TTx]) {
	_, ks := openKeys(t, h)
	cases := []struct {
		name, key, method, route string
		resp                     store.KeyResponse
	}{
		{name: "plain", key: "order-1", method: "POST", route: "/orders",
			resp: store.KeyResponse{Status: 201, Header: []byte("Content-Type: application/json\r\n"), Body: []byte(`{"id":1}`)}},
		{name: "binary", key: "k\x00\xff\xfe\x80", method: "P\x00ST", route: "/orders/\xff\x00/x",
			resp: store.KeyResponse{Status: 200, Header: []byte("X-Bin: \x00\xff\xc3\x28"), Body: []byte("\x00\x01\xfe\xff\x00")}},
		{name: "no header and body", key: "empty", method: "DELETE", route: "/orders/{id}",
			resp: store.KeyResponse{Status: 204}},
		{name: "longest key, large body", key: strings.Repeat("\xfe", store.MaxKeyLength), method: "PUT", route: "/" + strings.Repeat("r", 2000),
			resp: store.KeyResponse{Status: 500, Header: bytes.Repeat([]byte("H: v\r\n"), 1000), Body: bytes.Repeat([]byte{0, 0xff, 'b'}, 100_000)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := keyParams("round trip", tc.key)
			p.Method, p.Route = tc.method, tc.route
			before := time.Now()
			storeKey(t, ks, p, tc.resp)
			again := keyParams("round trip", tc.key)
			again.Fingerprint = digest("another request")
			got := storedKey(t, ks, again)
			wantStored(t, got, p.Fingerprint, tc.resp)
			if got.CreatedAt.Before(before.Add(-time.Minute)) || got.CreatedAt.After(time.Now().Add(time.Minute)) {
				t.Fatalf("stored at %v, want close to %v (the claim's time by the database's clock)", got.CreatedAt, before)
			}
		})
	}
}

// A key is scoped: the same key in another scope is another claim. Keys
// are bytes: case and trailing spaces make other keys. Each is stored with
// its own response.
func testKeysScoped[TTx any](t *testing.T, h Harness[TTx]) {
	_, ks := openKeys(t, h)
	keys := []struct{ scope, key string }{
		{"alice POST /orders", "k"}, {"bob POST /orders", "k"}, {"alice POST /refunds", "k"},
		{"alice POST /orders", "K"}, {"alice POST /orders", "k "}, {"alice POST /orders", "k\x00"},
	}
	for i, k := range keys {
		storeKey(t, ks, keyParams(k.scope, k.key), store.KeyResponse{Status: 200 + i, Body: fmt.Appendf(nil, "response %d", i)})
	}
	for i, k := range keys {
		p := keyParams(k.scope, k.key)
		wantStored(t, storedKey(t, ks, p), p.Fingerprint, store.KeyResponse{Status: 200 + i, Body: fmt.Appendf(nil, "response %d", i)})
	}
}

// The handler's writes commit with the key's response, or roll back with
// its claim: a rolled-back claim leaves no row, and the next KeyBegin
// claims the key.
func testKeysWithHandler[TTx any](t *testing.T, h Harness[TTx]) {
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "Commit", false: "Rollback"}[commit], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env, ks := openKeys(t, h)
			p := keyParams("handler", "pay-1")
			tx := claimKey(t, ks, p)
			if err := env.Write(ctx, tx, "effect"); err != nil {
				t.Fatalf("the handler's write: %v", err)
			}
			resp := store.KeyResponse{Status: 201, Body: []byte("paid")}
			if commit {
				if err := ks.KeyCommit(ctx, tx, &store.KeyCommitParams{Scope: p.Scope, Key: p.Key, Response: resp}); err != nil {
					t.Fatalf("commit: %v", err)
				}
			} else if err := ks.Rollback(ctx, tx); err != nil {
				t.Fatalf("rollback: %v", err)
			}
			want := map[bool]int{true: 1, false: 0}[commit]
			if n, err := env.Count(ctx, "effect"); err != nil || n != want {
				t.Fatalf("%d effects (%v) after the handler's transaction ended, want %d", n, err, want)
			}
			if commit {
				wantStored(t, storedKey(t, ks, p), p.Fingerprint, resp)
			} else {
				wantClaimable(t, ks, p, "after its first claim rolled back")
			}
		})
	}
}

// A key held by an uncommitted claim: another KeyBegin waits p.Wait for
// it, not p.LockTimeout, and fails with store.ErrKeyInUse; once the holder
// committed, the next gets the stored row. On a single writer the second
// waits for the write lock at BEGIN instead, up to its lock timeout, and
// gets the stored row when the holder commits.
func testKeysInUse[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := openLongWaits(t, h) // neither the connection's wait bounds the claim's
	ks := driverAs[store.KeyStore[TTx]](t, env)
	p := keyParams("race", "hot")
	holder := claimKey(t, ks, p)
	resp := store.KeyResponse{Status: 202, Body: []byte("accepted")}
	commitHolder := func() {
		if err := ks.KeyCommit(ctx, holder, &store.KeyCommitParams{Scope: p.Scope, Key: p.Key, Response: resp}); err != nil {
			t.Errorf("the holder's commit: %v", err)
		}
	}
	second := keyParams("race", "hot")
	second.Wait, second.LockTimeout = 50*time.Millisecond, LongLockWait
	if env.SingleWriter {
		second.LockTimeout = store.DefaultLockTimeout
		committed := make(chan struct{})
		go func() {
			defer close(committed)
			time.Sleep(100 * time.Millisecond)
			commitHolder()
		}()
		defer func() { <-committed }() // also when the test fails before
		wantStored(t, storedKey(t, ks, second), p.Fingerprint, resp)
		return
	}
	// MySQL rounds the wait up to 1 s.
	const within = 3 * time.Second
	waitCtx, cancel := context.WithTimeout(ctx, within+time.Second)
	defer cancel()
	begin := time.Now()
	tx, res, err := ks.KeyBegin(waitCtx, second)
	waited := time.Since(begin)
	if err == nil && res.Claimed {
		_ = ks.Rollback(ctx, tx)
	}
	if !errors.Is(err, store.ErrKeyInUse) || waited > within {
		t.Fatalf("a claim behind an uncommitted one, with a wait of %v: %+v, %v after %v; want an error wrapping store.ErrKeyInUse within %v",
			second.Wait, res, err, waited.Round(time.Millisecond), within)
	}
	commitHolder()
	wantStored(t, storedKey(t, ks, second), p.Fingerprint, resp)
}

// A claim waiting behind one that rolls back within its wait claims the
// key.
func testKeysHolderRollsBack[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, ks := openKeys(t, h)
	p := keyParams("race", "hot")
	holder := claimKey(t, ks, p)
	var once sync.Once
	release := func() { once.Do(func() { _ = ks.Rollback(ctx, holder) }) }
	defer release() // also when waitForLockWaits fails
	type result struct {
		res *store.KeyClaimResult
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		second := keyParams("race", "hot")
		second.Wait = 10 * time.Second
		tx, res, err := ks.KeyBegin(ctx, second)
		if err == nil && res.Claimed {
			err = ks.KeyCommit(ctx, tx, &store.KeyCommitParams{Scope: second.Scope, Key: second.Key, Response: store.KeyResponse{Status: 200}})
		}
		waiter <- result{res, err}
	}()
	waitForLockWaits(t, env, 1)
	release()
	r := <-waiter
	if r.err != nil || r.res == nil || !r.res.Claimed {
		t.Fatalf("a claim waiting behind one that rolled back: %+v, %v; want it claimed", r.res, r.err)
	}
	wantStored(t, storedKey(t, ks, p), p.Fingerprint, store.KeyResponse{Status: 200})
}

// The claimed transaction has p.LockTimeout, not p.Wait, whatever the
// previous transaction on the connection had.
func testKeysLockTimeout[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := openLongWaits(t, h)
	if env.LockTimeout == nil {
		t.Skip("Env.LockTimeout is nil: the store's lock timeout cannot be read back")
	}
	ks := driverAs[store.KeyStore[TTx]](t, env)
	for i, lt := range []struct{ wait, lockTimeout time.Duration }{
		{time.Second, 7 * time.Second}, {3 * time.Second, 2 * time.Second}, {time.Second, 7 * time.Second},
	} {
		p := keyParams("lock timeout", fmt.Sprint("k-", i))
		p.Wait, p.LockTimeout = lt.wait, lt.lockTimeout
		tx := claimKey(t, ks, p)
		got, err := env.LockTimeout(ctx, tx)
		if err != nil || got != lt.lockTimeout {
			t.Fatalf("claim with wait %v and lock timeout %v: %v (%v) in effect after it, want %v",
				lt.wait, lt.lockTimeout, got, err, lt.lockTimeout)
		}
		if err := ks.Rollback(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
}

// KeyPrune keeps keys younger than the retention, and deletes the older
// ones oldest first, at most Limit a call.
func testKeysPrune[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	_, ks := openKeys(t, h)
	var ps []*store.KeyClaimParams
	for i := range 3 {
		p := keyParams("prune", fmt.Sprint("k-", i))
		storeKey(t, ks, p, store.KeyResponse{Status: 200})
		ps = append(ps, p)
		time.Sleep(20 * time.Millisecond) // created_at apart, in milliseconds
	}
	prune := func(retention time.Duration, limit, want int) {
		t.Helper()
		res, err := ks.KeyPrune(ctx, &store.PruneParams{Retention: retention, Limit: limit})
		if err != nil || res.Busy || res.Deleted != want {
			t.Fatalf("prune (retention %v, limit %d): %+v, %v; want %d deleted, not busy", retention, limit, res, err, want)
		}
	}
	prune(time.Hour, 10, 0)
	time.Sleep(50 * time.Millisecond)
	prune(10*time.Millisecond, 2, 2)
	wantClaimable(t, ks, ps[0], "after the oldest two were pruned")
	wantClaimable(t, ks, ps[1], "after the oldest two were pruned")
	storedKey(t, ks, ps[2])
	prune(10*time.Millisecond, 2, 1)
	prune(10*time.Millisecond, 2, 0)
}

// One pruner of the keys at a time: while one waits for a row that a
// transaction holds, a second reports Busy at once, and after they end
// the lock is free. On a single writer, the holder has the write lock,
// and KeyPrune is Busy after store.DefaultLockTimeout.
func testKeysPrunerBusy[TTx any](t *testing.T, h Harness[TTx]) {
	env, ks := openKeys(t, h)
	if env.Exec == nil {
		t.Skip("the harness cannot run a statement (Env.Exec)")
	}
	storeKey(t, ks, keyParams("prune", "expired"), store.KeyResponse{Status: 200})
	time.Sleep(20 * time.Millisecond)
	p := &store.PruneParams{Retention: time.Millisecond, Limit: 10}
	wantPrunerBusy(t, env, "idempotency_keys", "UPDATE %s SET status = status", func(ctx context.Context) (*store.PruneResult, error) {
		return ks.KeyPrune(ctx, p)
	})
}

// The keys' pruner has a lock of its own: an inbox pruner that holds the
// inbox's does not make it Busy.
func testKeysPrunerApart[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, ks := openKeys(t, h)
	if env.SingleWriter {
		t.Skip("single writer: the write lock is every pruner's lock")
	}
	if env.Exec == nil {
		t.Skip("the harness cannot run a statement (Env.Exec)")
	}
	expiredInboxRow(t, env)
	release := holdRows(t, env, "inbox", "DELETE FROM %s")
	inboxPruner := make(chan error, 1)
	go func() {
		_, err := env.Driver.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
		inboxPruner <- err
	}()
	waitForLockWaits(t, env, 1) // the inbox's pruner holds its lock
	res, err := ks.KeyPrune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
	if err != nil || res.Busy {
		t.Fatalf("KeyPrune while the inbox's pruner holds its lock: %+v, %v; want not Busy: the keys' pruner has a lock of its own", res, err)
	}
	release()
	if err := <-inboxPruner; err != nil {
		t.Fatalf("the inbox's pruner: %v", err)
	}
}

// A handler that deleted its key's row: KeyCommit fails and commits
// nothing, not the handler's writes without their key.
func testKeysCommitWithoutClaim[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, ks := openKeys(t, h)
	p := keyParams("scope", "gone")
	tx := claimKey(t, ks, p)
	if err := env.Write(ctx, tx, key("effect-gone")); err != nil {
		t.Fatal(err)
	}
	quote := store.QuoteDouble
	if env.Driver.Dialect() == "mysql" {
		quote = store.QuoteBacktick
	}
	if err := env.Exec(ctx, tx, "DELETE FROM "+env.Tables.Name("idempotency_keys", quote)); err != nil {
		t.Fatal(err)
	}
	err := ks.KeyCommit(ctx, tx, &store.KeyCommitParams{Scope: p.Scope, Key: p.Key, Response: store.KeyResponse{Status: 200}})
	if err == nil {
		t.Fatal("KeyCommit of a key whose row the handler deleted: no error, want one")
	}
	if n := count(t, env, "effect-gone"); n != 0 {
		t.Fatalf("%d effects after KeyCommit failed, want none committed", n)
	}
}

// Replays of a committed key do not wait for one another: many at once,
// with the shortest wait, each get the stored row, none ErrKeyInUse.
func testKeysReplaysDoNotWait[TTx any](t *testing.T, h Harness[TTx]) {
	_, ks := openKeys(t, h)
	p := keyParams("replays", "done")
	resp := store.KeyResponse{Status: 201, Body: []byte("made")}
	storeKey(t, ks, p, resp)
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for range goroutines {
		wg.Go(func() {
			for range each {
				q := keyParams("replays", "done")
				q.Wait = time.Millisecond
				tx, res, err := ks.KeyBegin(context.Background(), q)
				switch {
				case err != nil:
					errs <- err
				case res.Claimed:
					_ = ks.Rollback(context.Background(), tx)
					errs <- errors.New("a stored key was claimed again")
				case res.Stored == nil || res.Stored.Response.Status != resp.Status:
					errs <- fmt.Errorf("stored %+v, want status %d", res.Stored, resp.Status)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	var first error
	for err := range errs {
		if n++; first == nil {
			first = err
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d concurrent replays of a stored key failed, the first: %v", n, goroutines*each, first)
	}
}

// A claim that waits for the table, not for the key, is not ErrKeyInUse:
// its lock timeout is the transaction's, and the error is retryable. Only
// PostgreSQL tells the two waits apart (its claim's advisory lock); MySQL
// waits for any row lock under the key's wait, and SQLite at BEGIN.
func testKeysTableLockNotInUse[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, ks := openKeys(t, h)
	if env.Driver.Dialect() != "postgres" {
		t.Skipf("%s cannot tell a wait for the key from a wait for the table", env.Driver.Dialect())
	}
	blocker, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Driver.Rollback(ctx, blocker) }()
	// SHARE conflicts with the insert's ROW EXCLUSIVE, not with a read.
	if err := env.Exec(ctx, blocker, "LOCK TABLE "+env.Tables.Name("idempotency_keys", store.QuoteDouble)+" IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	p := keyParams("table", "fresh")
	p.Wait, p.LockTimeout = time.Millisecond, 300*time.Millisecond
	// A store whose lock timeout is set in the transaction alone (pgx's
	// LockTimeoutPerTransaction) waits for the table unbounded while its
	// driver prepares the insert, before BEGIN: the context bounds it.
	claimCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tx, res, err := ks.KeyBegin(claimCtx, p)
	if err == nil && res.Claimed {
		_ = ks.Rollback(ctx, tx)
	}
	var retryable *store.RetryableError
	if errors.Is(err, store.ErrKeyInUse) || !errors.As(err, &retryable) {
		t.Fatalf("a claim behind a table lock: %+v, %v; want a retryable error, not ErrKeyInUse", res, err)
	}
}
