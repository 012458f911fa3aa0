package idempotencycrash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/idempotency"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/killcount"
)

const (
	// defaultRequests is the randomized run's requests in CI;
	// INBOX_IDEMPOTENCY_CRASH_REQUESTS sets more.
	defaultRequests = 200
	// minKills is the SIGKILLs a CI-sized randomized run must deliver.
	minKills = 10
	// clients and servers of the randomized run.
	clients = 8
	servers = 2
	// requestTimeout bounds one request's retries: servers start again
	// within a second, so a request without a 2xx by then never gets one.
	requestTimeout = 30 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "server" {
		if err := serve(); err != nil {
			fmt.Fprintf(os.Stderr, "idempotencycrash server: %v\n", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func requests() int {
	if n, err := strconv.Atoi(os.Getenv("INBOX_IDEMPOTENCY_CRASH_REQUESTS")); err == nil && n > 0 {
		return n
	}
	return defaultRequests
}

// env is a test's schema: the charges' ledger and the keys' table.
type env struct {
	pool   *pgxpool.Pool
	schema string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{pool: pgenv.Pool(t, 2), schema: testenv.Name("idemcrash_")}
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA `+e.schema+`;
		CREATE TABLE `+e.schema+`.charges (id bigserial PRIMARY KEY, idem_key text NOT NULL, amount bigint NOT NULL, nonce text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), "DROP SCHEMA "+e.schema+" CASCADE") })
	d, err := pgxstore.New(e.pool, &pgxstore.Config{Tables: store.Tables{Schema: e.schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// charges reads the ledger: each key's charges.
func (e *env) charges(t *testing.T) map[string][]charge {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT idem_key, id, amount, nonce FROM "+e.schema+".charges ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]charge{}
	var key string
	var c charge
	_, err = pgx.ForEachRow(rows, []any{&key, &c.ID, &c.Amount, &c.Nonce}, func() error {
		out[key] = append(out[key], c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stored is a key's row in the keys' table.
type stored struct {
	status int
	body   string
}

// stored reads the keys' table: each key's stored response.
func (e *env) stored(t *testing.T) map[string]stored {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT idem_key, status, coalesce(body, '') FROM "+e.schema+".idempotency_keys")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stored{}
	var key, body []byte
	var status int
	_, err = pgx.ForEachRow(rows, []any{&key, &status, &body}, func() error {
		out[string(key)] = stored{status: status, body: string(body)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// server is a child process that serves POST /charges.
type server struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *output
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// startServer starts a server that dies by p, and waits until it
// listens.
func startServer(schema string, p plan) (*server, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"=server", envSchema+"="+schema)
	cmd.Env = append(cmd.Env, p.env()...)
	s := &server{cmd: cmd, out: &output{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	deadline := time.After(30 * time.Second)
	for {
		if u := s.out.listening(); u != "" {
			s.url = u
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("the server (plan %+v) exited before it listened: %v\n%s", p, s.err, s.out)
		case <-deadline:
			s.stop()
			return nil, fmt.Errorf("the server (plan %+v) did not listen within 30 s:\n%s", p, s.out)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// killed waits for the server to exit and reports whether SIGKILL ended
// it.
func (s *server) killed() bool {
	<-s.done
	var exit *exec.ExitError
	return errors.As(s.err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
}

// stop ends the server: it exits when its stdin closes, or is killed
// after 10 s.
func (s *server) stop() {
	_ = s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// output is a server's stdout and stderr.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// listening returns the URL the server said it listens on, "" before it
// said so.
func (o *output) listening() string {
	line, _, ok := strings.Cut(o.String(), "\n")
	if !ok {
		return ""
	}
	u, found := strings.CutPrefix(line, "listening ")
	if !found {
		return ""
	}
	return u
}

// reply is a response, its body read.
type reply struct {
	status   int
	replayed bool
	body     string
}

func (r reply) String() string {
	return fmt.Sprintf("%d %q (replayed=%v)", r.status, r.body, r.replayed)
}

// charge parses a 201's body.
func (r reply) charge() (charge, error) {
	var c charge
	err := json.Unmarshal([]byte(r.body), &c)
	return c, err
}

var client = &http.Client{Timeout: 30 * time.Second}

// post sends POST /charges for amount with the key.
func post(url, key string, amount int64) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount)))
	if err != nil {
		return reply{}, err
	}
	// Go's client sends a request with an Idempotency-Key again by itself
	// when its connection breaks, if it can rewind the body. The tests
	// retry themselves, to see each failure.
	req.GetBody = nil
	req.Header.Set(idempotency.HeaderName, `"`+key+`"`)
	req.Header.Set("X-Account", "acct-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, replayed: resp.Header.Get(idempotency.ReplayedHeader) == "true", body: string(b)}, err
}

// postUntilDone sends the request until it gets an answer other than 409
// (the dead server's transaction may hold the key until PostgreSQL sees
// its connection close), for up to 10 s.
func postUntilDone(t *testing.T, url, key string, amount int64) reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := post(url, key, amount)
		switch {
		case err != nil:
			t.Fatalf("POST /charges with key %s: %v", key, err)
		case r.status != http.StatusConflict:
			return r
		case time.Now().After(deadline):
			t.Fatalf("POST /charges with key %s: still 409 after 10 s: %v", key, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKilled kills a server at one point of a request's life, then
// retries the request on a fresh server with the same key and body.
func TestKilled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, point string
		// committed: the charge and the response were stored before the
		// kill, so that the retry gets a replay.
		committed bool
		// answered: the client got the response before the kill.
		answered bool
	}{
		{"after commit", afterCommit, true, false},
		{"before commit", beforeCommit, false, false},
		{"after response", afterResponse, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const key, amount = "charge-1", 4200
			dying, err := startServer(e.schema, plan{point: c.point, at: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(dying.stop)
			first, err := post(dying.url, key, amount)
			switch {
			case c.answered && (err != nil || first.status != http.StatusCreated || first.replayed):
				t.Fatalf("a server that dies %s: %v, %v; want its 201", c.point, first, err)
			case !c.answered && err == nil:
				t.Fatalf("a server that dies %s answered %v; want a broken connection", c.point, first)
			}
			if !dying.killed() {
				t.Fatalf("the server did not die by SIGKILL %s: %v\n%s", c.point, dying.err, dying.out)
			}
			charges, keys := e.charges(t)[key], e.stored(t)
			var before charge
			switch {
			case c.committed && (len(charges) != 1 || keys[key].status != http.StatusCreated):
				t.Fatalf("killed after the COMMIT: %d charges and a stored response %+v; want the charge and its 201 stored", len(charges), keys[key])
			case c.answered && first.body != keys[key].body:
				t.Fatalf("killed after the response: the client got %v, the key stores %+v; want the same", first, keys[key])
			case c.committed:
				before = charges[0]
			case len(charges) != 0 || len(keys) != 0:
				t.Fatalf("killed before the COMMIT: %d charges and %d keys stored (%v); want nothing", len(charges), len(keys), keys)
			}

			fresh, err := startServer(e.schema, plan{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fresh.stop)
			retry := postUntilDone(t, fresh.url, key, amount)
			got, err := retry.charge()
			switch {
			case retry.status != http.StatusCreated || err != nil:
				t.Fatalf("the retry on a fresh server: %v; want 201 with a charge", retry)
			case c.committed && (!retry.replayed || got != before):
				t.Fatalf("the retry after a kill after the COMMIT: %v; want the dead server's response %+v, replayed", retry, before)
			case !c.committed && retry.replayed:
				t.Fatalf("the retry after a kill before the COMMIT: %v; want the handler to run (not replayed)", retry)
			}
			again := postUntilDone(t, fresh.url, key, amount)
			if again.status != http.StatusCreated || !again.replayed || again.body != retry.body {
				t.Fatalf("a second retry: %v; want %q replayed", again, retry.body)
			}
			charges = e.charges(t)[key]
			if len(charges) != 1 || charges[0] != got {
				t.Fatalf("the ledger holds %+v for the key; want exactly the charge the client got, %+v", charges, got)
			}
		})
	}
}

// TestKilledAtRandom sends requests with distinct keys from concurrent
// clients to servers killed again and again, and checks that each key
// was charged once and every 2xx carried that charge.
func TestKilledAtRandom(t *testing.T) {
	t.Parallel()
	n := requests()
	e := newEnv(t)
	seed := time.Now().UnixNano()
	t.Logf("schema %s, seed %d, %d requests from %d clients to %d servers", e.schema, seed, n, clients, servers)
	r := &randomRun{e: e, n: n, seed: seed, seen: make([][]reply, n), running: map[*server]bool{}}
	began := time.Now()
	r.serve()
	r.send(time.Now().Add(2*time.Minute + time.Duration(n)*50*time.Millisecond))
	r.stopServers()
	for _, f := range r.fails {
		t.Error(f)
	}
	if t.Failed() {
		return
	}
	r.check(t)
	t.Logf("%d requests in %v: SIGKILLs %d (%s); attempts %d, retries %d (broken connections %d, 409 %d, 5xx %d); "+
		"2xx %d, replayed %d; duplicates sent after a 2xx %d",
		n, time.Since(began).Round(100*time.Millisecond), r.kills.Total(), r.kills.String(), r.attempts.Load(),
		r.attempts.Load()-int64(n)-r.dups.Load(), r.broken.Load(), r.conflicts.Load(), r.failures.Load(),
		r.ok.Load(), r.replays.Load(), r.dups.Load())
	if n >= defaultRequests && r.kills.Total() < minKills {
		t.Errorf("want at least %d SIGKILLs in a run of %d requests, got %d (%s)", minKills, n, r.kills.Total(), r.kills.String())
	}
	for _, p := range []string{afterCommit, beforeCommit, afterResponse, timer} {
		if r.kills.At(p) == 0 {
			t.Errorf("no server was killed %s (kills: %s)", p, r.kills.String())
		}
	}
}

// randomRun is one randomized run: its servers, clients and counts.
type randomRun struct {
	e    *env
	n    int
	seed int64
	urls [servers]atomic.Pointer[string] // the live servers'
	wg   sync.WaitGroup                  // the servers' slots

	attempts, broken, conflicts, failures, ok, replays, dups atomic.Int64

	mu       sync.Mutex
	seen     [][]reply         // each request's 2xx
	kills    killcount.Counter // by point
	fails    []string
	running  map[*server]bool
	stopping bool
}

// serve keeps each server slot running: a server that dies by its plan
// is started again with the next plan.
func (r *randomRun) serve() {
	points := []string{afterCommit, beforeCommit, afterResponse, timer}
	for slot := range servers {
		r.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(slot)))
			for spawn := 0; ; spawn++ {
				p := plan{point: points[(spawn+slot)%len(points)], at: 1 + rng.IntN(12), delay: time.Duration(5+rng.IntN(100)) * time.Millisecond}
				s, err := startServer(r.e.schema, p)
				if err != nil {
					r.fail(err.Error())
					return
				}
				if !r.track(s) {
					s.stop()
					return
				}
				r.urls[slot].Store(&s.url)
				killed := s.killed()
				r.urls[slot].Store(nil)
				r.mu.Lock()
				stopping := r.stopping
				delete(r.running, s)
				switch {
				case stopping:
				case killed:
					r.kills.Add(p.point)
				default:
					r.fails = append(r.fails, fmt.Sprintf("a server (plan %+v) exited by itself: %v\n%s", p, s.err, s.out))
				}
				r.mu.Unlock()
				if stopping || !killed {
					return
				}
			}
		})
	}
}

// track records a server as running, or reports false when the run is
// stopping.
func (r *randomRun) track(s *server) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return false
	}
	r.running[s] = true
	return true
}

func (r *randomRun) stopServers() {
	r.mu.Lock()
	r.stopping = true
	running := slices.Collect(maps.Keys(r.running))
	r.mu.Unlock()
	for _, s := range running {
		s.stop()
	}
	r.wg.Wait()
}

func (r *randomRun) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fails = append(r.fails, msg)
}

func (r *randomRun) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fails) > 0
}

// url returns a live server's URL, "" when none is.
func (r *randomRun) url(rng *rand.Rand) string {
	first := rng.IntN(servers)
	for i := range servers {
		if u := r.urls[(first+i)%servers].Load(); u != nil {
			return *u
		}
	}
	return ""
}

func key(i int) string { return fmt.Sprintf("r-%06d", i) }

func amount(i int) int64 { return int64(i+1) * 100 }

// send runs the clients until each request got its 2xx. One request in
// four is sent again after its 2xx, as a client that missed the answer
// would.
func (r *randomRun) send(deadline time.Time) {
	next := make(chan int)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(100+c)))
			for i := range next {
				want := 1
				if rng.IntN(4) == 0 {
					want = 2
				}
				if !r.failed() { // once failed, drain the rest
					r.request(i, want, rng, deadline)
				}
			}
		})
	}
	for i := range r.n {
		if r.failed() {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// request sends request i until it got want 2xx, retrying after broken
// connections, 409 and 5xx, for up to requestTimeout. It records a
// failure of the run otherwise.
func (r *randomRun) request(i, want int, rng *rand.Rand, deadline time.Time) {
	var last string
	began := time.Now()
	for got := 0; got < want; {
		if r.failed() {
			return
		}
		if time.Now().After(deadline) || time.Since(began) > requestTimeout {
			r.fail(fmt.Sprintf("request %d (key %s) got no 2xx within %v; last: %s", i, key(i), time.Since(began).Round(time.Second), last))
			return
		}
		url := r.url(rng)
		if url == "" {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		r.attempts.Add(1)
		rep, err := post(url, key(i), amount(i))
		switch {
		case err != nil:
			r.broken.Add(1)
			last = err.Error()
		case rep.status == http.StatusConflict:
			r.conflicts.Add(1)
			last = rep.String()
		case rep.status >= 500:
			r.failures.Add(1)
			last = rep.String()
		case rep.status >= 200 && rep.status < 300:
			r.ok.Add(1)
			if rep.replayed {
				r.replays.Add(1)
			}
			if got++; got > 1 {
				r.dups.Add(1)
			}
			r.mu.Lock()
			r.seen[i] = append(r.seen[i], rep)
			r.mu.Unlock()
			continue
		default:
			r.fail(fmt.Sprintf("request %d (key %s): %v; want 2xx, or 409 or 5xx to retry", i, key(i), rep))
			return
		}
		time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
	}
}

// check compares the ledger, the stored responses and what the clients
// saw.
func (r *randomRun) check(t *testing.T) {
	t.Helper()
	charges, keys := r.e.charges(t), r.e.stored(t)
	var bad int
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for i := range r.n {
		k := key(i)
		cs := charges[k]
		delete(charges, k)
		if len(cs) != 1 {
			report("key %s: %d charges %+v; want exactly 1", k, len(cs), cs)
			continue
		}
		if s := keys[k]; s.status != http.StatusCreated {
			report("key %s: stored response %+v; want its 201", k, s)
		}
		for j, rep := range r.seen[i] {
			c, err := rep.charge()
			switch {
			case err != nil || c != cs[0]:
				report("key %s: 2xx #%d the client saw, %v, is not its charge %+v", k, j, rep, cs[0])
			case rep.body != r.seen[i][0].body:
				report("key %s: 2xx #%d the client saw, %v, differs from the first, %v", k, j, rep, r.seen[i][0])
			case rep.body != keys[k].body:
				report("key %s: 2xx #%d the client saw, %v, differs from the stored %q", k, j, rep, keys[k].body)
			}
		}
	}
	if len(charges) > 0 {
		report("charges for keys no client sent: %v", charges)
	}
	if len(keys) != r.n {
		report("%d keys stored, want %d", len(keys), r.n)
	}
	if bad > 10 {
		t.Errorf("… %d faults in all", bad)
	}
}
