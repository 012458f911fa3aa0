package broker

// MissingIDer is a Source that can say why one of its deliveries has no
// ID. Package inbox puts it in the error of that message's dead letter.
type MissingIDer interface {
	// MissingID says why m, delivered by the source, has an empty ID. It
	// is a clause naming where the ID should be, such as "it has no AMQP
	// message_id property".
	MissingID(m *Message) string
}
