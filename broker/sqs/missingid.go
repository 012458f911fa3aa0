package sqs

import (
	"fmt"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.MissingIDer = (*Source)(nil)

// MissingID names the message attribute that holds a message's ID, or
// says that its body could not be decoded.
func (s *Source) MissingID(m *broker.Message) string {
	if enc, ok := m.Headers[BodyEncodingAttribute]; ok {
		return fmt.Sprintf("its body does not decode as %s %q, so the sqs source dropped its ID", BodyEncodingAttribute, enc)
	}
	if s.cfg.IDFromMessageID {
		return fmt.Sprintf("it has no %q message attribute (sqs.Config.IDAttribute) and no SQS MessageId", s.cfg.IDAttribute)
	}
	return fmt.Sprintf("it has no %q message attribute (sqs.Config.IDAttribute)", s.cfg.IDAttribute)
}
