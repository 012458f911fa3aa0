package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/store"
)

// Stores that are never called: New and NewRelay check hooks first.
type (
	unusedWriter  struct{ store.OutboxWriter[struct{}] }
	unusedRelayer struct{ store.OutboxRelayer }
)

// wrongWrite has OnWrite without ctx: it implements no hook.
type wrongWrite struct{}

func (wrongWrite) OnWrite(*Message, map[string]string) {}

// New and NewRelay refuse a value that implements none of their hook
// interfaces. The error names the field, the index and the type.
func TestNewRefusesNonHook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noop := func(context.Context, *Message) error { return nil }
	tests := []struct {
		name string
		new  func() (any, error)
		want string
	}{
		{"New: wrong signature", func() (any, error) {
			return New(ctx, unusedWriter{}, &Config{Hooks: []Hook{wrongWrite{}}})
		}, "Config.Hooks[0] (outbox.wrongWrite)"},
		{"NewRelay: int", func() (any, error) {
			return NewRelay(ctx, unusedRelayer{}, &RelayConfig{Publish: noop, Hooks: []Hook{42}})
		}, "RelayConfig.Hooks[0] (int)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.new()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want it to name %q", err, tc.want)
			}
		})
	}
}
