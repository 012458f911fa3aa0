package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  *Config
		want string
	}{
		{"nil", nil, "Principal is required"},
		{"no principal", &Config{}, "Principal is required"},
		{"short expiry", &Config{Anonymous: true, Expiry: time.Minute}, "shorter than 1h"},
		{"negative wait", &Config{Anonymous: true, Wait: -1}, "negative"},
		{"negative size", &Config{Anonymous: true, MaxResponseBytes: -1}, "negative"},
		{"long keys", &Config{Anonymous: true, MaxKeyLength: 256}, "more than 255"},
		{"both", &Config{Anonymous: true, Principal: func(*http.Request) string { return "a" }}, "exclude each other"},
	} {
		_, err := c.cfg.withDefaults()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig saying %q", c.name, err, c.want)
		}
	}
	if _, err := New[any](context.Background(), nil, &Config{Anonymous: true}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New with a nil store: %v, want ErrInvalidConfig", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := (&Config{Anonymous: true, StoredHeaders: []string{"location", "set-cookie"}}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Expiry != DefaultExpiry || c.LockTimeout != DefaultLockTimeout || c.MaxKeyLength != 255 ||
		c.MaxRequestBytes != DefaultMaxRequestBytes || c.MaxResponseBytes != DefaultMaxResponseBytes || c.Logger == nil {
		t.Fatalf("defaults not filled in: %+v", c)
	}
	if len(c.StoredHeaders) != 1 || c.StoredHeaders[0] != "Location" {
		t.Fatalf("StoredHeaders %q, want [Location]: canonical, and never Set-Cookie", c.StoredHeaders)
	}
	r := httptest.NewRequest(http.MethodPost, "/orders/7", nil)
	if got := c.Route(r); got != "/orders/7" {
		t.Fatalf("route without a pattern %q, want the path", got)
	}
	r.Pattern = "POST /orders/{id}"
	if got := c.Route(r); got != r.Pattern {
		t.Fatalf("route %q, want the pattern", got)
	}
}

func TestPrunerRetention(t *testing.T) {
	t.Parallel()
	m := &Middleware[any]{store: nilKeyStore{}, cfg: Config{Expiry: 48 * time.Hour}}
	if _, err := m.Pruner(&inbox.PrunerConfig{Retention: 24 * time.Hour}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a pruner that deletes keys before they expire: %v, want ErrInvalidConfig", err)
	}
	if _, err := m.Pruner(nil); err != nil {
		t.Fatalf("a pruner at the keys' expiry: %v", err)
	}
}

// nilKeyStore is a store.KeyStore for tests that never reach a database.
type nilKeyStore struct{ store.KeyStore[any] }

// newTestMiddleware is a Middleware whose store is never reached by the
// requests the test sends.
func newTestMiddleware(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	m := &Middleware[any]{store: nilKeyStore{}, cfg: c}
	return m.Handle(func(w http.ResponseWriter, r *http.Request, tx any) error {
		t.Error("the handler ran")
		return nil
	})
}

func TestEmptyPrincipal(t *testing.T) {
	t.Parallel()
	h := newTestMiddleware(t, Config{Principal: func(*http.Request) string { return "" }})
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
	r.Header.Set(HeaderName, `"k"`)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r) // a claim would panic on nilKeyStore
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), CodeFailed) {
		t.Fatalf("a request without a principal: %d %s, want 500 %s", w.Code, w.Body, CodeFailed)
	}
}

func TestProblemType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ set, want string }{{"", "about:blank"}, {"https://api.example/docs/keys", "https://api.example/docs/keys"}} {
		h := newTestMiddleware(t, Config{Anonymous: true, ProblemType: c.set})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/charges", nil)) // no key: 400
		var p Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != c.want || p.Code != CodeKeyMissing || w.Code != 400 {
			t.Fatalf("ProblemType %q: %d %s (%v), want 400 of type %q", c.set, w.Code, w.Body, err, c.want)
		}
	}
}
