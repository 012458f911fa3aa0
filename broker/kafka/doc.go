// Package kafka connects the inbox's consumer runtime to Kafka, with a
// consumer group on franz-go (github.com/twmb/franz-go/pkg/kgo).
//
//	src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: []string{"localhost:9092"}, Topic: "payments", Group: "billing"})
//	err = inbox.Consume(ctx, ib, src, handler, nil)
//
// Kafka has no per-message acknowledgement: a partition's committed offset
// says that everything before it is done. The Source therefore commits,
// per partition, the offset of the oldest record delivered and not yet
// acked (or one past the last record, when every one is acked): a record
// waiting for a retry holds its partition's offset back, never the
// records after it, which are processed meanwhile. Commits go out in the
// background every CommitInterval, when partitions are revoked, and on
// Close. After a crash or a rebalance the group reads again from the
// committed offset: records processed since are redelivered, and the
// inbox skips them as duplicates.
//
// Kafka does not redeliver by itself: Nack keeps the record in the Source
// and hands it out again after the delay (Message.Deliveries counts these
// hand-outs in this Source only). A rebalance that moves the partition
// drops the waiting retry: the new owner reads the record again from the
// committed offset, at once. A message's ID is its IDHeader header, and its
// Key the record's key, both of which Publisher sets.
//
// In batches (ConsumeBatch, or ConsumerConfig.BatchSize above 1) the
// consumer runtime takes them from NextBatch (broker.BatchSource): a batch
// holds consecutive records of one partition in offset order, and the
// partition is held until each of the batch's records is acked or nacked,
// so that no two workers have records of one partition at once. A nacked
// record goes back in offset order; it is handed out after its delay, not
// before the records that follow it. Next (one record at a time, as
// Consume takes them) takes records of the partitions no batch holds.
// Up to 512 records are fetched ahead of the workers.
//
// A fetch error that franz-go does not retry itself (authorization, an
// unsupported format) is terminal: Next returns it, and so Consume does.
// A lost group session (the member was kicked out: UNKNOWN_MEMBER_ID) is
// not: franz-go revokes the partitions and rejoins, and the Source logs it.
//
// Polled records are registered before the group may rebalance again
// (BlockRebalanceOnPoll), so that no record of an earlier assignment of a
// partition counts in a later one. A commit computed just before a
// partition was revoked may land after the new owner's, moving the offset
// back: that redelivers, never skips.
package kafka
