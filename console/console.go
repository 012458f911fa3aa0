// Package console is a web console for operators of the inbox and the
// outbox: an [http.Handler] to mount in a program's own server.
//
// It shows, per consumer, the messages processed per minute, those being
// retried and the dead letters by error group. It lists and shows dead
// letters and outbox rows, with filters. It reads through the store seam
// alone: [store.Inspector], [store.OutboxInspector] and
// [store.ActivityInspector]. A page whose interface the driver lacks says
// so.
//
//	c, err := console.New(driver, &console.Config{Auth: console.Auth{Token: token}})
//	mux.Handle("/inbox/", http.StripPrefix("/inbox", c))
//
// Its actions discard dead letters, replay them through their broker,
// and unpark or discard parked outbox rows: one at a time, or every one
// a filter selects, after a page that counts them and asks to confirm. A
// replay needs a [Destination] per consumer in [Config.Replay]. It works
// as the command inbox dead-letters replay does, in one transaction per
// dead letter, so that the effect happens once.
//
// The pages are rendered on the server, with every value escaped. They
// carry a strict Content-Security-Policy and no script. An action is a
// POST that must come from the console's own page: it carries a signed
// token, and [http.CrossOriginProtection] refuses a request of another
// site. [Config.ReadOnly] hides the actions and refuses every POST.
// [Config.Auth] asks for a token or a password; without it, anyone who
// reaches the handler reads the messages.
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
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/replay"
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

	// ReadOnly hides the actions and refuses every POST. Defaults to
	// false.
	ReadOnly bool

	// Replay names, per consumer, where its dead letters are replayed. A
	// consumer without one has no replay. The key is the consumer's name.
	// Defaults to none.
	Replay map[string]*Destination

	// LockTimeout is how long a replay waits for its dead letter's lock.
	// Defaults to inbox.DefaultLockTimeout, 5 s.
	LockTimeout time.Duration

	// FormKey signs the token each form carries, at least 32 bytes.
	// Consoles behind one load balancer share one. Defaults to a random
	// key per [New]: a form from before a restart is refused, and the
	// page asks to be reloaded.
	FormKey []byte

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

// Destination is where a consumer's dead letters are replayed: a
// subject, topic, routing key or queue that reaches this consumer
// alone. Every other consumer of it gets a copy too.
type Destination struct {
	// Publisher publishes the copies, with the message's ID as the
	// broker's deduplication ID. For NATS, set natsjs's RefuseDuplicates,
	// so that a copy JetStream drops is an error and nothing changes.
	// Required.
	Publisher broker.Publisher
	// Subject is the message's subject: the subject, topic, routing key
	// or queue URL. Required.
	Subject string
	// ScopeIDByType is the consumer's inbox.Config.ScopeIDByType: the ID
	// and type that the dead letter's key holds are published. Defaults
	// to false.
	ScopeIDByType bool
	// QuietDedup is how long the broker drops a message whose ID it saw,
	// while it reports it sent. A dead letter that failed within it is
	// not replayed. The sqs Publisher with FreshDeduplication, as a
	// replay to a FIFO queue wants it, needs none; without it, an SQS FIFO
	// queue drops copies for 5 minutes. Defaults to 0, none.
	QuietDedup time.Duration
	// Timeout bounds each publish. The replay's transaction stays open
	// meanwhile, holding the row a consumer of the copy waits for: keep
	// it below the consumers' lock timeout. Defaults to
	// [DefaultPublishTimeout], 4 s.
	Timeout time.Duration
}

// DefaultPublishTimeout is [Destination]'s default Timeout: below
// inbox.DefaultLockTimeout.
const DefaultPublishTimeout = 4 * time.Second

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
	// release is nil without store.Inspector; parked is nil without
	// store.OutboxRelayer.
	release replay.ReleaseFunc
	parked  parkedRows
	cop     *http.CrossOriginProtection
	formKey []byte
	mux     *http.ServeMux
	token   [sha256.Size]byte
	user    [sha256.Size]byte
	pass    [sha256.Size]byte
	now     func() time.Time
}

// The parts of the store seam the console reads. Inspector is generic
// only for its release, which the console does not call.
type (
	deadLetters interface {
		Stats(ctx context.Context, p *store.StatsParams) ([]*store.ConsumerStats, error)
		DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error)
		DeadLetterGroups(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterGroup, error)
		DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error)
		DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error)
	}
	parkedRows interface {
		OutboxUnpark(ctx context.Context, seq int64) error
		OutboxDiscard(ctx context.Context, seq int64) error
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
		c.release = func(ctx context.Context, id int64, lt time.Duration, fn func(*store.DeadLetter, bool) error) error {
			return replay.Release(ctx, d, in, id, lt, fn, nil)
		}
	}
	if p, ok := d.(store.OutboxRelayer); ok {
		c.parked = p
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
	c.formKey = c.cfg.FormKey
	if c.formKey == nil {
		c.formKey = newFormKey()
	}
	c.cop = http.NewCrossOriginProtection()
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
	if cfg.FormKey != nil && len(cfg.FormKey) < formKeyLen {
		return fmt.Errorf("%w: FormKey of %d bytes: want at least %d", ErrInvalidConfig, len(cfg.FormKey), formKeyLen)
	}
	switch {
	case cfg.LockTimeout == 0:
		cfg.LockTimeout = inbox.DefaultLockTimeout
	case cfg.LockTimeout < 0:
		return fmt.Errorf("%w: LockTimeout %v is negative", ErrInvalidConfig, cfg.LockTimeout)
	}
	return cfg.validateReplay()
}

// validateReplay checks cfg.Replay and copies it, with each
// Destination's defaults set.
func (cfg *Config) validateReplay() error {
	dests := make(map[string]*Destination, len(cfg.Replay))
	for consumer, d := range cfg.Replay {
		switch {
		case d == nil || d.Publisher == nil:
			return fmt.Errorf("%w: Replay[%q] has no Publisher", ErrInvalidConfig, consumer)
		case d.Subject == "":
			return fmt.Errorf("%w: Replay[%q] has no Subject", ErrInvalidConfig, consumer)
		case d.Timeout < 0 || d.QuietDedup < 0:
			return fmt.Errorf("%w: Replay[%q] has a negative Timeout or QuietDedup", ErrInvalidConfig, consumer)
		}
		cp := *d
		if cp.Timeout == 0 {
			cp.Timeout = DefaultPublishTimeout
		}
		dests[consumer] = &cp
	}
	cfg.Replay = dests
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

// ServeHTTP serves the console. It sets the security headers and checks
// the credentials. It refuses a POST with 405 when read-only, and with
// 403 when it comes from another site or without a valid form token. It
// refuses other methods with 405.
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
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
	case c.cfg.ReadOnly:
		h.Set("Allow", "GET, HEAD")
		c.fail(w, r, http.StatusMethodNotAllowed, "This console is read-only: it changes nothing.", nil)
		return
	case r.Method != http.MethodPost:
		h.Set("Allow", "GET, HEAD, POST")
		c.fail(w, r, http.StatusMethodNotAllowed, "Method not allowed.", nil)
		return
	case c.cop.Check(r) != nil:
		c.fail(w, r, http.StatusForbidden, "A request from another site: refused. Use the console's own page.", nil)
		return
	case !c.checkForm(w, r):
		c.fail(w, r, http.StatusForbidden, "The form expired, or did not come from this console: reload the page and try again.", nil)
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
