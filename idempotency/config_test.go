package idempotency

import (
	"context"
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
		{"short expiry", &Config{Principal: Anonymous, Expiry: time.Minute}, "shorter than 1h"},
		{"negative wait", &Config{Principal: Anonymous, Wait: -1}, "negative"},
		{"negative size", &Config{Principal: Anonymous, MaxResponseBytes: -1}, "negative"},
		{"long keys", &Config{Principal: Anonymous, MaxKeyLength: 256}, "more than 255"},
	} {
		_, err := c.cfg.withDefaults()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig saying %q", c.name, err, c.want)
		}
	}
	if _, err := New[any](context.Background(), nil, &Config{Principal: Anonymous}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New with a nil store: %v, want ErrInvalidConfig", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := (&Config{Principal: Anonymous, StoredHeaders: []string{"location", "set-cookie"}}).withDefaults()
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
