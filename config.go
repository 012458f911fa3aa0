package inbox

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Defaults of Config and PrunerConfig.
const (
	DefaultLockTimeout    = 5 * time.Second
	DefaultMaxAttempts    = 10
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 5 * time.Minute
	DefaultBackoffJitter  = 0.1
	DefaultRetention      = 7 * 24 * time.Hour
	MinRetention          = time.Hour
	DefaultPruneInterval  = time.Minute
	DefaultPruneBatchSize = 1000
	DefaultPrunePause     = 30 * time.Millisecond
)

// Config configures an Inbox. The zero value of every field but Consumer
// means its default.
type Config struct {
	// Consumer scopes message IDs: the same ID is processed once per
	// consumer. Use one name per logical consumer (a service and the
	// stream it reads), stable across deploys. Required, 1 to
	// MaxConsumerLen bytes.
	Consumer string

	// LockTimeout bounds how long a claim waits for a racing delivery of the
	// same message that holds its row; it then fails with a retryable error.
	// Default 5 s. On SQLite the busy timeout set when opening the database
	// plays this role.
	LockTimeout time.Duration

	// MaxAttempts is the number of failed attempts after which a message is
	// dead-lettered: the MaxAttempts-th failure writes the dead letter.
	// Default 10; 1 dead-letters at the first failure.
	MaxAttempts int

	// Backoff spaces the retries of a failing message. Default: 1 s,
	// doubling to 5 min, ±10 % jitter.
	Backoff Backoff

	// FingerprintConflictError makes a duplicate whose payload differs
	// from the first one's return ErrFingerprintConflict along with its
	// Duplicate outcome. Default false: the conflict is only reported to
	// hooks and logged.
	FingerprintConflictError bool

	// Hooks receive outcomes; each may implement any of ProcessedHook,
	// DuplicateHook, RetryHook, DeadLetteredHook, FingerprintConflictHook.
	// Default none.
	Hooks []any

	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

// Backoff is exponential: the delay after the n-th failed attempt is
// Initial·2^(n-1), at most Max, then moved by a random ±Jitter fraction.
type Backoff struct {
	// Initial is the delay after the first failure. Default 1 s.
	Initial time.Duration
	// Max caps the delay. Default 5 min.
	Max time.Duration
	// Jitter is the random spread as a fraction of the delay, 0 to 1.
	// Default 0.1; negative means none.
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
	switch {
	case b.Jitter == 0:
		b.Jitter = DefaultBackoffJitter
	case b.Jitter < 0:
		b.Jitter = 0
	case b.Jitter > 1:
		b.Jitter = 1
	}
	return b
}

// ErrInvalidConfig is the sentinel of configuration errors.
var ErrInvalidConfig = errors.New("inbox: invalid config")

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
	out.Backoff = out.Backoff.withDefaults()
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}
