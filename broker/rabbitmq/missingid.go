package rabbitmq

import "github.com/inboxkit/inbox/broker"

var _ broker.MissingIDer = (*Source)(nil)

// MissingID names the property that holds a delivery's ID.
func (s *Source) MissingID(*broker.Message) string { return "it has no AMQP message_id property" }
