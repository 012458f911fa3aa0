// Package dbtest holds the outbox's tests and benchmarks that need a
// database and brokers together. They run on PostgreSQL through pgx, NATS
// JetStream, RabbitMQ and Kafka on kfake.
//
// They live in a package of their own. A program that imports package
// outbox then downloads none of their drivers through the outbox's tests.
// It has tests only.
package dbtest
