package natsjs

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.MissingIDer = (*Source)(nil)

// MissingID names the header that holds a message's ID.
func (s *Source) MissingID(*broker.Message) string {
	return "it has no " + jetstream.MsgIDHeader + " header"
}
