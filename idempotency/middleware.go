package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
)

// Middleware runs HTTP handlers in a transaction that also claims the
// request's Idempotency-Key, and stores the response in it. Make one with
// [New].
type Middleware[TTx any] struct {
	store store.KeyStore[TTx]
	cfg   Config
}

// HandlerFunc handles a request in tx, which also holds its key. An error
// rolls tx back, and the client gets 500 (the error is logged, not sent).
// It must not commit or roll back tx: the middleware does, after storing
// the response. A key committed without its response answers 500 until it
// expires.
type HandlerFunc[TTx any] func(w http.ResponseWriter, r *http.Request, tx TTx) error

// New returns a Middleware on s, a store driver such as pgxstore's or
// sqlstore's.
//
// It checks that the tables are at the schema version this code needs. If
// they are not, the error wraps [inbox.ErrNotMigrated]. A nil s, or a
// Config it refuses, is an error wrapping [ErrInvalidConfig].
func New[TTx any](ctx context.Context, s store.KeyStore[TTx], cfg *Config) (*Middleware[TTx], error) {
	if s == nil || reflect.ValueOf(s).Kind() == reflect.Pointer && reflect.ValueOf(s).IsNil() {
		return nil, fmt.Errorf("%w: nil store (%T)", ErrInvalidConfig, s)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := migrate.Check(ctx, s, "idempotency", inbox.ErrNotMigrated); err != nil {
		return nil, err
	}
	return &Middleware[TTx]{store: s, cfg: c}, nil
}

// Handle returns a handler that runs fn in the key's transaction.
func (m *Middleware[TTx]) Handle(fn HandlerFunc[TTx]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, fn) })
}

// Wrap returns a handler that runs next in the key's transaction. next
// finds the transaction with [FromContext].
func (m *Middleware[TTx]) Wrap(next http.Handler) http.Handler {
	return m.Handle(func(w http.ResponseWriter, r *http.Request, _ TTx) error {
		next.ServeHTTP(w, r)
		return nil
	})
}

type txKey struct{}

// FromContext returns the transaction of the request whose context is ctx,
// as a handler given to [Middleware.Wrap] needs it. ok is false outside
// such a handler, or when TTx is not the Middleware's type.
func FromContext[TTx any](ctx context.Context) (tx TTx, ok bool) {
	tx, ok = ctx.Value(txKey{}).(TTx)
	return tx, ok
}

// serve handles one request.
func (m *Middleware[TTx]) serve(w http.ResponseWriter, r *http.Request, fn HandlerFunc[TTx]) {
	key, err := parseKey(r.Header, m.cfg.MaxKeyLength)
	var ke *KeyError
	switch {
	case errors.Is(err, errNoKey) && m.cfg.Optional:
		m.serveWithoutKey(w, r, fn)
		return
	case errors.Is(err, errNoKey):
		m.problem(w, http.StatusBadRequest, CodeKeyMissing, "This operation requires an Idempotency-Key header: a string in double quotes, unique per operation, sent again with each retry.", 0)
		return
	case errors.As(err, &ke):
		m.problem(w, http.StatusBadRequest, CodeKeyMalformed, "The Idempotency-Key header is malformed: "+ke.Reason+".", 0)
		return
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return
	}
	principal, ok := m.principal(w, r)
	if !ok {
		return
	}
	p := m.claimParams(r, principal, key, body)
	// The transaction lives as long as the handler, not the client's
	// connection: database/sql would roll it back when the client leaves,
	// and free the key while the handler still runs.
	tx, res, err := m.store.KeyBegin(context.WithoutCancel(r.Context()), p)
	if err != nil {
		m.failed(w, r, "claiming the key", err)
		return
	}
	if !res.Claimed {
		m.replay(w, r, p, res.Stored)
		return
	}
	defer m.rollback(r, tx) // a no-op after the commit
	rec, err := m.run(r, tx, fn)
	if m.discarded(w, r, tx, rec, err) {
		return
	}
	ctx, cancel := detached(r)
	defer cancel()
	err = m.store.KeyCommit(ctx, tx, &store.KeyCommitParams{Scope: p.Scope, Key: p.Key, Response: store.KeyResponse{
		Status: rec.code(), Header: encodeHeader(rec.header, m.cfg.StoredHeaders), Body: rec.body.Bytes(),
	}})
	if err != nil {
		m.failed(w, r, "committing", err)
		return
	}
	rec.send(w)
}

// serveWithoutKey runs fn in a transaction of its own, for a request
// without a key where the key is optional.
func (m *Middleware[TTx]) serveWithoutKey(w http.ResponseWriter, r *http.Request, fn HandlerFunc[TTx]) {
	tx, err := m.store.Begin(context.WithoutCancel(r.Context()), &store.BeginParams{LockTimeout: m.cfg.LockTimeout})
	if err != nil {
		m.failed(w, r, "beginning", err)
		return
	}
	defer m.rollback(r, tx)
	rec, err := m.run(r, tx, fn)
	if m.discarded(w, r, tx, rec, err) {
		return
	}
	ctx, cancel := detached(r)
	defer cancel()
	if err := m.store.Commit(ctx, tx); err != nil {
		m.failed(w, r, "committing", err)
		return
	}
	rec.send(w)
}

// run runs fn in tx and holds its response.
func (m *Middleware[TTx]) run(r *http.Request, tx TTx, fn HandlerFunc[TTx]) (*recorder, error) {
	rec := newRecorder(m.cfg.MaxResponseBytes)
	err := fn(rec, r.WithContext(context.WithValue(r.Context(), txKey{}, tx)), tx)
	return rec, err
}

// discarded reports whether the handler's response, rec or its error err,
// is not to be committed. Then it rolls tx back, and answers the client
// after that, so that a retry finds the key free.
func (m *Middleware[TTx]) discarded(w http.ResponseWriter, r *http.Request, tx TTx, rec *recorder, err error) bool {
	switch {
	case err != nil:
		m.rollback(r, tx)
		level := slog.LevelError
		if r.Context().Err() != nil { // the client left: no fault of the server's
			level = slog.LevelInfo
		}
		m.cfg.Logger.Log(r.Context(), level, "idempotency: the handler failed; its writes and key were rolled back",
			"method", r.Method, "route", m.cfg.Route(r), "error", err)
		m.problem(w, http.StatusInternalServerError, CodeFailed, "The request failed, and nothing of it was kept: send it again with the same Idempotency-Key.", 0)
		return true
	case rec.over:
		m.rollback(r, tx)
		m.cfg.Logger.ErrorContext(r.Context(), "idempotency: the response is larger than MaxResponseBytes; the handler's writes and key were rolled back",
			"method", r.Method, "route", m.cfg.Route(r), "max_response_bytes", m.cfg.MaxResponseBytes)
		m.problem(w, http.StatusInternalServerError, CodeResponseTooLarge, "The response is too large to store, and nothing of the request was kept.", 0)
		return true
	case !m.keeps(rec.code()):
		m.rollback(r, tx)
		rec.send(w)
		return true
	}
	return false
}

// keeps reports whether a response with status is stored.
func (m *Middleware[TTx]) keeps(status int) bool {
	switch {
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return false
	case status >= 400:
		return !m.cfg.ForgetClientErrors
	}
	return true
}

// replay answers with the response stored under the key, or with 422 when
// the key came with another request.
func (m *Middleware[TTx]) replay(w http.ResponseWriter, r *http.Request, p *store.KeyClaimParams, s *store.StoredKey) {
	switch {
	case s == nil: // pruned between the claim and its read
		m.problem(w, http.StatusConflict, CodeKeyInUse, "The key changed while it was read: send the request again.", 1)
		return
	case !bytes.Equal(s.Fingerprint, p.Fingerprint):
		m.problem(w, http.StatusUnprocessableEntity, CodeKeyReused, "This Idempotency-Key was sent before with another request: another path, query, body or fingerprinted header. Use a new key for a new request.", 0)
		return
	}
	if s.Response.Status < 100 || s.Response.Status > 999 {
		m.failed(w, r, "reading the stored response", errNoResponse)
		return
	}
	h, err := decodeHeader(s.Response.Header)
	if err != nil {
		m.failed(w, r, "reading the stored response", err)
		return
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(s.Response.Status)
	_, _ = w.Write(s.Response.Body)
}

// errNoResponse is the error of a key committed without its response,
// when a handler committed the transaction itself.
var errNoResponse = errors.New("idempotency: the key was committed without a response: did the handler end its transaction itself? The key answers 500 until it expires")

// readBody reads the request's body for its fingerprint, and puts it back
// for the handler. It answers the client itself when it cannot.
func (m *Middleware[TTx]) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxRequestBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		m.problem(w, http.StatusRequestEntityTooLarge, CodeRequestTooLarge, fmt.Sprintf("The request's body is over %d bytes.", m.cfg.MaxRequestBytes), 0)
		return nil, false
	case err != nil:
		m.problem(w, http.StatusBadRequest, CodeBodyUnreadable, "The request's body could not be read.", 0)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// Longest method and route kept in a key's row, for operators.
const (
	maxMethod = 64
	maxRoute  = 1024
)

// principal returns who sent r. It answers the client itself when
// Principal returns nothing: the authentication in front did not run, and
// the key would fall into the scope shared by all such requests.
func (m *Middleware[TTx]) principal(w http.ResponseWriter, r *http.Request) (string, bool) {
	if m.cfg.Anonymous {
		return "", true
	}
	if p := m.cfg.Principal(r); p != "" {
		return p, true
	}
	m.cfg.Logger.ErrorContext(r.Context(), "idempotency: Principal returned an empty string: is the authentication in front of the middleware?",
		"method", r.Method, "route", m.cfg.Route(r))
	m.problem(w, http.StatusInternalServerError, CodeFailed, "The request failed on the server: send it again with the same Idempotency-Key.", 0)
	return "", false
}

func (m *Middleware[TTx]) claimParams(r *http.Request, principal string, key, body []byte) *store.KeyClaimParams {
	route := m.cfg.Route(r)
	return &store.KeyClaimParams{
		Scope:       scope(principal, r.Method, route),
		Key:         key,
		Method:      clipBytes(r.Method, maxMethod),
		Route:       clipBytes(route, maxRoute),
		Fingerprint: fingerprint(r, m.cfg.FingerprintHeaders, body),
		Wait:        m.cfg.Wait,
		LockTimeout: m.cfg.LockTimeout,
	}
}

func clipBytes(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// failed answers a request that the database failed: 409 when another
// request holds the key, 503 when a retry may succeed, 500 otherwise.
func (m *Middleware[TTx]) failed(w http.ResponseWriter, r *http.Request, doing string, err error) {
	var retryable *store.RetryableError
	switch {
	case errors.Is(err, store.ErrKeyInUse):
		m.problem(w, http.StatusConflict, CodeKeyInUse, "A request with this Idempotency-Key is still being processed: send it again later.", 1)
	case errors.As(err, &retryable):
		m.cfg.Logger.WarnContext(r.Context(), "idempotency: the database failed for now while "+doing, "method", r.Method, "route", m.cfg.Route(r), "error", err)
		m.problem(w, http.StatusServiceUnavailable, CodeUnavailable, "The database failed for now: send the request again with the same Idempotency-Key.", 1)
	default:
		m.cfg.Logger.ErrorContext(r.Context(), "idempotency: the database failed while "+doing, "method", r.Method, "route", m.cfg.Route(r), "error", err)
		m.problem(w, http.StatusInternalServerError, CodeFailed, "The request failed on the server: send it again with the same Idempotency-Key.", 0)
	}
}

// commitTimeout bounds a commit that goes on after the client left.
const commitTimeout = 30 * time.Second

// detached returns the context of a commit or rollback: the request's
// values, but not its cancellation. A handler that finished commits even
// when its client has given up, so that the client's retry finds the
// response.
func detached(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), commitTimeout)
}

func (m *Middleware[TTx]) rollback(r *http.Request, tx TTx) {
	ctx, cancel := detached(r)
	defer cancel()
	_ = m.store.Rollback(ctx, tx)
}
