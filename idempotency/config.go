package idempotency

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"time"

	"github.com/inboxkit/inbox/store"
)

// Defaults of [Config].
const (
	// DefaultExpiry is how long a key is kept.
	DefaultExpiry = 24 * time.Hour
	// MinExpiry is the shortest Expiry, the pruner's shortest retention.
	MinExpiry = time.Hour
	// DefaultLockTimeout bounds the lock waits of the handler's statements.
	DefaultLockTimeout = store.DefaultLockTimeout
	// DefaultMaxKeyLength is the longest key taken, in bytes.
	DefaultMaxKeyLength = store.MaxKeyLength
	// DefaultMaxRequestBytes is the largest request body read.
	DefaultMaxRequestBytes = 1 << 20
	// DefaultMaxResponseBytes is the largest response body stored.
	DefaultMaxResponseBytes = 1 << 20
)

// DefaultStoredHeaders are the response header fields stored and replayed
// when Config.StoredHeaders is nil.
var DefaultStoredHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location", "ETag", "Last-Modified"}

// ErrInvalidConfig is wrapped by [New]'s error for a configuration it
// refuses.
var ErrInvalidConfig = errors.New("idempotency: invalid config")

// Config configures a [Middleware]. Principal is required; zero values of
// the other fields mean their defaults.
type Config struct {
	// Principal returns who sent the request: an account or API client ID
	// set by the authentication in front, never a secret. A key is scoped
	// by it, the method and the route, so that one client cannot read
	// another's stored response by guessing its key. Required unless
	// Anonymous is set. A request whose Principal is empty gets 500: the
	// authentication in front did not run.
	Principal func(r *http.Request) string
	// Anonymous is for an API without authentication: all its clients
	// share one scope, and a client that guesses another's key gets that
	// one's response. Principal is then not called. Default false.
	Anonymous bool
	// Route names the operation a request is for. Default: the pattern of
	// the http.ServeMux route that matched (r.Pattern), or the URL's path
	// where it is empty.
	Route func(r *http.Request) string
	// Optional lets a request without an Idempotency-Key through. Its
	// handler runs in a transaction all the same, and nothing is stored.
	// Default false: such a request gets 400.
	Optional bool
	// FingerprintHeaders are request header fields that count in the
	// request's fingerprint, next to its method, path, query and body. A
	// key sent again with another fingerprint gets 422. Default none.
	FingerprintHeaders []string
	// StoredHeaders are the response header fields stored and replayed.
	// Default [DefaultStoredHeaders]. Set-Cookie is never stored.
	StoredHeaders []string
	// Wait is how long a request waits for another one with the same key
	// to finish, before it gets 409. PostgreSQL waits at least 1 ms, MySQL
	// at least 1 s. SQLite has one writer at a time: its requests queue
	// for it, up to LockTimeout. Default 0: as short as the database can.
	Wait time.Duration
	// LockTimeout bounds each lock wait of the handler's statements.
	// Default [DefaultLockTimeout].
	LockTimeout time.Duration
	// Expiry is how long a key is kept after its request, by the
	// database's clock. A request retried within it gets the stored
	// response. The pruner deletes keys once it has passed; until then a
	// key may still answer. At least [MinExpiry]. Default [DefaultExpiry].
	Expiry time.Duration
	// MaxKeyLength is the longest key taken, in bytes; a longer one gets
	// 400. At most, and by default, [DefaultMaxKeyLength].
	MaxKeyLength int
	// MaxRequestBytes is the largest request body read for the
	// fingerprint; a larger one gets 413. Default [DefaultMaxRequestBytes].
	MaxRequestBytes int64
	// MaxResponseBytes is the largest response body stored. A handler
	// that writes more is rolled back, and the client gets 500. Default
	// [DefaultMaxResponseBytes].
	MaxResponseBytes int
	// ProblemType is the type URI of the problem responses, such as the
	// page of the API's documentation on its keys, as the draft asks.
	// Default "about:blank".
	ProblemType string
	// ForgetClientErrors rolls back the writes and the key of a request
	// whose handler answers 4xx, so that its retry runs the handler again.
	// Default false: a 4xx is stored like a success. 408, 425 and 429 are
	// never stored, nor is any 5xx.
	ForgetClientErrors bool
	// Logger receives a line for each request that failed on the server's
	// side. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns cfg with its defaults filled in, or an error
// wrapping ErrInvalidConfig.
func (cfg *Config) withDefaults() (Config, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	switch {
	case c.Principal == nil && !c.Anonymous:
		return c, fmt.Errorf("%w: Principal is required (or Anonymous, for an API without authentication)", ErrInvalidConfig)
	case c.Principal != nil && c.Anonymous:
		return c, fmt.Errorf("%w: Principal and Anonymous exclude each other", ErrInvalidConfig)
	case c.Wait < 0 || c.LockTimeout < 0 || c.MaxKeyLength < 0 || c.MaxRequestBytes < 0 || c.MaxResponseBytes < 0:
		return c, fmt.Errorf("%w: Wait, LockTimeout and the sizes must not be negative", ErrInvalidConfig)
	case c.Expiry != 0 && c.Expiry < MinExpiry:
		return c, fmt.Errorf("%w: Expiry %v is shorter than %v", ErrInvalidConfig, c.Expiry, MinExpiry)
	case c.MaxKeyLength > store.MaxKeyLength:
		return c, fmt.Errorf("%w: MaxKeyLength %d is more than %d", ErrInvalidConfig, c.MaxKeyLength, store.MaxKeyLength)
	}
	c.ProblemType = cmp.Or(c.ProblemType, "about:blank")
	if c.Route == nil {
		c.Route = defaultRoute
	}
	if c.StoredHeaders == nil {
		c.StoredHeaders = DefaultStoredHeaders
	}
	c.StoredHeaders = canonical(c.StoredHeaders, "Set-Cookie")
	c.FingerprintHeaders = canonical(c.FingerprintHeaders, "")
	c.LockTimeout = cmp.Or(c.LockTimeout, DefaultLockTimeout)
	c.Expiry = cmp.Or(c.Expiry, DefaultExpiry)
	c.MaxKeyLength = cmp.Or(c.MaxKeyLength, DefaultMaxKeyLength)
	c.MaxRequestBytes = cmp.Or(c.MaxRequestBytes, DefaultMaxRequestBytes)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// canonical returns names in their canonical form, without except.
func canonical(names []string, except string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = textproto.CanonicalMIMEHeaderKey(n); n != except {
			out = append(out, n)
		}
	}
	return out
}

func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}
