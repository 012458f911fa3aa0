// Package kafka connects the inbox's consumer runtime to Kafka, with a
// consumer group on franz-go.
//
// The client is github.com/twmb/franz-go/pkg/kgo.
//
//	src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: []string{"localhost:9092"}, Topic: "payments", Group: "billing"})
//	err = inbox.Consume(ctx, ib, src, handler, nil)
//
// # Offsets
//
// Kafka has no per-message acknowledgement. A partition's committed offset
// says that everything before it is done. The Source therefore commits,
// per partition, the offset of the oldest record delivered and not yet
// acked. When every record is acked, it commits one past the last. A
// record waiting for a retry holds its partition's offset back. Taken one
// at a time by Next, it does not hold back the records after it, which are
// processed meanwhile. Taken in a batch, it does (see Batches).
//
// Commits go out in the background every [Config.CommitInterval], when
// partitions are revoked, and on Close. After a crash or a rebalance, the
// group reads again from the committed offset. Records processed since are
// redelivered, and the inbox skips them as duplicates.
//
// # Retries and messages
//
// Kafka does not redeliver by itself. Nack keeps the record in the Source
// and hands it out again after the delay. Message.Deliveries counts these
// hand-outs, in this Source only. A rebalance that moves the partition
// drops the waiting retry. The new owner reads the record again from the
// committed offset, at once. A message's ID is its IDHeader header, and its
// Key the record's key. [Publisher] sets both.
//
// # Batches
//
// In batches, the consumer runtime takes records from [Source.NextBatch],
// as a broker.BatchSource. That happens with ConsumeBatch, or with
// ConsumerConfig.BatchSize above 1. A batch holds consecutive records of
// one partition in offset order. The partition is held until each of the
// batch's records is acked or nacked. No two workers thus have records of
// one partition at once. A nacked record goes back in offset order. Its
// partition waits for it: it is handed out after its delay, before the
// records that follow it, which thus never commit before it. A failing
// record therefore stops its partition until it succeeds or is
// dead-lettered, as Kafka consumers that keep order do. Next
// takes one record at a time, as Consume does. It takes records of the
// partitions no batch holds.
//
// The Source fetches ahead of the workers. Whenever fewer than 512
// records wait on partitions that no batch holds, it takes all that
// franz-go has fetched, from every partition at once, so that batches run
// on many partitions side by side. It queues 8,192 records at most, plus
// a fetch. franz-go bounds the bytes, through Config.Options:
// kgo.FetchMaxBytes per fetch (50 MiB by default, compressed; a larger
// record batch still comes whole), kgo.FetchMaxPartitionBytes per
// partition (1 MiB), and kgo.MaxConcurrentFetches, the fetches in flight
// at once (by default one per broker). The Source may hold one fetch
// while franz-go buffers the next.
//
// A fetch waits at most 500 ms for new records (kgo.FetchMaxWait, 5 s in
// franz-go): a partition that a rebalance assigns is not fetched before
// the fetch in flight returns.
//
// # Errors and rebalances
//
// A fetch error that franz-go does not retry itself is terminal. Examples
// are authorization and an unsupported format. Next returns it, and so
// does Consume. A lost group session is not terminal. The member was then
// kicked out, with UNKNOWN_MEMBER_ID. franz-go revokes the partitions and
// rejoins, and the Source logs it.
//
// Polled records are registered before the group may rebalance again,
// with BlockRebalanceOnPoll. No record of an earlier assignment of a
// partition thus counts in a later one. A commit computed just before a
// partition was revoked may land after the new owner's, moving the offset
// back. That redelivers, and never skips.
//
// franz-go may move a partition's fetch back within an assignment. It
// resets to Kafka's oldest record when it takes a broker's answer for
// lost data. The Source then starts the partition afresh from there, as
// if it were assigned again, and logs a warning. The inbox skips what was
// processed before.
package kafka
