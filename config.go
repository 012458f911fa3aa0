package inbox

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/inboxkit/inbox/store"
)

// Defaults of [Config] and [PrunerConfig].
const (
	DefaultLockTimeout = store.DefaultLockTimeout
	DefaultMaxAttempts = 10
	// DefaultMaxTransientFailures is about 8 hours of transient failures
	// with the default backoff.
	DefaultMaxTransientFailures = 100
	DefaultBackoffInitial       = time.Second
	DefaultBackoffMax           = 5 * time.Minute
	DefaultBackoffJitter        = 0.1
	DefaultRetention            = 7 * 24 * time.Hour
	MinRetention                = time.Hour
	DefaultPruneInterval        = time.Minute
	DefaultPruneBatchSize       = 1000
	DefaultPrunePause           = 30 * time.Millisecond
)

// Config configures an [Inbox]. The zero value of every field but Consumer
// means its default.
type Config struct {
	// Consumer scopes message IDs. The same ID is processed once per
	// consumer. Use one name per logical consumer, such as a service and
	// the stream it reads. Keep it stable across deploys. Required, 1 to
	// MaxConsumerLen bytes.
	Consumer string

	// LockTimeout bounds how long a claim waits for a racing delivery of the
	// same message that holds its row. The claim then fails with a
	// retryable error. LockTimeout bounds every lock wait of the inbox's
	// transactions, such as batches, ProcessTx's claim and replays. It
	// bounds the handler's statements in them too. MySQL counts whole
	// seconds, so it is rounded up there. On SQLite it bounds the wait for
	// the database's write lock. Default 5 s.
	LockTimeout time.Duration

	// MaxAttempts is the number of failed attempts after which a message is
	// dead-lettered. The MaxAttempts-th failure writes the dead letter. A
	// value of 1 dead-letters at the first failure. Transient failures do
	// not count, as [Config.MaxTransientFailures] tells. Default 10.
	MaxAttempts int

	// MaxTransientFailures is the number of transient failures after which
	// a message is dead-lettered all the same.
	//
	// A handler error is transient when the store recognizes it as such. A
	// deadlock, a serialization failure and a lock timeout in the handler's
	// own queries are. So is an error marked so, as [IsRetryable] tells.
	// Transient failures do not count towards MaxAttempts. Their retries
	// back off on the message's transient failures. A message that keeps
	// failing that way for this long is not failing transiently.
	//
	// Negative means never. Default 100, about 8 hours with the default
	// backoff.
	MaxTransientFailures int

	// Backoff spaces the retries of a failing message. It also spaces the
	// retries of every message while the database keeps failing. Default
	// 1 s, doubling to 5 min, with ±10 % jitter.
	Backoff Backoff

	// ScopeIDByType makes a message's key its type and ID together. It is
	// for producers that number each message type on its own.
	//
	// With it, "order-123" as OrderCreated and as OrderShipped are two
	// messages. Without it, the second is skipped as a duplicate and
	// reported as a fingerprint conflict.
	//
	// The stored message_id is then the type's length as a uvarint, the
	// type's bytes as given, and the ID. The type may hold any bytes. No
	// two pairs of type and ID share a key. Together they must fit in
	// MaxIDLen bytes, or the message is invalid. It works the same with
	// Process, ProcessTx and Consume.
	//
	// Changing it changes every key. A message processed before the change
	// and redelivered after it runs again. So choose it before the
	// consumer's first message, or with a new Consumer name.
	// [IdempotencyKey] sees only the ID, so put the type into its purpose.
	//
	// Default false.
	ScopeIDByType bool
	// NoFingerprint, when true, stores no fingerprint with the inbox row.
	// The fingerprint is the SHA-256 of the payload. No fingerprint is read
	// for a duplicate either. ProcessQueued still reads the row, to tell a
	// duplicate from a claim rolled back.
	//
	// It saves the fingerprint's 33 bytes of WAL per message. It makes a
	// batch with many duplicates faster. But an ID reused for another
	// payload is then a plain duplicate, never a fingerprint conflict.
	//
	// Default false, which stores and compares the fingerprint.
	NoFingerprint bool

	// Hooks receive outcomes. Each implements one or more of the
	// interfaces that [Hook] lists, [PrunedHook] aside. New rejects a value
	// that implements none, such as one whose method has a wrong signature.
	// The check is at run time: a compile-time one would make every hook
	// type embed one of ours, as [Hook] tells. A hook's panic is recovered
	// and logged at ERROR. The outcome and the ack stand. Default none.
	Hooks []Hook

	// Logger receives what a consumer does, at the default level. The
	// package's section "Logging" tells what it logs, at which level and
	// how often. Default slog.Default().
	Logger *slog.Logger
}

// Backoff spaces retries exponentially. The delay after the n-th failed
// attempt is Initial·2^(n-1), at most Max. A random fraction of up to
// ±Jitter then moves it.
type Backoff struct {
	// Initial is the delay after the first failure. Default 1 s.
	Initial time.Duration
	// Max caps the delay. Default 5 min.
	Max time.Duration
	// Jitter is the random spread as a fraction of the delay, 0 to 1.
	// Negative means none. Default 0.1.
	Jitter float64
}

// Delay returns the delay after the attempt-th failed attempt (from 1).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * b.Jitter * float64(d))
	}
	return max(d, 0)
}

// outageSlack is how many steps past the one that covers the outage so
// far a database error's delay may grow: two doublings. After a 0.9 s
// outage that is 4 s at most; after a minute, 256 s.
const outageSlack = 2

// stepFor returns the first attempt whose delay, without jitter, is at
// least d: a delay as long as an outage that has lasted d.
func (b Backoff) stepFor(d time.Duration) int {
	b = b.withDefaults()
	n := 1
	for x := b.Initial; x < d && x < b.Max; x *= 2 {
		n++
	}
	return n
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	switch { // a negative Jitter stays negative, so that defaults apply once
	case b.Jitter == 0:
		b.Jitter = DefaultBackoffJitter
	case b.Jitter > 1:
		b.Jitter = 1
	}
	return b
}

// ErrInvalidConfig is the sentinel of configuration errors.
var ErrInvalidConfig = errors.New("inbox: invalid config")

// isNil reports whether v, an interface argument (a broker.Source, a store
// driver), is nil or holds a nil pointer, map, func or channel: a
// typed nil, the usual result of ignoring a constructor's error, whose
// methods would panic in a worker.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if err := validateConsumer(out.Consumer); err != nil {
		return out, fmt.Errorf("%w: %v", ErrInvalidConfig, err.(*InvalidMessageError).Reason)
	}
	if out.LockTimeout < 0 || out.MaxAttempts < 0 {
		return out, fmt.Errorf("%w: LockTimeout and MaxAttempts must not be negative", ErrInvalidConfig)
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = DefaultLockTimeout
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.MaxTransientFailures == 0 {
		out.MaxTransientFailures = DefaultMaxTransientFailures
	}
	if err := validateHooks("Config.Hooks", out.Hooks, true); err != nil {
		return out, err
	}
	out.Backoff = out.Backoff.withDefaults()
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}
