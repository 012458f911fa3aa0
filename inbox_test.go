package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/idscope"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: time.Second, Max: 5 * time.Minute, Jitter: -1}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second},
		{10, 5 * time.Minute}, {1000, 5 * time.Minute},
	}
	for _, tc := range tests {
		if got := b.Delay(tc.attempt); got != tc.want {
			t.Errorf("Delay(%d) = %v, want %v", tc.attempt, got, tc.want)
		}
	}
	// The defaults: 1 s, ±10 %.
	for range 1000 {
		if d := (Backoff{}).Delay(1); d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("default Delay(1) = %v, want 1 s ± 10 %%", d)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		msg    Message
		reason string // empty: valid
	}{
		{"empty ID", Message{}, "empty ID"},
		{"1025-byte ID", Message{ID: strings.Repeat("x", 1025)}, "1025 bytes"},
		{"1024-byte ID", Message{ID: strings.Repeat("x", 1024)}, ""},
		{"NUL and invalid UTF-8 in ID", Message{ID: "\x00\xff"}, ""},
		{"odd type", Message{ID: "a", Type: "\xff\x00" + strings.Repeat("t", 300)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.msg.validate(false)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("valid message rejected: %v", err)
				}
				return
			}
			var ime *InvalidMessageError
			if !errors.Is(err, ErrInvalidMessage) || !errors.As(err, &ime) || !strings.Contains(ime.Reason, tc.reason) {
				t.Fatalf("err = %v, want ErrInvalidMessage naming %q", err, tc.reason)
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	m := Message{ID: "payment-42"}
	// A fixed value: the key must never change across versions, or external
	// systems would see retried calls as new.
	const want = "9ce34f1085d9e705e8aa22c879cb115739fcb2b8573092565fa26226c4d2898d"
	got := IdempotencyKey(m, "charge")
	if got != want {
		t.Fatalf("IdempotencyKey changed: %s, want %s", got, want)
	}
	if got != IdempotencyKey(Message{ID: "payment-42", Payload: []byte("other")}, "charge") {
		t.Fatalf("key %q depends on more than ID and purpose", got)
	}
	if got == IdempotencyKey(m, "email") || got == IdempotencyKey(Message{ID: "payment-43"}, "charge") {
		t.Fatal("keys of other purposes or IDs collide")
	}
	// Length prefixes keep ("ab", "c") and ("a", "bc") apart.
	if IdempotencyKey(Message{ID: "ab"}, "c") == IdempotencyKey(Message{ID: "a"}, "bc") {
		t.Fatal("ID and purpose are not separated")
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	h := map[string]string{"trace": "t-1", "bin": "\x00\xff\xfe", "empty": ""}
	got, err := decodeHeaders(encodeHeaders(h))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(h) {
		t.Fatalf("headers %q came back as %q", h, got)
	}
	if encodeHeaders(nil) != nil {
		t.Fatal("no headers should encode to nil")
	}
}

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "pg: " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

type codeErr int

func (e codeErr) Error() string { return fmt.Sprint("sqlite: ", int(e)) }
func (e codeErr) Code() int     { return int(e) }

// IsRetryable asks the error: it knows no database's codes, and a
// deadline is not transient (an HTTP call's may be the handler's own).
func TestIsRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("plain"), false},
		{sqlStateErr("40001"), false},
		{codeErr(5), false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("payment API: %w", context.DeadlineExceeded), false},
		{retryableErr(true), true},
		{fmt.Errorf("wrapped: %w", retryableErr(true)), true},
		{retryableErr(false), false},
		{Permanent(retryableErr(true)), true},
	}
	for _, tc := range tests {
		if got := IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type retryableErr bool

func (e retryableErr) Error() string   { return fmt.Sprint("retryable: ", bool(e)) }
func (e retryableErr) Retryable() bool { return bool(e) }

func TestStorableType(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"payment.received", "payment.received"},
		{"a\xffb", "a\uFFFDb"},
		{"a\x00b", "a\\0b"},
		{strings.Repeat("t", 256), strings.Repeat("t", 255)},
		{strings.Repeat("t", 254) + "é", strings.Repeat("t", 254)}, // not cut inside a rune
	}
	for _, tc := range tests {
		if got := storableType(tc.in); got != tc.want {
			t.Errorf("storableType(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	long := errors.New(strings.Repeat("é", 3000)) // 6000 bytes
	if s := errorText(long); len(s) > maxErrorText || !strings.HasPrefix(s, "é") || strings.ContainsRune(s, '\uFFFD') {
		t.Fatalf("long error stored as %d bytes, or cut inside a rune", len(s))
	}
	if s := errorText(errors.New("a\x00b\xff")); s != "a\\0b\uFFFD" {
		t.Fatalf("errorText = %q, want NUL escaped and invalid UTF-8 replaced", s)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := (&Config{Consumer: "c"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.LockTimeout != 5*time.Second || c.MaxAttempts != 10 || c.Backoff.Initial != time.Second ||
		c.Backoff.Max != 5*time.Minute || c.Backoff.Jitter != 0.1 || c.Logger == nil {
		t.Fatalf("defaults %+v", c)
	}
	for _, bad := range []*Config{nil, {}, {Consumer: strings.Repeat("c", 129)}, {Consumer: "c", MaxAttempts: -1}} {
		if _, err := bad.withDefaults(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("config %+v: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestStoredIDScopedByType(t *testing.T) {
	t.Parallel()
	pairs := []Message{
		{Type: "a", ID: "bc"}, {Type: "ab", ID: "c"}, {Type: "", ID: "abc"}, {Type: "a\x00", ID: "bc"},
		{Type: "a", ID: "\x00bc"}, {Type: strings.Repeat("t", 200), ID: "x"}, {Type: "\xff", ID: "\xff"},
	}
	seen := map[string]Message{}
	for _, m := range pairs {
		key := storedID(&m, true)
		if other, ok := seen[string(key)]; ok {
			t.Fatalf("type %q ID %q and type %q ID %q share the key %q", m.Type, m.ID, other.Type, other.ID, key)
		}
		seen[string(key)] = m
		typ, id, ok := idscope.Split(key)
		if !ok || typ != m.Type || id != m.ID {
			t.Fatalf("key %q split into type %q ID %q (%v), want %q %q", key, typ, id, ok, m.Type, m.ID)
		}
		if string(storedID(&m, false)) != m.ID {
			t.Fatalf("unscoped key of %q is not the ID", m.ID)
		}
	}
	if _, _, ok := idscope.Split([]byte{0x05, 'a'}); ok {
		t.Fatal("a key shorter than its type length was split")
	}
	// The scoped key must fit in MaxIDLen: a 1-byte length prefix here.
	fits := Message{ID: strings.Repeat("i", MaxIDLen-4), Type: "abc"}
	if err := fits.validate(true); err != nil || len(storedID(&fits, true)) != MaxIDLen {
		t.Fatalf("a %d-byte scoped key rejected: %v", len(storedID(&fits, true)), err)
	}
	over := Message{ID: strings.Repeat("i", MaxIDLen-3), Type: "abc"}
	if err := over.validate(true); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a %d-byte scoped key: %v, want ErrInvalidMessage", len(storedID(&over, true)), err)
	}
	if err := over.validate(false); err != nil {
		t.Fatalf("unscoped, the %d-byte ID is valid: %v", len(over.ID), err)
	}
}
