package inbox

import (
	"context"
	"errors"
	"testing"

	"github.com/inboxkit/inbox/store"
)

type wrongSignature struct{}

func (wrongSignature) OnProcessed(e *Event) {} // no ctx: implements no hook

type onlyPruned struct{}

func (onlyPruned) OnPruned(context.Context, *PruneEvent) {}

type onlyConflict struct{}

func (onlyConflict) OnFingerprintConflict(context.Context, *Event) {}

// unusedStore is never called: NewPruner only checks that it is not nil.
type unusedStore struct{}

func (unusedStore) Prune(context.Context, *store.PruneParams) (*store.PruneResult, error) {
	return nil, errors.New("not used")
}

func TestHooksValidated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		hooks  []any
		pruner bool
		ok     bool
	}{
		{"int", []any{42}, false, false},
		{"nil", []any{nil}, false, false},
		{"wrong signature", []any{wrongSignature{}}, false, false},
		{"pruned hook in Config.Hooks", []any{onlyPruned{}}, false, false},
		{"conflict hook", []any{onlyConflict{}}, false, true},
		{"outcome hook", []any{&outcomeCounter{}}, false, true},
		{"pruner: int", []any{42}, true, false},
		{"pruner: outcome hook only", []any{&outcomeCounter{}}, true, false},
		{"pruner: pruned hook", []any{onlyPruned{}}, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.pruner {
				_, err = NewPruner(unusedStore{}, &PrunerConfig{Hooks: tc.hooks})
			} else {
				_, err = (&Config{Consumer: "c", Hooks: tc.hooks}).withDefaults()
			}
			if tc.ok && err != nil {
				t.Fatalf("hooks %#v rejected: %v", tc.hooks, err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("hooks %#v: err = %v, want ErrInvalidConfig", tc.hooks, err)
			}
		})
	}
}

type outcomeCounter struct{ n int }

func (o *outcomeCounter) OnProcessed(context.Context, *Event) { o.n++ }
