// Package dbtest holds the outbox's tests and benchmarks that need a
// database and brokers together (PostgreSQL on pgx, NATS JetStream,
// RabbitMQ, Kafka on kfake), in a package of its own so that a program
// importing package outbox does not download their drivers through the
// outbox's tests. It has tests only.
package dbtest
