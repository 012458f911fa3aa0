package inbox_test

// The router without a database: its handlers are called directly, with a
// nil transaction. store/sqlstore/sqlite's router_test.go runs it end to
// end through Consume, ConsumeBatch and ProcessTx.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

type orderCreated struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

type orderShipped struct {
	ID      string `json:"id"`
	Carrier string `json:"carrier"`
}

// seen records what a router's routes were called with.
type seen struct {
	mu    sync.Mutex
	calls []string
}

func (s *seen) add(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf(format, args...))
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// orderRouter routes order.created and order.shipped, recording each call.
func orderRouter(t *testing.T, cfg *inbox.RouterConfig[*sql.Tx]) (*inbox.Router[*sql.Tx], *seen) {
	t.Helper()
	s := &seen{}
	r := inbox.NewRouter(cfg)
	err := errors.Join(
		inbox.Route(r, "order.created", func(_ context.Context, _ *sql.Tx, msg *inbox.Message, ev *orderCreated) error {
			s.add("created %s %s %d", msg.ID, ev.ID, ev.Cents)
			return nil
		}),
		inbox.Route(r, "order.shipped", func(_ context.Context, _ *sql.Tx, msg *inbox.Message, ev *orderShipped) error {
			s.add("shipped %s %s %s", msg.ID, ev.ID, ev.Carrier)
			return nil
		}),
	)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return r, s
}

func TestRouterHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fallback bool
		msg      inbox.Message
		want     []string // the calls
		wantErr  string   // a part of the error; empty for none
		unknown  bool     // the error is an *UnknownTypeError
		decode   string   // the error is a *DecodeError into this type
	}{{
		name: "created",
		msg:  inbox.Message{ID: "m1", Type: "order.created", Payload: []byte(`{"id":"o-1","cents":250}`)},
		want: []string{"created m1 o-1 250"},
	}, {
		name: "shipped",
		msg:  inbox.Message{ID: "m2", Type: "order.shipped", Payload: []byte(`{"id":"o-1","carrier":"DHL"}`)},
		want: []string{"shipped m2 o-1 DHL"},
	}, {
		name:    "unknown type",
		msg:     inbox.Message{ID: "m3", Type: "order.cancelled", Payload: []byte(`{}`)},
		wantErr: `no route for message type "order.cancelled"; the router knows "order.created", "order.shipped"`,
		unknown: true,
	}, {
		name:    "no type",
		msg:     inbox.Message{ID: "m4", Payload: []byte(`{}`)},
		wantErr: `no route for message type ""; the router knows "order.created", "order.shipped"`,
		unknown: true,
	}, {
		name:     "fallback",
		fallback: true,
		msg:      inbox.Message{ID: "m5", Type: "order.cancelled", Payload: []byte(`{}`)},
		want:     []string{"fallback m5 order.cancelled"},
	}, {
		name:     "fallback not for a routed type",
		fallback: true,
		msg:      inbox.Message{ID: "m6", Type: "order.created", Payload: []byte(`{"id":"o-2","cents":1}`)},
		want:     []string{"created m6 o-2 1"},
	}, {
		name:    "undecodable",
		msg:     inbox.Message{ID: "m7", Type: "order.created", Payload: []byte(`{"id":`)},
		wantErr: `payload of message type "order.created" does not decode into inbox_test.orderCreated`,
		decode:  "inbox_test.orderCreated",
	}, {
		name:    "wrong JSON type",
		msg:     inbox.Message{ID: "m8", Type: "order.shipped", Payload: []byte(`{"id":7}`)},
		wantErr: `payload of message type "order.shipped" does not decode into inbox_test.orderShipped`,
		decode:  "inbox_test.orderShipped",
	}, {
		name:    "empty payload",
		msg:     inbox.Message{ID: "m9", Type: "order.shipped"},
		wantErr: "unexpected end of JSON input",
		decode:  "inbox_test.orderShipped",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cfg inbox.RouterConfig[*sql.Tx]
			var s *seen
			if tc.fallback {
				cfg.Fallback = func(_ context.Context, _ *sql.Tx, msg *inbox.Message) error {
					s.add("fallback %s %s", msg.ID, msg.Type)
					return nil
				}
			}
			r, s := orderRouter(t, &cfg)
			err := r.Handler()(t.Context(), nil, &tc.msg)
			if got := s.list(); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("calls %q, want %q", got, tc.want)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if !inbox.IsPermanent(err) {
				t.Errorf("error %v is not Permanent; want it dead-lettered at once", err)
			}
			var ue *inbox.UnknownTypeError
			if errors.As(err, &ue) != tc.unknown {
				t.Errorf("errors.As(%v, *UnknownTypeError) = %v, want %v", err, !tc.unknown, tc.unknown)
			}
			if tc.unknown && (ue.Type != tc.msg.Type || strings.Join(ue.Known, ",") != "order.created,order.shipped") {
				t.Errorf("UnknownTypeError{Type: %q, Known: %q}, want type %q, known sorted", ue.Type, ue.Known, tc.msg.Type)
			}
			var de *inbox.DecodeError
			if errors.As(err, &de) != (tc.decode != "") {
				t.Fatalf("errors.As(%v, *DecodeError) = %v, want %v", err, tc.decode == "", tc.decode != "")
			}
			if tc.decode != "" && (de.Type != tc.msg.Type || de.Into != tc.decode || de.Err == nil) {
				t.Errorf("DecodeError{Type: %q, Into: %q, Err: %v}, want type %q into %q with the codec's error",
					de.Type, de.Into, de.Err, tc.msg.Type, tc.decode)
			}
		})
	}
}

// A route's own error comes back unchanged, so that RetryAfter and
// Permanent keep their meaning.
func TestRouterRouteErrorUnchanged(t *testing.T) {
	t.Parallel()
	boom := inbox.RetryAfter(time.Minute, errors.New("ledger down"))
	r := inbox.NewRouter[*sql.Tx](nil)
	err := inbox.Route(r, "t", func(context.Context, *sql.Tx, *inbox.Message, *struct{}) error { return boom })
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Handler()(t.Context(), nil, &inbox.Message{Type: "t", Payload: []byte(`{}`)}); err != boom {
		t.Fatalf("error %v, want the route's own error unchanged", err)
	}
}

// csv is a codec that is not JSON: "id,cents".
func csv(payload []byte, v any) error {
	o, ok := v.(*orderCreated)
	if !ok {
		return fmt.Errorf("csv decodes only into *orderCreated, not %T", v)
	}
	id, cents, ok := bytes.Cut(payload, []byte(","))
	if !ok {
		return errors.New("no comma")
	}
	o.ID = string(id)
	_, err := fmt.Sscan(string(cents), &o.Cents)
	return err
}

func TestRouterCodec(t *testing.T) {
	t.Parallel()
	r, s := orderRouter(t, &inbox.RouterConfig[*sql.Tx]{Unmarshal: csv})
	h := r.Handler()
	if err := h(t.Context(), nil, &inbox.Message{ID: "m1", Type: "order.created", Payload: []byte("o-1,250")}); err != nil {
		t.Fatalf("csv payload: %v", err)
	}
	if got, want := s.list(), "created m1 o-1 250"; len(got) != 1 || got[0] != want {
		t.Errorf("calls %q, want [%q] decoded by the codec", got, want)
	}
	err := h(t.Context(), nil, &inbox.Message{ID: "m2", Type: "order.created", Payload: []byte(`{"id":"o-2"}`)})
	var de *inbox.DecodeError
	if !errors.As(err, &de) || !inbox.IsPermanent(err) || de.Err.Error() != "no comma" {
		t.Errorf("JSON through the csv codec: error %v, want a Permanent *DecodeError with the codec's error", err)
	}
}

func TestRouteRefused(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *sql.Tx, *inbox.Message, *orderCreated) error { return nil }
	for _, tc := range []struct {
		name  string
		route func(r *inbox.Router[*sql.Tx]) error
		want  string
	}{
		{"twice", func(r *inbox.Router[*sql.Tx]) error { return inbox.Route(r, "order.created", noop) }, `route "order.created" added twice`},
		{"twice with another Go type", func(r *inbox.Router[*sql.Tx]) error {
			return inbox.Route(r, "order.created", func(context.Context, *sql.Tx, *inbox.Message, *orderShipped) error { return nil })
		}, `route "order.created" added twice`},
		{"empty type", func(r *inbox.Router[*sql.Tx]) error { return inbox.Route(r, "", noop) }, "route of an empty type"},
		{"nil handler", func(r *inbox.Router[*sql.Tx]) error {
			return inbox.Route[orderCreated](r, "order.paid", nil)
		}, `route "order.paid": nil handler`},
		{"nil router", func(*inbox.Router[*sql.Tx]) error { return inbox.Route(nil, "order.paid", noop) }, "nil *Router"},
		{"type too long", func(r *inbox.Router[*sql.Tx]) error {
			return inbox.Route(r, strings.Repeat("x", inbox.MaxTypeLen+1), noop)
		}, "type of 256 bytes, longer than 255"},
		{"type not UTF-8", func(r *inbox.Router[*sql.Tx]) error { return inbox.Route(r, "order.\xff", noop) }, "not valid UTF-8"},
		{"type with NUL", func(r *inbox.Router[*sql.Tx]) error { return inbox.Route(r, "order\x00paid", noop) }, "without NUL bytes"},
		{"after Handler", func(r *inbox.Router[*sql.Tx]) error {
			_ = r.Handler()
			return inbox.Route(r, "order.paid", noop)
		}, `route "order.paid" added after`},
		{"after BatchHandler", func(r *inbox.Router[*sql.Tx]) error {
			_ = r.BatchHandler()
			return inbox.Route(r, "order.paid", noop)
		}, `route "order.paid" added after`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, s := orderRouter(t, nil)
			err := tc.route(r)
			if !errors.Is(err, inbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one wrapping ErrInvalidConfig containing %q", err, tc.want)
			}
			// The routes added before stand.
			if err := r.Handler()(t.Context(), nil, &inbox.Message{ID: "m1", Type: "order.created", Payload: []byte(`{"id":"o-1"}`)}); err != nil {
				t.Fatalf("a route added before the refused one: %v", err)
			}
			if got := s.list(); len(got) != 1 {
				t.Errorf("calls %q, want the first route's", got)
			}
		})
	}
}

func TestRouterNil(t *testing.T) {
	t.Parallel()
	var r *inbox.Router[*sql.Tx]
	if r.Handler() != nil || r.BatchHandler() != nil {
		t.Fatal("a nil Router's handlers are not nil; want nil, which Consume refuses with ErrInvalidConfig")
	}
}

func TestRouterBatchHandler(t *testing.T) {
	t.Parallel()
	msg := func(id, typ, payload string) *inbox.Message {
		return &inbox.Message{ID: id, Type: typ, Payload: []byte(payload)}
	}
	for _, tc := range []struct {
		name    string
		msgs    []*inbox.Message
		want    []string
		wantErr string
	}{{
		name: "mixed types in order",
		msgs: []*inbox.Message{
			msg("m1", "order.created", `{"id":"o-1","cents":1}`),
			msg("m2", "order.shipped", `{"id":"o-1","carrier":"DHL"}`),
			msg("m3", "order.created", `{"id":"o-2","cents":2}`),
		},
		want: []string{"created m1 o-1 1", "shipped m2 o-1 DHL", "created m3 o-2 2"},
	}, {
		name: "stops at the first failure",
		msgs: []*inbox.Message{
			msg("m1", "order.created", `{"id":"o-1","cents":1}`),
			msg("m2", "order.cancelled", `{}`),
			msg("m3", "order.created", `{"id":"o-2","cents":2}`),
		},
		want:    []string{"created m1 o-1 1"},
		wantErr: `no route for message type "order.cancelled"`,
	}, {
		name: "undecodable",
		msgs: []*inbox.Message{
			msg("m1", "order.shipped", `not JSON`),
			msg("m2", "order.created", `{"id":"o-2","cents":2}`),
		},
		wantErr: `does not decode into inbox_test.orderShipped`,
	}, {
		name: "empty batch",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, s := orderRouter(t, nil)
			err := r.BatchHandler()(t.Context(), nil, tc.msgs)
			if got := s.list(); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("calls %q, want %q", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !inbox.IsPermanent(err)):
				t.Fatalf("error %v, want a Permanent one containing %q", err, tc.wantErr)
			}
		})
	}
}

// Handlers of one router run on many goroutines at once (go test -race).
func TestRouterConcurrent(t *testing.T) {
	t.Parallel()
	r, s := orderRouter(t, nil)
	h, bh := r.Handler(), r.BatchHandler()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			p, _ := json.Marshal(orderCreated{ID: fmt.Sprint("o-", i), Cents: int64(i)})
			m := &inbox.Message{ID: fmt.Sprint("m", i), Type: "order.created", Payload: p}
			if err := h(context.Background(), nil, m); err != nil {
				t.Error(err)
			}
			if err := bh(context.Background(), nil, []*inbox.Message{m}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(s.list()); n != 16 {
		t.Errorf("%d calls, want 16", n)
	}
}
