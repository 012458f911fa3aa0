package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// RouterConfig configures a [Router]. A nil or zero config means the
// defaults.
type RouterConfig[TTx any] struct {
	// Unmarshal decodes a payload into v, a pointer to a route's type.
	// Its error dead-letters the message as a [*DecodeError]. Defaults to
	// json.Unmarshal.
	Unmarshal func(payload []byte, v any) error

	// Fallback handles a message whose type has no route. Defaults to
	// nil: such a message then fails with a Permanent [*UnknownTypeError],
	// and is dead-lettered with its payload.
	Fallback Handler[TTx]
}

// Router sends each message to the handler of its type, [Message.Type].
//
// Add a route per type with [Route], which decodes the payload into a Go
// type. Then use [Router.Handler] with [Consume], [Inbox.Process] or
// [Inbox.ProcessTx]. Use [Router.BatchHandler] with [ConsumeBatch] or
// [Inbox.ProcessBatchFunc].
//
// Routes are added before use. Route fails once Handler or BatchHandler
// was called. The handlers they return are safe for concurrent use.
type Router[TTx any] struct {
	unmarshal func(payload []byte, v any) error
	fallback  Handler[TTx]

	mu     sync.Mutex
	routes map[string]Handler[TTx]
	sealed *routeTable[TTx] // once Handler or BatchHandler was called: routes are final
}

// NewRouter returns a Router without routes. A nil cfg means the
// defaults.
func NewRouter[TTx any](cfg *RouterConfig[TTx]) *Router[TTx] {
	var c RouterConfig[TTx]
	if cfg != nil {
		c = *cfg
	}
	if c.Unmarshal == nil {
		c.Unmarshal = json.Unmarshal
	}
	return &Router[TTx]{unmarshal: c.Unmarshal, fallback: c.Fallback, routes: map[string]Handler[TTx]{}}
}

// Route sends the messages of type typ to h, with the payload decoded into
// a T.
//
//	err := inbox.Route(r, "order.created",
//		func(ctx context.Context, tx *sql.Tx, msg *inbox.Message, ev *OrderCreated) error {
//			_, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", ev.ID)
//			return err
//		})
//
// A payload that does not decode fails for good. The message is then
// dead-lettered with its payload, and its error is a [*DecodeError].
//
// An error wrapping [ErrInvalidConfig] refuses the route. That happens
// for a nil r or h, and for a type routed already. It happens for an
// empty type, and for one the inbox cannot store unchanged. Such a type
// is longer than [MaxTypeLen], or not valid UTF-8 without NUL bytes. It
// also happens once r's Handler or BatchHandler was called.
func Route[T, TTx any](r *Router[TTx], typ string, h func(ctx context.Context, tx TTx, msg *Message, v *T) error) error {
	if r == nil {
		return fmt.Errorf("%w: route %q: nil *Router", ErrInvalidConfig, typ)
	}
	if h == nil {
		return fmt.Errorf("%w: route %q: nil handler", ErrInvalidConfig, typ)
	}
	if err := checkRouteType(typ); err != nil {
		return err
	}
	into := reflect.TypeFor[T]().String()
	unmarshal := r.unmarshal
	route := func(ctx context.Context, tx TTx, msg *Message) error {
		v := new(T)
		if err := unmarshal(msg.Payload, v); err != nil {
			return Permanent(&DecodeError{Type: msg.Type, Into: into, Err: err})
		}
		return h(ctx, tx, msg, v)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.sealed != nil:
		return fmt.Errorf("%w: route %q added after the router's Handler or BatchHandler was made", ErrInvalidConfig, typ)
	case r.routes[typ] != nil:
		return fmt.Errorf("%w: route %q added twice", ErrInvalidConfig, typ)
	}
	r.routes[typ] = route
	return nil
}

// checkRouteType refuses a type that no message can have, or that the
// inbox stores changed: its dead letter's replay would find no route.
func checkRouteType(typ string) error {
	switch {
	case typ == "":
		return fmt.Errorf("%w: route of an empty type", ErrInvalidConfig)
	case len(typ) > MaxTypeLen:
		return fmt.Errorf("%w: route %.20q...: type of %d bytes, longer than %d", ErrInvalidConfig, typ, len(typ), MaxTypeLen)
	case !utf8.ValidString(typ) || strings.Contains(typ, "\x00"):
		return fmt.Errorf("%w: route %q: type is not valid UTF-8 without NUL bytes", ErrInvalidConfig, typ)
	}
	return nil
}

// routeTable is a router's routes once sealed. Nothing writes to it
// then, so handlers read it without a lock.
type routeTable[TTx any] struct {
	routes   map[string]Handler[TTx]
	known    []string // the routed types, sorted, for UnknownTypeError
	fallback Handler[TTx]
}

// seal makes the routes final and returns them.
func (r *Router[TTx]) seal() *routeTable[TTx] {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sealed == nil {
		known := make([]string, 0, len(r.routes))
		for typ := range r.routes {
			known = append(known, typ)
		}
		slices.Sort(known)
		r.sealed = &routeTable[TTx]{routes: r.routes, known: known, fallback: r.fallback}
	}
	return r.sealed
}

// handle runs msg's route, or the fallback.
func (t *routeTable[TTx]) handle(ctx context.Context, tx TTx, msg *Message) error {
	if h := t.routes[msg.Type]; h != nil {
		return h(ctx, tx, msg)
	}
	if t.fallback != nil {
		return t.fallback(ctx, tx, msg)
	}
	return Permanent(&UnknownTypeError{Type: msg.Type, Known: slices.Clone(t.known)})
}

// Handler returns a [Handler] that runs each message's route.
//
// A message of a type without a route goes to [RouterConfig.Fallback].
// Without a fallback it fails for good, and is dead-lettered. Its error is
// then a [*UnknownTypeError]. A route's own error is returned unchanged.
//
// Routes cannot be added afterwards. A nil r gives a nil Handler, which
// [Consume] and [Inbox.Process] refuse.
func (r *Router[TTx]) Handler() Handler[TTx] {
	if r == nil {
		return nil
	}
	return r.seal().handle
}

// BatchHandler returns a [BatchHandler] that runs each message's route, in
// the batch's order.
//
// It stops at the first message that fails, and returns its error. As for
// any BatchHandler, that fails the whole batch. [Inbox.ProcessBatchFunc]
// then calls it again one message at a time. Only the failing messages
// fail, each by its own error.
//
// Unknown types are handled as by [Router.Handler]. Routes cannot be added
// afterwards. A nil r gives a nil BatchHandler, which [ConsumeBatch]
// refuses.
func (r *Router[TTx]) BatchHandler() BatchHandler[TTx] {
	if r == nil {
		return nil
	}
	t := r.seal()
	return func(ctx context.Context, tx TTx, msgs []*Message) error {
		for _, m := range msgs {
			// The context the start hooks made for m, as ProcessBatch
			// gives each handler.
			if err := t.handle(messageCtx(ctx, m), tx, m); err != nil {
				return err
			}
		}
		return nil
	}
}

// UnknownTypeError is the error of a message whose type has no route, in a
// [Router] without a fallback. [Router.Handler] returns it marked
// [Permanent].
type UnknownTypeError struct {
	// Type is the message's type. It is empty when the message has none.
	Type string
	// Known lists the types the router has routes for, sorted.
	Known []string
}

func (e *UnknownTypeError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("inbox: no route for message type %q; the router has no routes", e.Type)
	}
	known := make([]string, len(e.Known))
	for i, k := range e.Known {
		known[i] = fmt.Sprintf("%q", k)
	}
	return fmt.Sprintf("inbox: no route for message type %q; the router knows %s", e.Type, strings.Join(known, ", "))
}

// DecodeError is the error of a payload that does not decode into its
// route's type. The route's handler returns it marked [Permanent].
type DecodeError struct {
	// Type is the message's type.
	Type string
	// Into is the Go type the payload was decoded into, such as
	// "orders.Created".
	Into string
	// Err is the error of [RouterConfig.Unmarshal].
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("inbox: payload of message type %q does not decode into %s: %v", e.Type, e.Into, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }
