package natsjs

import (
	"strings"
	"testing"

	"github.com/inboxkit/inbox/broker"
)

// What NATS would refuse or alter in silence is refused, naming the part;
// what it carries as it is passes.
func TestPublisherCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msg  broker.Message
		want string // in the error; "" for none
	}{
		{"fine", broker.Message{ID: "id-1", Type: "t.x", Headers: map[string]string{"A-b_c.d": "a\tb é \x00\xff", "Empty": ""}}, ""},
		{"no ID", broker.Message{}, "no ID"},
		{"ID with LF", broker.Message{ID: "a\nb"}, "ID"},
		{"ID padded", broker.Message{ID: " a"}, "ID"},
		{"type with CR", broker.Message{ID: "a", Type: "t\r"}, "type"},
		{"name with colon", broker.Message{ID: "a", Headers: map[string]string{"a:b": "v"}}, `"a:b"`},
		{"name with non-ASCII", broker.Message{ID: "a", Headers: map[string]string{"é": "v"}}, `"é"`},
		{"empty name", broker.Message{ID: "a", Headers: map[string]string{"": "v"}}, `""`},
		{"value with CR LF", broker.Message{ID: "a", Headers: map[string]string{"H": "x\r\nNats-Msg-Id: y"}}, `"H"`},
		{"value with a trailing tab", broker.Message{ID: "a", Headers: map[string]string{"H": "x\t"}}, `"H"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := (&Publisher{}).check(&tc.msg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// NATS's own headers are those of its "Nats-" prefix, in that case: NATS
// matches header names case-sensitively.
func TestOwnHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Nats-Rollup": true, "Nats-Expected-Last-Sequence": true, "Nats-Msg-Id": true, "Nats-": true,
		"nats-rollup": false, "NATS-EXPECTED-LAST-SEQUENCE": false, "nats-trace": false,
		"Nats": false, "NatsRollup": false, "X-Nats-Rollup": false, "Inbox-Type": false, "": false,
	} {
		if got := OwnHeader(name); got != want {
			t.Errorf("OwnHeader(%q) = %v, want %v", name, got, want)
		}
	}
}
