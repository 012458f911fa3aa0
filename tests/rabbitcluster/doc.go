// Package rabbitcluster tests the inbox and the outbox on a RabbitMQ
// cluster of three nodes with a quorum queue, started on loopback by
// tests/internal/rabbitcluster.
//
// It has tests only. They skip unless INBOX_RABBITCLUSTER=1.
package rabbitcluster
