package inbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
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
		hooks  []Hook
		pruner bool
		ok     bool
	}{
		{"int", []Hook{42}, false, false},
		{"nil", []Hook{nil}, false, false},
		{"wrong signature", []Hook{wrongSignature{}}, false, false},
		{"pruned hook in Config.Hooks", []Hook{onlyPruned{}}, false, false},
		{"conflict hook", []Hook{onlyConflict{}}, false, true},
		{"start hook", []Hook{onlyStart{}}, false, true},
		{"pruner: start hook only", []Hook{onlyStart{}}, true, false},
		{"outcome hook", []Hook{&outcomeCounter{}}, false, true},
		{"pruner: int", []Hook{42}, true, false},
		{"pruner: outcome hook only", []Hook{&outcomeCounter{}}, true, false},
		{"pruner: pruned hook", []Hook{onlyPruned{}}, true, true},
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

// New and NewPruner themselves refuse a value that implements no hook
// interface, before they touch the store. The error names the field, the
// index and the type.
func TestNewRefusesNonHook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, err := New(ctx, plainStore{}, &Config{Consumer: "c", Hooks: []Hook{&Counts{}, wrongSignature{}}})
	if ib != nil || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with a non-hook: %v, %v, want nil and ErrInvalidConfig", ib, err)
	}
	if want := "Config.Hooks[1] (inbox.wrongSignature)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("New with a non-hook: %q, want it to name %q", err, want)
	}
	p, err := NewPruner(unusedStore{}, &PrunerConfig{Hooks: []Hook{"x"}})
	if p != nil || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewPruner with a non-hook: %v, %v, want nil and ErrInvalidConfig", p, err)
	}
	if want := "PrunerConfig.Hooks[0] (string)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("NewPruner with a non-hook: %q, want it to name %q", err, want)
	}
}

type onlyStart struct{}

func (onlyStart) OnStart(ctx context.Context, _ *Event) context.Context { return ctx }

type outcomeCounter struct{ n int }

func (o *outcomeCounter) OnProcessed(context.Context, *Event) { o.n++ }

// nilSource is a Source that is nil: Consume must refuse it.
var nilSource broker.Source

// ptrSource is a Source whose methods read their receiver, as
// *natsjs.Source's do: a nil *ptrSource in a broker.Source (a typed nil,
// what ignoring a constructor's error gives) panics when used.
type ptrSource struct {
	lease, window time.Duration
}

func (s *ptrSource) Next(context.Context) (broker.Delivery, error) {
	return nil, errors.New("not used")
}
func (s *ptrSource) Close() error                 { return nil }
func (s *ptrSource) LeaseInterval() time.Duration { return s.lease }
func (s *ptrSource) RedeliveryWindow(context.Context) (time.Duration, error) {
	return s.window, nil
}

// ptrDriver and ptrPruneStore: a nil pointer to either panics on every
// method, which reads the embedded field through it.
type ptrDriver struct{ store.Driver[struct{}] }
type ptrPruneStore struct{ PruneStore }

// Nil arguments are refused before anything runs: a nil source used to
// panic in a worker goroutine, which kills the process.
func TestNilArguments(t *testing.T) {
	t.Parallel()
	ib := &Inbox[struct{}]{} // never used: the arguments are checked first
	h := func(context.Context, struct{}, *Message) error { return nil }
	bh := func(context.Context, struct{}, []*Message) error { return nil }
	var typedNil broker.Source = (*ptrSource)(nil)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"Consume nil inbox", func() error { return Consume(ctx, nil, nilSource, h, nil) }},
		{"Consume nil source", func() error { return Consume(ctx, ib, nilSource, h, nil) }},
		{"Consume nil handler", func() error { return Consume[struct{}](ctx, ib, nilSource, nil, nil) }},
		{"Consume typed nil source", func() error { return Consume(ctx, ib, typedNil, h, nil) }},
		{"ConsumeBatch nil source", func() error { return ConsumeBatch(ctx, ib, nilSource, bh, nil) }},
		{"ConsumeBatch typed nil source", func() error { return ConsumeBatch(ctx, ib, typedNil, bh, nil) }},
		{"CheckRetention nil source", func() error { _, _, err := CheckRetention(ctx, nilSource, 0); return err }},
		{"CheckRetention typed nil source", func() error { _, _, err := CheckRetention(ctx, typedNil, 0); return err }},
		{"Process nil inbox", func() error { _, err := (*Inbox[struct{}])(nil).Process(ctx, Message{ID: "a"}, h); return err }},
		{"Process nil handler", func() error { _, err := ib.Process(ctx, Message{ID: "a"}, nil); return err }},
		{"ProcessTx nil inbox", func() error {
			_, err := (*Inbox[struct{}])(nil).ProcessTx(ctx, struct{}{}, Message{ID: "a"}, h)
			return err
		}},
		{"ProcessTx nil handler", func() error { _, err := ib.ProcessTx(ctx, struct{}{}, Message{ID: "a"}, nil); return err }},
		{"Replay nil inbox", func() error { _, err := (*Inbox[struct{}])(nil).Replay(ctx, 1, h); return err }},
		{"Replay nil handler", func() error { _, err := ib.Replay(ctx, 1, nil); return err }},
		{"New nil driver", func() error { _, err := New[struct{}](ctx, nil, &Config{Consumer: "c"}); return err }},
		{"New typed nil driver", func() error { _, err := New[struct{}](ctx, (*ptrDriver)(nil), &Config{Consumer: "c"}); return err }},
		{"Migrate nil driver", func() error { return Migrate[struct{}](ctx, nil) }},
		{"Migrate typed nil driver", func() error { return Migrate[struct{}](ctx, (*ptrDriver)(nil)) }},
		{"NewPruner nil store", func() error { _, err := NewPruner(nil, nil); return err }},
		{"NewPruner typed nil store", func() error { _, err := NewPruner((*ptrPruneStore)(nil), nil); return err }},
		{"NewPruner short retention", func() error { _, err := NewPruner(unusedStore{}, &PrunerConfig{Retention: time.Minute}); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.call(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// CheckRetention's 0 is DefaultRetention, as ConsumerConfig.Retention's:
// a 3-day window fits in it; a negative retention is compared as it is.
func TestCheckRetention(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		name              string
		window, retention time.Duration
		warning, note     string // substrings; "" means empty
	}{
		{"zero means the default: within", 3 * day, 0, "", ""},
		{"zero means the default: longer", 14 * day, 0, "longer than the inbox's retention of 168h0m0s", ""},
		{"zero means the default: no limit", 0, 0, "", "retention (168h0m0s)"},
		{"shorter retention", 3 * day, 2 * day, "at least 72h0m0s", ""},
		{"negative: any window is longer", time.Hour, -1, "longer than the inbox's retention of -1ns", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			warning, note, err := CheckRetention(context.Background(), &ptrSource{window: tc.window}, tc.retention)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ got, want string }{{warning, tc.warning}, {note, tc.note}} {
				if (c.want == "") != (c.got == "") || !strings.Contains(c.got, c.want) {
					t.Fatalf("window %v, retention %v: warning %q, note %q; want them to contain %q and %q",
						tc.window, tc.retention, warning, note, tc.warning, tc.note)
				}
			}
		})
	}
}
