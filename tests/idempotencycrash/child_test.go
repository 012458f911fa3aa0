package idempotencycrash

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/idempotency"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// The child's environment: what the parent tells each server.
const (
	envRole   = "INBOX_IDEMCRASH_ROLE"   // "server" in a child
	envSchema = "INBOX_IDEMCRASH_SCHEMA" // the test's schema
	envPoint  = "INBOX_IDEMCRASH_POINT"  // where the server dies; none when empty
	envAt     = "INBOX_IDEMCRASH_AT"     // at the point's at-th occurrence
	envDelay  = "INBOX_IDEMCRASH_DELAY"  // timer: this long (ms) after the first request
)

// The kill points.
const (
	// afterCommit: the middleware committed and writes a fresh 2xx, as
	// the first byte of it would leave.
	afterCommit = "after-commit"
	// beforeCommit: the handler wrote its charge in the key's
	// transaction, which is still open.
	beforeCommit = "before-commit"
	// afterResponse: the fresh 2xx went out whole, after the COMMIT.
	afterResponse = "after-response"
	// timer: a while after the server's first request, wherever it is.
	timer = "timer"
)

// plan says where a server kills itself with SIGKILL. The zero plan never
// does.
type plan struct {
	point string
	at    int
	delay time.Duration
}

func (p plan) env() []string {
	return []string{envPoint + "=" + p.point, envAt + "=" + strconv.Itoa(p.at), envDelay + "=" + strconv.Itoa(int(p.delay.Milliseconds()))}
}

func readPlan() plan {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	return plan{point: os.Getenv(envPoint), at: atoi(envAt), delay: time.Duration(atoi(envDelay)) * time.Millisecond}
}

// killer carries out a plan in the server.
type killer struct {
	plan
	hits atomic.Int64
	arm  sync.Once
}

// die kills the process at once, as a power cut or the OOM killer would:
// no deferred function, no shutdown, no flush.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// started arms the timer on the server's first request.
func (k *killer) started() {
	if k.point == timer {
		k.arm.Do(func() { time.AfterFunc(k.delay, die) })
	}
}

// reached counts an occurrence of point and dies at the plan's.
func (k *killer) reached(point string) {
	if point == k.point && k.hits.Add(1) >= int64(k.at) {
		die()
	}
}

// serve runs the server until the parent closes its stdin: POST /charges
// behind the middleware, on loopback, its address told on stdout.
func serve() error {
	ctx := context.Background()
	schema := os.Getenv(envSchema)
	cfg, err := pgxpool.ParseConfig(pgenv.DSN())
	if err != nil {
		return err
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		return err
	}
	mw, err := idempotency.New(ctx, d, &idempotency.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	if err != nil {
		return err
	}
	k := &killer{plan: readPlan()}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw.Handle(chargeHandler(schema, k)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closed it, or died
		os.Exit(0)
	}()
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kw := &killingWriter{ResponseWriter: w, k: k}
		mux.ServeHTTP(kw, r)
		kw.finish()
	}))
}

// charge is the body of a 201: the ledger row, and the nonce that only
// the run that wrote it knows.
type charge struct {
	ID     int64  `json:"id"`
	Amount int64  `json:"amount"`
	Nonce  string `json:"nonce"`
}

// chargeHandler writes a charge in the key's transaction and answers 201
// with it.
func chargeHandler(schema string, k *killer) idempotency.HandlerFunc[pgx.Tx] {
	return func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
		k.started()
		var req struct {
			Amount int64 `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return nil
		}
		c := charge{Amount: req.Amount, Nonce: rand.Text()}
		key := strings.Trim(r.Header.Get(idempotency.HeaderName), `"`)
		if err := tx.QueryRow(r.Context(), "INSERT INTO "+schema+".charges (idem_key, amount, nonce) VALUES ($1, $2, $3) RETURNING id",
			key, c.Amount, c.Nonce).Scan(&c.ID); err != nil {
			return err
		}
		k.reached(beforeCommit)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		return json.NewEncoder(w).Encode(c)
	}
}

// killingWriter is the server's ResponseWriter outside the middleware. The
// middleware writes a fresh 2xx only after its COMMIT, so the first
// WriteHeader of one is the point between the COMMIT and the response.
// For the point after the response, it holds the status until the body
// comes (the middleware writes it in one piece), sends both with a
// Content-Length and flushes them, so that the client has the whole
// response when the server dies.
type killingWriter struct {
	http.ResponseWriter
	k    *killer
	sent bool
	held int // the status held for afterResponse, 0 for none
}

func (w *killingWriter) WriteHeader(code int) {
	if w.sent {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.sent = true
	if code >= 200 && code < 300 && w.Header().Get(idempotency.ReplayedHeader) == "" {
		w.k.reached(afterCommit)
		if w.k.point == afterResponse {
			w.held = code
			return
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *killingWriter) Write(p []byte) (int, error) {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	if w.held == 0 {
		return w.ResponseWriter.Write(p)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(p)))
	w.ResponseWriter.WriteHeader(w.held)
	w.held = 0
	n, err := w.ResponseWriter.Write(p)
	w.ResponseWriter.(http.Flusher).Flush()
	w.k.reached(afterResponse)
	return n, err
}

// finish sends a status still held, for a response without a body.
func (w *killingWriter) finish() {
	if w.held != 0 {
		w.ResponseWriter.WriteHeader(w.held)
		w.held = 0
	}
}
