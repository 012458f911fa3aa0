// Package console is a web console for operators of the inbox and the
// outbox: an [http.Handler] to mount in a program's own server.
//
// It shows, per consumer, the messages processed per minute, those being
// retried and the dead letters by error group. It lists and shows dead
// letters and outbox rows, with filters. It reads through the store seam
// alone: [store.Inspector], [store.OutboxInspector] and
// [store.ActivityInspector]. A page whose interface the driver lacks says
// so. This version changes nothing: it has no actions.
//
//	c, err := console.New(driver, &console.Config{Auth: console.Auth{Token: token}})
//	mux.Handle("/inbox/", http.StripPrefix("/inbox", c))
//
// The pages are rendered on the server, with every value escaped. They
// carry a strict Content-Security-Policy and no script. The handler
// serves GET and HEAD only. [Config.Auth] asks for a token or a password;
// without it, anyone who reaches the handler reads the messages.
package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// Defaults of [Config].
const (
	DefaultThroughputWindow = 3 * time.Hour
	DefaultPageSize         = 50
	// MaxPageSize bounds Config.PageSize and the limit a request asks for.
	MaxPageSize = 500
	// DefaultRetention is the inbox's: inbox.DefaultRetention.
	DefaultRetention = inbox.DefaultRetention
)

// Config configures a [Console]. Its zero value is valid: every field's
// zero means its default.
type Config struct {
	// Logger receives the errors of the store, which the pages do not
	// show. Defaults to slog.Default().
	Logger *slog.Logger

	// ReadOnly forbids changes. This version has no actions; the pages
	// say "read-only" when it is set. Defaults to false.
	ReadOnly bool

	// Retention is the inbox's: how long its rows are kept. A dead letter
	// older than it is one the inbox no longer remembers. Defaults to
	// [DefaultRetention], 7 days.
	Retention time.Duration

	// ThroughputWindow is how far back the overview's charts go, whole
	// minutes, at most 24 h. Defaults to [DefaultThroughputWindow], 3 h.
	ThroughputWindow time.Duration

	// PageSize is how many rows a list shows, at most [MaxPageSize].
	// Defaults to [DefaultPageSize], 50.
	PageSize int

	// Auth is what a request must carry. The zero value asks for
	// nothing.
	Auth Auth
}

// Auth is the credentials a request must carry. A request is let in when
// it carries any one that is set. They are compared in constant time.
type Auth struct {
	// Token is accepted as "Authorization: Bearer <Token>", and as the
	// password of HTTP basic auth with any user, for a browser's prompt.
	// Empty means no token.
	Token string
	// User and Password are accepted as HTTP basic auth. An empty
	// Password means none.
	User, Password string
}

func (a Auth) set() bool { return a.Token != "" || a.Password != "" }

// Console is the web console, an [http.Handler]. Make one with [New].
type Console struct {
	cfg    Config
	log    *slog.Logger
	dl     deadLetters     // nil without store.Inspector
	outbox outboxInspector // nil without store.OutboxInspector
	act    activity        // nil without store.ActivityInspector
	mux    *http.ServeMux
	token  [sha256.Size]byte
	user   [sha256.Size]byte
	pass   [sha256.Size]byte
	now    func() time.Time
}

// The parts of the store seam the console reads. Inspector is generic
// only for its release, which the console does not call.
type (
	deadLetters interface {
		Stats(ctx context.Context, p *store.StatsParams) ([]*store.ConsumerStats, error)
		DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error)
		DeadLetterGroups(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterGroup, error)
		DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error)
	}
	outboxInspector = store.OutboxInspector
	activity        = store.ActivityInspector
)

// ErrInvalidConfig is wrapped by the error of [New] for a Config it
// refuses.
var ErrInvalidConfig = errors.New("console: invalid config")

// New returns a console on driver d. It reads what d implements of
// [store.Inspector], [store.OutboxInspector] and
// [store.ActivityInspector]; a page that needs what d lacks says so. A
// nil cfg means the defaults.
func New[TTx any](d store.Driver[TTx], cfg *Config) (*Console, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidConfig)
	}
	c := &Console{now: time.Now}
	if cfg != nil {
		c.cfg = *cfg
	}
	if err := c.cfg.validate(); err != nil {
		return nil, err
	}
	if in, ok := d.(store.Inspector[TTx]); ok {
		c.dl = in
	}
	if in, ok := d.(store.OutboxInspector); ok {
		c.outbox = in
	}
	if in, ok := d.(store.ActivityInspector); ok {
		c.act = in
	}
	c.log = c.cfg.Logger
	if c.log == nil {
		c.log = slog.Default()
	}
	a := c.cfg.Auth
	c.token, c.user, c.pass = sha256.Sum256([]byte(a.Token)), sha256.Sum256([]byte(a.User)), sha256.Sum256([]byte(a.Password))
	c.routes()
	return c, nil
}

func (cfg *Config) validate() error {
	switch {
	case cfg.Retention == 0:
		cfg.Retention = DefaultRetention
	case cfg.Retention < inbox.MinRetention:
		return fmt.Errorf("%w: Retention %v is shorter than the inbox's minimum %v", ErrInvalidConfig, cfg.Retention, inbox.MinRetention)
	}
	switch {
	case cfg.ThroughputWindow == 0:
		cfg.ThroughputWindow = DefaultThroughputWindow
	case cfg.ThroughputWindow < time.Minute || cfg.ThroughputWindow > 24*time.Hour:
		return fmt.Errorf("%w: ThroughputWindow %v: want 1m to 24h", ErrInvalidConfig, cfg.ThroughputWindow)
	}
	cfg.ThroughputWindow = cfg.ThroughputWindow.Truncate(time.Minute)
	switch {
	case cfg.PageSize == 0:
		cfg.PageSize = DefaultPageSize
	case cfg.PageSize < 0 || cfg.PageSize > MaxPageSize:
		return fmt.Errorf("%w: PageSize %d: want 1 to %d", ErrInvalidConfig, cfg.PageSize, MaxPageSize)
	}
	if cfg.Auth.Password != "" && strings.Contains(cfg.Auth.User, ":") {
		return fmt.Errorf("%w: Auth.User holds a colon, which basic auth cannot carry", ErrInvalidConfig)
	}
	return nil
}

// securityHeaders go on every response. The pages have no script and no
// inline style; forms submit to the console alone.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
	"Cache-Control":          "no-store",
}

// ServeHTTP serves the console. It sets the security headers, checks the
// credentials, and refuses any method but GET and HEAD with 405.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, v := range securityHeaders {
		h.Set(k, v)
	}
	if !c.authorized(r) {
		h.Set("WWW-Authenticate", `Basic realm="inbox console", charset="UTF-8"`)
		http.Error(w, "401 unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed: this console is read-only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "" {
		// Mounted with http.StripPrefix("/inbox", c) and asked for
		// "/inbox": the relative links need the slash.
		p, _, _ := strings.Cut(r.RequestURI, "?")
		h.Set("Location", path.Base(p)+"/")
		w.WriteHeader(http.StatusFound)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// authorized reports whether r carries credentials that c.cfg.Auth sets,
// or whether it sets none.
func (c *Console) authorized(r *http.Request) bool {
	a := c.cfg.Auth
	if !a.set() {
		return true
	}
	eq := func(s string, want *[sha256.Size]byte) bool {
		got := sha256.Sum256([]byte(s))
		return subtle.ConstantTimeCompare(got[:], want[:]) == 1
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && a.Token != "" {
		return eq(strings.TrimSpace(tok), &c.token)
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	okToken := a.Token != "" && eq(pass, &c.token)
	okUser := a.Password != "" && eq(user, &c.user) && eq(pass, &c.pass)
	return okToken || okUser
}
