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
	"github.com/inboxkit/inbox/store"
)

// Limits on what a message may be; the ID's is the inbox's, so that the
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
	// ID is the message's ID, which the relay publishes with it (NATS
	// Nats-Msg-Id, AMQP message_id, a Kafka header) so that the consumer's
	// inbox recognizes a re-publish: 1 to MaxIDLen opaque bytes, unique in
	// the outbox table. Inside an inbox handler, derive it with DerivedID,
	// so that the incoming message always yields the same ID.
	ID string
	// Destination is where to publish: a NATS subject, an AMQP routing key
	// (queue), a Kafka topic; for a relay to a function, whatever it
	// understands. Valid UTF-8 without NUL bytes, 1 to
	// MaxDestinationLen bytes.
	Destination string
	// Key orders and partitions: a Kafka record key; with
	// RelayConfig.Ordered, a key's messages are published one after the
	// other in the order written. Optional, opaque, at most MaxKeyLen
	// bytes.
	Key string
	// Type names the kind of message (published in the type header);
	// optional, valid UTF-8 without NUL bytes, at most MaxTypeLen bytes.
	Type    string
	Headers map[string]string
	Payload []byte
}

// ErrInvalidMessage is the sentinel of *InvalidMessageError.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// InvalidMessageError says why Write refused a message: nothing was
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

// ErrNotMigrated is returned by New and NewRelay when the tables are
// missing or older than the code: run inbox.Migrate (or `inbox migrate`),
// which creates the outbox table with the inbox's.
var ErrNotMigrated = errors.New("outbox: tables not migrated")

// Outbox writes messages to publish in the caller's transactions. It is
// safe for concurrent use.
type Outbox[TTx any] struct {
	driver store.OutboxWriter[TTx]
	hooks  []WriteHook
}

// Config configures an Outbox; nil is fine.
type Config struct {
	// Hooks are values that implement WriteHook (the OpenTelemetry
	// package's, to carry the writer's trace to the consumer). New rejects
	// a value that does not. Default none.
	Hooks []any
}

// WriteHook is told of each message that Write is about to write, with
// the headers that will be written: a copy of m.Headers (never nil), to
// which it may add (a trace context). m itself must not change. It runs in
// Write's goroutine and must be quick; a panic is Write's error.
type WriteHook interface {
	OnWrite(ctx context.Context, m *Message, headers map[string]string)
}

// PublishHook is told of each publication of the relay, before Publish,
// and returns the context Publish gets and a function called with
// Publish's error once it returned (a span started and ended, pgx's tracer
// pattern). m is the relay's own copy: the hook may set headers in
// m.Headers, never nil (a trace context for the consumer). A panic is logged at
// ERROR, and the publication goes on. The returned context should derive
// from ctx, whose values it would lose otherwise; RelayConfig.PublishTimeout
// applies to it either way.
type PublishHook interface {
	OnPublish(ctx context.Context, m *Message) (context.Context, func(err error))
}

// New returns an Outbox on driver (pgxstore's or sqlstore's Driver, with
// the table names it was given). It checks that the tables are migrated.
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
	if err := checkSchema(ctx, driver); err != nil {
		return nil, err
	}
	return o, nil
}

func checkSchema(ctx context.Context, s store.Schema) error {
	need := 0
	if ms := s.Migrations(); len(ms) > 0 {
		need = ms[len(ms)-1].Version
	}
	have, err := s.SchemaVersion(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("outbox: checking the tables' schema version: %w", err)
	case have < need:
		return fmt.Errorf("%w: schema version %d, this code needs %d: run inbox.Migrate (or `inbox migrate`)", ErrNotMigrated, have, need)
	}
	return nil
}

// Write writes msgs in tx, to be published once tx commits. A message
// whose ID is already in the outbox table (not yet published, or kept
// published: RelayConfig.KeepPublished) is skipped.
// An invalid message fails the whole call with an *InvalidMessageError
// before anything is written; an error of the database leaves tx to be
// rolled back, as any failed statement does.
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

// DerivedID derives a message ID from the consumer's name, the ID of the
// message it is handling and a name for the outgoing message (or its
// ordinal), so that one incoming message always yields the same outgoing
// IDs:
//
//	ob.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("billing", msg.ID, "payment-captured"), ...})
//
// Written in the inbox's transaction, the message commits at most once
// anyway; the derived ID is what lets the next inbox recognize a second
// copy when this consumer does process a message twice: a redelivery after
// its inbox row was pruned, a replayed dead letter, or a write made outside
// the inbox's transaction. The consumer's name keeps two consumers of one
// message from deriving the same ID (the second would be skipped as
// already written). It is the hex SHA-256 of the three, each with its
// length.
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
