package inbox

import (
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/inboxkit/inbox/broker"
)

// hintSource is a source that says why its messages lack an ID.
type hintSource struct{ broker.Source }

func (hintSource) MissingID(*broker.Message) string { return "it has no Test-Id header" }

// plainSource is a source that says nothing of its IDs.
type plainSource struct{ broker.Source }

// An empty ID's error says where the ID comes from and names
// ConsumerConfig.ID; it reaches the dead letter and the log line as
// Outcome.Err.
func TestMissingIDError(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name string
		src  broker.Source
		id   func(*broker.Message) string
		want string
	}{
		{"the source says where", hintSource{}, nil,
			"inbox: invalid message: empty ID: it has no Test-Id header; set it when publishing, or derive an ID with ConsumerConfig.ID"},
		{"a source that does not say", plainSource{}, nil,
			"inbox: invalid message: empty ID: the source gave it no broker.Message.ID; set it when publishing, or derive an ID with ConsumerConfig.ID"},
		{"ConsumerConfig.ID returned nothing", hintSource{}, func(*broker.Message) string { return "" },
			"inbox: invalid message: empty ID: ConsumerConfig.ID returned an empty string"},
		{"ConsumerConfig.ID panicked", hintSource{}, func(*broker.Message) string { panic("no key") },
			"inbox: invalid message: empty ID: ConsumerConfig.ID panicked: no key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := (&ConsumerConfig{ID: tc.id, Logger: quiet}).withDefaults(tc.src)
			msg := message(&c, &broker.Message{Payload: []byte("p")})
			err := msg.validate(false)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v\nwant  %s", err, tc.want)
			}
			// A message that has an ID carries no hint: it compares equal
			// to one built by hand.
			got := message(&c, &broker.Message{ID: "m-1"})
			if tc.id == nil && !reflect.DeepEqual(got, Message{ID: "m-1"}) {
				t.Fatalf("message with an ID = %+v, want Message{ID: \"m-1\"}", got)
			}
		})
	}
}

// Process of a Message built by hand with no ID keeps the short reason.
func TestMissingIDByHand(t *testing.T) {
	t.Parallel()
	m := Message{}
	if err := m.validate(false); err == nil || err.Error() != "inbox: invalid message: empty ID" {
		t.Fatalf("error %v, want inbox: invalid message: empty ID", err)
	}
}
