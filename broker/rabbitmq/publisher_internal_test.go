package rabbitmq

import (
	"strings"
	"testing"

	"github.com/inboxkit/inbox/broker"
)

// What amqp091-go cannot encode (a short string over 255 bytes, which
// would close the connection) is refused, naming the part.
func TestPublisherCheck(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	ok := strings.Repeat("x", 255)
	tests := []struct {
		name string
		msg  broker.Message
		want string // in the error; "" for none
	}{
		{"fine", broker.Message{ID: ok, Type: ok, Subject: ok, Headers: map[string]string{ok: long, "": "\x00"}}, ""},
		{"no ID", broker.Message{}, "no ID"},
		{"long ID", broker.Message{ID: long}, "ID of 256 bytes"},
		{"long type", broker.Message{ID: "a", Type: long}, "type of 256 bytes"},
		{"long routing key", broker.Message{ID: "a", Subject: long}, "routing key"},
		{"long header name", broker.Message{ID: "a", Headers: map[string]string{long: "v"}}, "header name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := check(&tc.msg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
