module github.com/inboxkit/inbox/broker/rabbitmq

go 1.26.8

require (
	github.com/inboxkit/inbox v0.0.0-00010101000000-000000000000
	github.com/rabbitmq/amqp091-go v1.16.0
)

replace github.com/inboxkit/inbox => ../..
