package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
)

// Limits on a message. The ID's limit is the inbox's, so that the
// consumer's inbox can take every ID the outbox sends.
const (
	// MaxIDLen is the longest message ID, in bytes.
	MaxIDLen = inbox.MaxIDLen
	// MaxDestinationLen is the longest destination, in bytes.
	MaxDestinationLen = 1024
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 1024
	// MaxTypeLen is the longest message type, in bytes.
	MaxTypeLen = inbox.MaxTypeLen
)

// Message is a message to publish.
type Message struct {
	// ID is the message's ID, 1 to MaxIDLen opaque bytes, unique in the outbox
	// table. The relay publishes it with the message, as Nats-Msg-Id in NATS,
	// message_id in AMQP or a Kafka header. The consumer's inbox recognizes a
	// re-publish by it. Inside an inbox handler, derive it with [DerivedID].
	ID string
	// Destination is where to publish, such as a NATS subject, an AMQP routing
	// key or a Kafka topic. A relay to a function gives it its own meaning. It
	// is valid UTF-8 without NUL bytes, 1 to MaxDestinationLen bytes.
	Destination string
	// Key orders and partitions messages, as a Kafka record key does. With
	// [RelayConfig.Ordered], a key's messages are published one after the other
	// in the order written. It is optional and opaque, at most MaxKeyLen bytes.
	Key string
	// Type names the kind of message and is published in the type header. It
	// is optional, valid UTF-8 without NUL bytes, at most MaxTypeLen bytes.
	Type    string
	Headers map[string]string
	Payload []byte
}

// ErrInvalidMessage is the sentinel of *InvalidMessageError.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// InvalidMessageError says why Write refused a message. Nothing was
// written.
type InvalidMessageError struct {
	// Index is the message's position in Write's arguments.
	Index int
	// Reason is a short sentence, such as "empty ID".
	Reason string
}

func (e *InvalidMessageError) Error() string {
	return fmt.Sprintf("outbox: invalid message %d: %s", e.Index, e.Reason)
}
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

// ErrInvalidConfig is wrapped by the errors of New, NewRelay and Write for
// a nil driver or function, or an invalid setting.
var ErrInvalidConfig = errors.New("outbox: invalid config")

// ErrNotMigrated is returned by [New] and [NewRelay] when the tables are
// missing or older than the code. Run [inbox.Migrate] or `inbox migrate`,
// which creates the outbox table with the inbox's.
var ErrNotMigrated = errors.New("outbox: tables not migrated")

// Outbox writes messages to publish in the caller's transactions. It is
// safe for concurrent use.
type Outbox[TTx any] struct {
	driver store.OutboxWriter[TTx]
	hooks  []WriteHook
}

// Config configures an [Outbox]. A nil Config is fine.
type Config struct {
	// Hooks are values that implement [WriteHook]. The OpenTelemetry package's
	// carries the writer's trace to the consumer. New rejects a value that is no
	// WriteHook, at run time for the reason [Hook] gives. Default none.
	Hooks []Hook
}

// Hook is a value given in [Config.Hooks] or [RelayConfig.Hooks]. It
// implements one of these interfaces:
//   - [WriteHook], for each message Write writes, in [Config.Hooks].
//   - [PublishHook], for each publication, in [RelayConfig.Hooks].
//
// The OpenTelemetry package's Hooks implements both.
//
// Hook is any, not an interface with a marker method, as is [inbox.Hook]. A
// marker would catch a wrong value at compile time. But every user's hook
// type would then have to embed a type of ours. So [New] and [NewRelay]
// check at run time instead. They reject a value that implements none of
// their interfaces, with an error wrapping [ErrInvalidConfig].
type Hook any

// WriteHook is told of each message that Write is about to write.
//
// It gets the headers that will be written, a copy of m.Headers that is
// never nil. It may add to them, such as a trace context. It must not change
// m. It runs in Write's goroutine and must be quick. A panic becomes Write's
// error.
type WriteHook interface {
	OnWrite(ctx context.Context, m *Message, headers map[string]string)
}

// PublishHook is told of each publication of the relay, before Publish.
//
// It returns the context Publish gets, and a function called with Publish's
// error once Publish returned. This is pgx's tracer pattern, for a span
// started and ended. m is the relay's own copy. The hook may set headers in
// m.Headers, which is never nil, such as a trace context for the consumer. A
// panic is logged at ERROR, and the publication goes on. The returned
// context should derive from ctx, or it loses ctx's values.
// [RelayConfig.PublishTimeout] applies to it either way.
type PublishHook interface {
	OnPublish(ctx context.Context, m *Message) (context.Context, func(err error))
}

// New returns an Outbox on driver, the Driver of pgxstore or sqlstore with
// the table names it was given. It checks that the tables are migrated.
func New[TTx any](ctx context.Context, driver store.OutboxWriter[TTx], cfg *Config) (*Outbox[TTx], error) {
	if driver == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidConfig)
	}
	o := &Outbox[TTx]{driver: driver}
	if cfg != nil {
		for i, h := range cfg.Hooks {
			wh, ok := h.(WriteHook)
			if !ok {
				return nil, fmt.Errorf("%w: Config.Hooks[%d] (%T) is not an outbox.WriteHook", ErrInvalidConfig, i, h)
			}
			o.hooks = append(o.hooks, wh)
		}
	}
	if err := migrate.Check(ctx, driver, "outbox", ErrNotMigrated); err != nil {
		return nil, err
	}
	return o, nil
}

// Write writes msgs in tx, to be published once tx commits.
//
// A message whose ID is already in the outbox table is skipped. The ID stays
// there until the message is published, and longer with
// [RelayConfig.KeepPublished]. An invalid message fails the whole call with
// an [*InvalidMessageError] before anything is written. A database error
// leaves tx to be rolled back, as any failed statement does.
func (o *Outbox[TTx]) Write(ctx context.Context, tx TTx, msgs ...*Message) error {
	if o == nil {
		return fmt.Errorf("%w: nil *Outbox", ErrInvalidConfig)
	}
	if len(msgs) == 0 {
		return nil
	}
	rows := make([]*store.OutboxRow, len(msgs))
	for i, m := range msgs {
		r, err := row(m)
		if err != nil {
			return &InvalidMessageError{Index: i, Reason: err.Error()}
		}
		if len(o.hooks) > 0 {
			if r.Headers, err = o.hooked(ctx, m); err != nil {
				return err
			}
		}
		rows[i] = r
	}
	if _, err := o.driver.OutboxWrite(ctx, tx, rows); err != nil {
		return fmt.Errorf("outbox: write: %w", err)
	}
	return nil
}

// hooked runs the write hooks on a copy of m's headers and encodes it.
func (o *Outbox[TTx]) hooked(ctx context.Context, m *Message) (_ []byte, err error) {
	h := make(map[string]string, len(m.Headers)+2)
	maps.Copy(h, m.Headers)
	for _, wh := range o.hooks {
		func() {
			defer func() {
				if v := recover(); v != nil {
					err = fmt.Errorf("outbox: write hook %T panicked: %v", wh, v)
				}
			}()
			wh.OnWrite(ctx, m, h)
		}()
		if err != nil {
			return nil, err
		}
	}
	return headers.Encode(h), nil
}

// row checks m and turns it into a row.
func row(m *Message) (*store.OutboxRow, error) {
	switch {
	case m == nil:
		return nil, errors.New("nil message")
	case m.ID == "":
		return nil, errors.New("empty ID")
	case len(m.ID) > MaxIDLen:
		return nil, fmt.Errorf("ID of %d bytes, longer than %d", len(m.ID), MaxIDLen)
	case m.Destination == "":
		return nil, errors.New("empty destination")
	case len(m.Destination) > MaxDestinationLen:
		return nil, fmt.Errorf("destination of %d bytes, longer than %d", len(m.Destination), MaxDestinationLen)
	case !text(m.Destination):
		return nil, fmt.Errorf("destination %q is not valid UTF-8 without NUL bytes", m.Destination)
	case len(m.Key) > MaxKeyLen:
		return nil, fmt.Errorf("key of %d bytes, longer than %d", len(m.Key), MaxKeyLen)
	case len(m.Type) > MaxTypeLen:
		return nil, fmt.Errorf("type of %d bytes, longer than %d", len(m.Type), MaxTypeLen)
	case !text(m.Type):
		return nil, fmt.Errorf("type %q is not valid UTF-8 without NUL bytes", m.Type)
	}
	return &store.OutboxRow{ID: []byte(m.ID), Destination: m.Destination, Key: []byte(m.Key), Type: m.Type,
		Headers: headers.Encode(m.Headers), Payload: m.Payload}, nil
}

func text(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// DerivedID derives a message ID from a consumer's name, the ID of the
// message it handles and a name for the outgoing message. The name may be an
// ordinal. One incoming message thus always yields the same outgoing IDs.
//
//	ob.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("billing", msg.ID, "payment-captured"), ...})
//
// Written in the inbox's transaction, the message commits at most once
// anyway. The derived ID lets the next inbox recognize a second copy when
// this consumer does process a message twice. That happens on a redelivery
// after its inbox row was pruned, on a replayed dead letter, or with a write
// made outside the inbox's transaction. The consumer's name keeps two
// consumers of one message from deriving the same ID. Otherwise the second
// would be skipped as already written. The ID is the hex SHA-256 of the
// three strings, each with its length.
func DerivedID(consumer, incomingID, name string) string {
	h := sha256.New()
	h.Write([]byte("outbox.DerivedID v1\x00"))
	for _, s := range []string{consumer, incomingID, name} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// message turns a stored row back into a Message.
func message(r *store.OutboxRecord) (*Message, error) {
	h, err := headers.Decode(r.Headers)
	if err != nil {
		return nil, err
	}
	return &Message{ID: string(r.ID), Destination: r.Destination, Key: string(r.Key), Type: r.Type,
		Headers: h, Payload: r.Payload}, nil
}
