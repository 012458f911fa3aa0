package kafka

import (
	"fmt"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.MissingIDer = (*Source)(nil)

// MissingID names the record header that holds a record's ID.
func (s *Source) MissingID(*broker.Message) string {
	return fmt.Sprintf("it has no %q record header (kafka.Config.IDHeader)", s.cfg.IDHeader)
}
