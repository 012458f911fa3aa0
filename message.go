package inbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/internal/idscope"
	"github.com/inboxkit/inbox/internal/storable"
)

// Limits on what a message and a consumer may be.
const (
	// MaxIDLen is the longest message ID, in bytes.
	MaxIDLen = 1024
	// MaxConsumerLen is the longest consumer name, in bytes.
	MaxConsumerLen = 128
	// MaxTypeLen is the longest message type, in bytes.
	MaxTypeLen = 255
)

// Message is one message as the broker delivered it.
type Message struct {
	// ID is the producer's ID for the message, the same on every
	// redelivery. It is opaque bytes, 1 to MaxIDLen long. It is compared
	// byte by byte. NUL bytes and invalid UTF-8 are allowed, and "a", "A"
	// and "a " are three IDs.
	ID string
	// Type names the kind of message, for a [Router], dead letters and
	// metrics. It is optional. It is stored as valid UTF-8 without NUL
	// bytes, at most MaxTypeLen bytes. Other bytes are replaced, and a
	// longer type is cut.
	Type string
	// Payload is the body. It is stored only in a dead letter. Its SHA-256
	// is stored with the claim, to detect a reused ID.
	Payload []byte
	// Headers are kept with a dead letter.
	Headers map[string]string
	// Subject is where the message was published, such as a NATS subject,
	// an AMQP routing key or a Kafka topic. Consume takes it from
	// broker.Message.Subject. It is not stored, nor part of the key.
	Subject string
	// Deliveries counts the broker's deliveries of the message, this one
	// included. Consume takes it from broker.Message.Deliveries. It is 1
	// for the first, and 0 when the broker does not say, as with a RabbitMQ
	// classic queue. It is not the inbox's count of failed attempts, which
	// is [Outcome.Attempts]. That count survives redelivery by another
	// broker and ignores duplicates.
	Deliveries int
	// Time is when the message was published, for end-to-end latency.
	// Consume takes it from broker.Message.Time. It is zero when unknown.
	// It is not stored.
	Time time.Time
	// System names the broker that delivered the message, as OpenTelemetry's
	// messaging.system does. Examples are "nats", "kafka", "rabbitmq" and
	// "aws_sqs". Consume takes it from broker.Message.System. It is empty
	// when unknown. It is not stored.
	System string
	idHint string // why an empty ID is empty, from Consume
}

// storedID is the key under which msg is claimed: its ID, or with
// scopeByType its type's length as a uvarint, its type and its ID, which
// no other (type, ID) pair shares.
func storedID(msg *Message, scopeByType bool) []byte {
	if !scopeByType {
		return []byte(msg.ID)
	}
	return idscope.Key(msg.Type, msg.ID)
}

// validate checks msg's ID and, with scopeByType, the length of the key
// that storedID makes of it.
func (m *Message) validate(scopeByType bool) error {
	if err := m.validateID(); err != nil {
		return err
	}
	if !scopeByType {
		return nil
	}
	var prefix [binary.MaxVarintLen64]byte
	if n := binary.PutUvarint(prefix[:], uint64(len(m.Type))) + len(m.Type) + len(m.ID); n > MaxIDLen {
		return invalid(fmt.Sprintf("ID scoped by its %d-byte type is %d bytes, more than the limit of %d", len(m.Type), n, MaxIDLen))
	}
	return nil
}

func (m *Message) validateID() error {
	switch {
	case len(m.ID) == 0 && m.idHint != "":
		return invalid("empty ID: " + m.idHint)
	case len(m.ID) == 0:
		return invalid("empty ID")
	case len(m.ID) > MaxIDLen:
		return invalid(fmt.Sprintf("ID is %d bytes, more than the limit of %d", len(m.ID), MaxIDLen))
	}
	return nil
}

// storableType makes a message type valid UTF-8 without NUL bytes and at
// most MaxTypeLen bytes.
func storableType(t string) string {
	return storable.Text(t, MaxTypeLen, `\0`)
}

func validateConsumer(c string) error {
	switch {
	case len(c) == 0:
		return invalid("empty consumer")
	case len(c) > MaxConsumerLen:
		return invalid(fmt.Sprintf("consumer is %d bytes, more than the limit of %d", len(c), MaxConsumerLen))
	}
	return nil
}

// invalidKey is the inbox key of an invalid message: derived from all of
// its content, so that a redelivery of it has the same key, and starting
// with bytes that set it apart from the IDs producers use.
func invalidKey(m *Message) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(m.ID), []byte(m.Type), encodeHeaders(m.Headers), m.Payload} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum([]byte("\x00inbox:invalid:"))
}

func fingerprint(payload []byte) []byte {
	sum := sha256.Sum256(payload)
	return sum[:]
}

// IdempotencyKey returns the key to send with an external call that a
// handler makes for msg.
//
// An HTTP request or a payment is such a call. The external system can
// deduplicate it by the key. Such calls are outside the inbox's transaction
// and may repeat when a handler is retried.
//
// The key is the same for the same message ID and purpose, on every
// delivery and in every process. It differs between purposes. Use one
// purpose per kind of call, such as "charge" or "email". The key is 64
// lowercase hex digits, a SHA-256.
func IdempotencyKey(msg Message, purpose string) string {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte("inbox.IdempotencyKey v1\x00"))
	binary.BigEndian.PutUint64(n[:], uint64(len(msg.ID)))
	h.Write(n[:])
	h.Write([]byte(msg.ID))
	binary.BigEndian.PutUint64(n[:], uint64(len(purpose)))
	h.Write(n[:])
	h.Write([]byte(purpose))
	return hex.EncodeToString(h.Sum(nil))
}

// encodeHeaders stores headers losslessly for a dead letter.
func encodeHeaders(h map[string]string) []byte { return headers.Encode(h) }

func decodeHeaders(b []byte) (map[string]string, error) {
	h, err := headers.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("dead letter: %w", err)
	}
	return h, nil
}
