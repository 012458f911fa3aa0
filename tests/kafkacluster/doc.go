// Package kafkacluster runs consumer processes in batch mode on a Kafka
// cluster of three kfake brokers while the cluster and the group change.
// It has tests only: see cluster_test.go.
package kafkacluster
