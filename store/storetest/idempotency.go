package storetest

import (
	"context"
	"crypto/rand"
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
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/idempotency"
	"github.com/inboxkit/inbox/store"
)

// The cases of package idempotency's middleware, over real HTTP on
// loopback: each request's effect is a ledger row written in the key's
// transaction.

// keyServer serves POST /orders/{id} behind the middleware.
type keyServer[TTx any] struct {
	tb  testing.TB
	env *Env[TTx]
	url string
	// header is added to each request; a case sets it between requests.
	header http.Header
}

// orderHandler writes the effect named by the request's body, then
// answers 201 with a fresh nonce, so that a replay shows the stored
// response and not a second run.
func orderHandler[TTx any](env *Env[TTx]) idempotency.HandlerFunc[TTx] {
	return func(w http.ResponseWriter, r *http.Request, tx TTx) error {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		if err := env.Write(r.Context(), tx, key(string(body))); err != nil {
			return err
		}
		w.Header().Set("Location", "/orders/"+r.PathValue("id"))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusCreated)
		return json.NewEncoder(w).Encode(map[string]string{"order": r.PathValue("id"), "nonce": rand.Text()})
	}
}

func newKeyServer[TTx any](tb testing.TB, env *Env[TTx], cfg idempotency.Config, fn idempotency.HandlerFunc[TTx]) *keyServer[TTx] {
	tb.Helper()
	ks, ok := env.Driver.(store.KeyStore[TTx])
	if !ok {
		tb.Fatalf("the store %T does not implement store.KeyStore", env.Driver)
	}
	if cfg.Principal == nil {
		cfg.Principal = func(r *http.Request) string { return r.Header.Get("X-Client") }
	}
	mw, err := idempotency.New(context.Background(), ks, &cfg)
	if err != nil {
		tb.Fatalf("idempotency.New: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw.Handle(fn))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return &keyServer[TTx]{tb: tb, env: env, url: srv.URL}
}

// reply is a response, its body read.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) replayed() bool { return r.header.Get(idempotency.ReplayedHeader) == "true" }

// problemCode returns the code of a problem+json reply, "" for another.
func (r reply) problemCode() string {
	if r.header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p idempotency.Problem
	if json.Unmarshal([]byte(r.body), &p) != nil || p.Status != r.status {
		return "malformed problem"
	}
	return p.Code
}

func (r reply) String() string {
	return fmt.Sprintf("%d %q (replayed=%v)", r.status, r.body, r.replayed())
}

// post sends POST /orders/{id} with the key (raw header value, "" for
// none), the client and the body.
func (s *keyServer[TTx]) post(id, rawKey, client, body string) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, s.url+"/orders/"+id, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	// Go's client sends a request with an Idempotency-Key again by itself
	// when its connection breaks, if it can rewind the body. The cases
	// retry themselves, to see each answer.
	req.GetBody = nil
	if rawKey != "" {
		req.Header.Set(idempotency.HeaderName, rawKey)
	}
	req.Header.Set("X-Client", client)
	for k, v := range s.header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

func (s *keyServer[TTx]) mustPost(id, rawKey, client, body string) reply {
	s.tb.Helper()
	r, err := s.post(id, rawKey, client, body)
	if err != nil {
		s.tb.Fatalf("POST /orders/%s: %v", id, err)
	}
	return r
}

// quoted makes an sf-string of k.
func quoted(k string) string { return `"` + k + `"` }

func testKeyReplay[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	s := newKeyServer(t, env, idempotency.Config{}, orderHandler(env))
	first := s.mustPost("1", quoted("k-1"), "alice", "effect-1")
	if first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("first request: %v, want 201 not replayed", first)
	}
	again := s.mustPost("1", quoted("k-1"), "alice", "effect-1")
	if again.status != http.StatusCreated || !again.replayed() || again.body != first.body {
		t.Fatalf("retry: %v, want the first response %v, replayed", again, first)
	}
	if got := again.header.Get("Location"); got != "/orders/1" {
		t.Fatalf("replayed Location %q, want /orders/1", got)
	}
	if got := again.header.Get("Content-Type"); got != "application/json" {
		t.Fatalf("replayed Content-Type %q, want application/json", got)
	}
	if got := again.header.Get("Set-Cookie"); got != "" {
		t.Fatalf("replayed Set-Cookie %q: it must never be stored", got)
	}
	if n := count(t, env, "effect-1"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// Another client's same key is its own: the handler runs for it.
	other := s.mustPost("1", quoted("k-1"), "bob", "effect-1")
	if other.status != http.StatusCreated || other.replayed() || other.body == first.body {
		t.Fatalf("another client's request with the same key: %v, want its own 201", other)
	}
	if n := count(t, env, "effect-1"); n != 2 {
		t.Fatalf("%d effects after the other client's request, want 2", n)
	}
}

func testKeyConcurrent[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	slow := func(w http.ResponseWriter, r *http.Request, tx TTx) error {
		time.Sleep(20 * time.Millisecond) // holds the key while the others arrive
		return orderHandler(env)(w, r, tx)
	}
	s := newKeyServer(t, env, idempotency.Config{}, slow)
	const n = 50
	replies := make([]reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i], errs[i] = s.post("7", quoted("same"), "alice", "effect-7") })
	}
	wg.Wait()
	var ran, replayed, inUse int
	var first string
	for i, r := range replies {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case r.status == http.StatusCreated && !r.replayed():
			ran++
			first = r.body
		case r.status == http.StatusCreated:
			replayed++
		case r.status == http.StatusConflict && r.problemCode() == idempotency.CodeKeyInUse && r.header.Get("Retry-After") != "":
			inUse++
		default:
			t.Fatalf("request %d: %v, want 201 or 409 in use with Retry-After", i, r)
		}
	}
	for i, r := range replies {
		if r.replayed() && r.body != first {
			t.Fatalf("request %d replayed %q, want the response of the run, %q", i, r.body, first)
		}
	}
	t.Logf("%d requests with one key: %d ran, %d replayed, %d in use (409)", n, ran, replayed, inUse)
	if ran != 1 {
		t.Fatalf("%d requests ran the handler, want 1", ran)
	}
	if c := count(t, env, "effect-7"); c != 1 {
		t.Fatalf("%d effects, want 1", c)
	}
}

func testKeyInFlight[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	blocking := func(w http.ResponseWriter, r *http.Request, tx TTx) error {
		once.Do(func() { close(entered); <-release })
		return orderHandler(env)(w, r, tx)
	}
	s := newKeyServer(t, env, idempotency.Config{}, blocking)
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server's Close, which waits for the handler
	done := make(chan reply, 1)
	go func() {
		r, err := s.post("2", quoted("flight"), "alice", "effect-2")
		if err != nil {
			r = reply{body: err.Error()}
		}
		done <- r
	}()
	<-entered
	if env.SingleWriter {
		t.Log("one writer at a time: a second request waits at BEGIN; no 409 to see")
	} else {
		r := s.mustPost("2", quoted("flight"), "alice", "effect-2")
		if r.status != http.StatusConflict || r.problemCode() != idempotency.CodeKeyInUse || r.header.Get("Retry-After") != "1" {
			t.Fatalf("a request while the first runs: %v, want 409 in use with Retry-After: 1", r)
		}
	}
	unblock()
	first := <-done
	if first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("the first request: %v, want 201", first)
	}
	if r := s.mustPost("2", quoted("flight"), "alice", "effect-2"); !r.replayed() || r.body != first.body {
		t.Fatalf("a retry after the first ended: %v, want its response replayed", r)
	}
	if c := count(t, env, "effect-2"); c != 1 {
		t.Fatalf("%d effects, want 1", c)
	}
}

func testKeyReused[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	cfg := idempotency.Config{FingerprintHeaders: []string{"X-Currency"}, MaxRequestBytes: 64}
	s := newKeyServer(t, env, cfg, orderHandler(env))
	s.header = http.Header{"X-Currency": {"EUR"}}
	if r := s.mustPost("3", quoted("k-3"), "alice", "effect-3"); r.status != http.StatusCreated {
		t.Fatalf("first request: %v", r)
	}
	for _, c := range []struct{ what, id, body, currency string }{
		{"another body", "3", "effect-3b", "EUR"},
		{"another path", "4", "effect-3", "EUR"},
		{"another fingerprinted header", "3", "effect-3", "USD"},
	} {
		s.header.Set("X-Currency", c.currency)
		r := s.mustPost(c.id, quoted("k-3"), "alice", c.body)
		if r.status != http.StatusUnprocessableEntity || r.problemCode() != idempotency.CodeKeyReused || r.replayed() {
			t.Fatalf("the key with %s: %v, want 422 %s", c.what, r, idempotency.CodeKeyReused)
		}
	}
	big := "effect-big-" + strings.Repeat("x", int(cfg.MaxRequestBytes))
	if r := s.mustPost("5", quoted("k-5"), "alice", big); r.status != http.StatusRequestEntityTooLarge || r.problemCode() == "" {
		t.Fatalf("a body over MaxRequestBytes: %v, want 413 as a problem", r)
	}
	if n, m, b := count(t, env, "effect-3"), count(t, env, "effect-3b"), count(t, env, big); n != 1 || m != 0 || b != 0 {
		t.Fatalf("%d, %d and %d effects, want 1, 0 and 0", n, m, b)
	}
}

func testKeyFailures[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	var mu sync.Mutex
	fail := map[string]string{} // body → how the handler fails
	handler := func(w http.ResponseWriter, r *http.Request, tx TTx) error {
		body, _ := io.ReadAll(r.Body)
		if err := env.Write(r.Context(), tx, key(string(body))); err != nil {
			return err
		}
		mu.Lock()
		how := fail[string(body)]
		delete(fail, string(body))
		mu.Unlock()
		switch how {
		case "error":
			return errors.New("the handler failed")
		case "panic":
			panic("the handler panicked")
		case "503", "429", "409":
			code := map[string]int{"503": 503, "429": 429, "409": 409}[how]
			http.Error(w, how, code)
			return nil
		case "big":
			_, err := w.Write([]byte(strings.Repeat("x", 100)))
			return err
		}
		w.WriteHeader(http.StatusCreated)
		_, err := w.Write([]byte("made " + string(body)))
		return err
	}
	s := newKeyServer(t, env, idempotency.Config{MaxResponseBytes: 64}, handler)
	for _, c := range []struct {
		how        string
		wantStatus int
		wantCode   string
		stored     bool
	}{
		{how: "error", wantStatus: 500, wantCode: idempotency.CodeFailed},
		{how: "panic"},
		{how: "503", wantStatus: 503},
		{how: "429", wantStatus: 429},
		{how: "big", wantStatus: 500, wantCode: idempotency.CodeResponseTooLarge},
		{how: "409", wantStatus: 409, stored: true}, // a 4xx the handler chose
	} {
		body := "effect-" + c.how
		mu.Lock()
		fail[body] = c.how
		mu.Unlock()
		r, err := s.post("5", quoted("k-"+c.how), "alice", body)
		switch {
		case c.how == "panic" && err == nil:
			t.Fatalf("a panicking handler: %v, want the connection closed", r)
		case c.how != "panic" && err != nil:
			t.Fatalf("%s: %v", c.how, err)
		case c.how != "panic" && (r.status != c.wantStatus || r.problemCode() != c.wantCode):
			t.Fatalf("%s: %v (code %q), want %d %q", c.how, r, r.problemCode(), c.wantStatus, c.wantCode)
		}
		wantEffects := map[bool]int{true: 1, false: 0}[c.stored]
		if n := count(t, env, body); n != wantEffects {
			t.Fatalf("%s: %d effects after it, want %d", c.how, n, wantEffects)
		}
		retry := s.mustPost("5", quoted("k-"+c.how), "alice", body)
		if c.stored {
			if retry.status != c.wantStatus || !retry.replayed() {
				t.Fatalf("%s: retry %v, want the stored %d replayed", c.how, retry, c.wantStatus)
			}
			continue
		}
		if retry.status != http.StatusCreated || retry.replayed() {
			t.Fatalf("%s: retry %v, want the handler run again: 201", c.how, retry)
		}
		if n := count(t, env, body); n != 1 {
			t.Fatalf("%s: %d effects after the retry, want 1", c.how, n)
		}
	}
}

func testKeyForgetClientErrors[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	runs := 0
	var mu sync.Mutex
	handler := func(w http.ResponseWriter, r *http.Request, tx TTx) error {
		mu.Lock()
		runs++
		mu.Unlock()
		if err := env.Write(r.Context(), tx, key("effect-forget")); err != nil {
			return err
		}
		http.Error(w, "no such account", http.StatusNotFound)
		return nil
	}
	s := newKeyServer(t, env, idempotency.Config{ForgetClientErrors: true}, handler)
	for i := range 2 {
		if r := s.mustPost("6", quoted("k-forget"), "alice", "x"); r.status != 404 || r.replayed() {
			t.Fatalf("request %d: %v, want the handler's 404, not replayed", i, r)
		}
	}
	if n := count(t, env, "effect-forget"); runs != 2 || n != 0 {
		t.Fatalf("%d runs and %d effects, want 2 runs and no effect (a 4xx rolled back)", runs, n)
	}
}

func testKeyHeader[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	s := newKeyServer(t, env, idempotency.Config{MaxKeyLength: 16}, orderHandler(env))
	for _, c := range []struct{ what, raw, code string }{
		{"missing", "", idempotency.CodeKeyMissing},
		{"a token, not a string", "abc", idempotency.CodeKeyMalformed},
		{"empty", `""`, idempotency.CodeKeyMalformed},
		{"too long", quoted(strings.Repeat("k", 17)), idempotency.CodeKeyMalformed},
		{"unclosed", `"abc`, idempotency.CodeKeyMalformed},
		{"a list", `"a", "b"`, idempotency.CodeKeyMalformed},
		{"non-ASCII", "\"caf\xc3\xa9\"", idempotency.CodeKeyMalformed},
	} {
		r := s.mustPost("8", c.raw, "alice", "effect-header")
		if r.status != http.StatusBadRequest || r.problemCode() != c.code {
			t.Fatalf("key %s (%q): %v, want 400 %s", c.what, c.raw, r, c.code)
		}
	}
	if n := count(t, env, "effect-header"); n != 0 {
		t.Fatalf("%d effects, want none", n)
	}
	// A key with parameters, escapes and a key of the longest length.
	for _, raw := range []string{`"a\"b\\c";v=1;x`, quoted(strings.Repeat("k", 16))} {
		if r := s.mustPost("8", raw, "alice", "effect-"+raw); r.status != http.StatusCreated {
			t.Fatalf("key %q: %v, want 201", raw, r)
		}
	}
	// Optional: a request without a key runs in a transaction, unstored.
	opt := newKeyServer(t, env, idempotency.Config{Optional: true}, orderHandler(env))
	for range 2 {
		if r := opt.mustPost("9", "", "alice", "effect-optional"); r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("optional key, none sent: %v, want 201", r)
		}
	}
	if n := count(t, env, "effect-optional"); n != 2 {
		t.Fatalf("%d effects without a key, want 2 (nothing stored, each ran)", n)
	}
}

func testKeySlowClientGivesUp[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	for _, c := range []struct {
		what string
		// detach: the handler writes on a context the client's leaving
		// does not cancel.
		detach bool
	}{
		{what: "handler on the request's context: rolled back, run again"},
		{what: "handler on a detached context: committed, replayed", detach: true},
	} {
		started, finished, proceed := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var once, proceeded sync.Once
		goOn := func() { proceeded.Do(func() { close(proceed) }) }
		var calls atomic.Int32
		slow := func(w http.ResponseWriter, r *http.Request, tx TTx) error {
			defer once.Do(func() { close(finished) })
			if calls.Add(1) == 1 { // the first request's; a retry runs at once
				close(started)
				<-proceed            // the client gives up meanwhile
				<-r.Context().Done() // the server saw it leave
			}
			if c.detach {
				r = r.WithContext(context.WithoutCancel(r.Context()))
			}
			return orderHandler(env)(w, r, tx)
		}
		s := newKeyServer(t, env, idempotency.Config{}, slow)
		t.Cleanup(goOn) // before the server's Close, which waits for the handler
		body := fmt.Sprintf("effect-slow-%v", c.detach)
		// The client gives up once the handler runs: a timeout of its own
		// could end before a loaded machine even began the transaction.
		ctx, giveUp := context.WithCancel(context.Background())
		go func() {
			select {
			case <-started:
			case <-time.After(30 * time.Second):
			}
			giveUp()
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/orders/10", strings.NewReader(body))
		req.Header.Set(idempotency.HeaderName, quoted(body))
		req.Header.Set("X-Client", "alice")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: the impatient client got %d, want it to give up", c.what, resp.StatusCode)
		}
		select {
		case <-started:
		default:
			t.Fatalf("%s: the handler never ran in 30 s", c.what)
		}
		// The key is held until the handler ends, though its client left.
		if env.SingleWriter {
			t.Logf("%s: one writer at a time: a retry would wait at BEGIN; no 409 to see", c.what)
		} else if r := s.mustPost("10", quoted(body), "alice", body); r.status != http.StatusConflict {
			t.Fatalf("%s: a retry while the handler runs: %v, want 409", c.what, r)
		}
		goOn()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the handler did not end 30 s after its client left", c.what)
		}
		deadline := time.Now().Add(5 * time.Second)
		r := s.mustPost("10", quoted(body), "alice", body)
		for r.status == http.StatusConflict && time.Now().Before(deadline) { // rolling back or committing still
			time.Sleep(20 * time.Millisecond)
			r = s.mustPost("10", quoted(body), "alice", body)
		}
		if r.status != http.StatusCreated || r.replayed() != c.detach {
			t.Fatalf("%s: the retry after the handler ended: %v, want 201 replayed=%v", c.what, r, c.detach)
		}
		if n := count(t, env, body); n != 1 {
			t.Fatalf("%s: %d effects, want 1", c.what, n)
		}
	}
}

func testKeyHandlerEndsTx[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	handler := func(w http.ResponseWriter, r *http.Request, tx TTx) error {
		if err := env.Write(r.Context(), tx, key("effect-ends")); err != nil {
			return err
		}
		if err := env.Driver.Commit(r.Context(), tx); err != nil { // a handler's bug
			return err
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	}
	s := newKeyServer(t, env, idempotency.Config{}, handler)
	for i := range 2 {
		// The key committed without its response: no replay can be made,
		// and no second run either, since the writes committed.
		if r := s.mustPost("11", quoted("k-ends"), "alice", "x"); r.status != http.StatusInternalServerError || r.problemCode() != idempotency.CodeFailed {
			t.Fatalf("request %d of a handler that committed itself: %v, want 500 %s", i, r, idempotency.CodeFailed)
		}
	}
	if n := count(t, env, "effect-ends"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// The middleware refuses tables that are not migrated, as the inbox does.
func testKeyNotMigrated[TTx any](t *testing.T, h Harness[TTx]) {
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	ks := driverAs[store.KeyStore[TTx]](t, env)
	_, err = idempotency.New(context.Background(), ks, &idempotency.Config{Anonymous: true})
	if !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("idempotency.New on tables never migrated: %v, want inbox.ErrNotMigrated", err)
	}
}
