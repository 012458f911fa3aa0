// Command scaleout measures the scale-out curve: what N consumer
// processes reach on one PostgreSQL, in each inbox mode, against what
// that database commits at all with the same writes and no inbox, in the
// same run on the same number of processes and connections.
//
// The workload is consumebench's (package internal/ledger): each message
// inserts a ledger row (message ID, account, amount) and adds the amount
// to its account (-rows 0: an account row per message; -rows 16: hot
// rows, contended).
//
// For each N of -procs the command re-executes itself N times; each
// process has -workers workers and a pgx pool of its own (-workers + 2
// connections). The modes:
//
//	plaineach   baseline for batch: -batch messages per transaction, each
//	            message's two statements one at a time, as batch's
//	            per-message handler runs them; no inbox, no broker
//	plainbatch  baseline for consumebatch, the multi-row form of the
//	            same: one INSERT for the ledger rows, the accounts'
//	            updates in one round trip
//	plain       baseline for consume and queued: a transaction per
//	            message; no inbox, no broker
//	batch       inbox.Consume with ConsumerConfig.BatchSize -batch
//	consumebatch inbox.ConsumeBatch with BatchSize -batch: the batch's
//	            writes as plainbatch makes them
//	consume     inbox.Consume, a transaction per message
//	queued      inbox.ConsumeQueued: claim, statements and COMMIT in one
//	            round trip
//
// The baselines split the messages among the processes (message i to
// process i % N), start them together and time them to the last commit.
// The inbox modes run on each broker of -brokers: Kafka (kfake in this
// process, a cluster with one topic of -partitions partitions per
// measurement, one consumer group) and NATS JetStream (a file stream per
// measurement, one durable pull consumer that all processes share as
// competing consumers; PullBatch as docs/brokers.md advises: -workers ×
// -batch for batch, 2 × -workers for consume and queued, or -prefetch). They run under rebalances: the processes start
// -stagger apart (each join a group rebalance on Kafka), and when N >= 2
// the first process is SIGKILLed once all have started and 40% of the
// messages committed, and a replacement starts at once. A killed
// process's Kafka partitions move after a session timeout of 1 s; its
// NATS deliveries return after an AckWait of 2 s. The rate is over the
// whole run: from the first process ready to the last message committed.
// The steady rate, printed beside it, is from all N processes ready to
// the kill (to the end at N = 1): what N processes sustain between
// rebalances. The recovery from a kill costs a fixed second or two, so
// the whole run's rate at N >= 2 depends on -messages; the steady one
// does not.
//
// After each measurement every process is stopped with SIGTERM, and the
// checks run: a ledger row per message and no message ID twice (0
// doubles), each balance the sum of its ledger rows, every message's
// amount credited (0 lost), nothing left in the group or durable (Kafka:
// the group's lag; NATS: NumPending + NumAckPending), no dead letter.
// Redeliveries are the inbox's Duplicate outcomes, counted by an
// inbox.Counts hook in each process and reported on its stdout.
//
// Evidence of where the curve bends, sampled during each measurement:
// the CPU time (from /proc) of the consumer processes, of every postgres
// process, of this process (kfake) and of nats-server, as a share of all
// cores, and the machine's busy and iowait shares, also as CPU time per
// message (µs/msg: a mode that costs twice its baseline's cannot pass
// half of it on a machine it fills); the consumer
// processes' backends in pg_stat_activity every 100 ms, by state (on
// CPU, waiting for the client inside a transaction, Lock, LWLock, WAL
// write and fsync, other IO); the run database's commits
// (pg_stat_database) and the cluster's WAL fsyncs and bytes (pg_stat_wal,
// PostgreSQL 15 or later). CPU near 100% busy with little wal means CPU;
// many backends in IO:WALSync or LWLock:WALWrite with idle CPU means
// fsync; Lock:transactionid or Lock:tuple means row locks.
//
// Everything runs on a database created for the run and dropped after
// it (a schema per measurement); the servers' settings are left alone.
// Rounds interleave the N and the modes. A failed check is printed and
// makes the command exit with status 1. -json FILE writes every
// measurement and the table's cells; -child-cpuprofile DIR writes each
// consumer process's CPU profile.
//
// The full run, from the repository's bench folder:
//
//	go run ./cmd/scaleout -json scaleout.json
//
// which is -brokers kafka,nats -procs 1,2,4,8 -workers 4 -batch 50
// -messages 10000 -rounds 2: 88 measurements, 7 minutes on the quiet
// 2-core machine on 2026-12-02. Add -rows 16 for hot rows, where the
// curve bends on row locks, and -child-cpuprofile DIR to profile the
// consumer processes. docs/performance.md gives that run's table and
// what it shows; docs/scaling.md what it means for a user.
//
// At 10,000 messages the fastest modes (consumebatch at N = 8) commit
// everything before their last process starts: raise -messages to see
// every process at work.
//
// The smoke test (main_test.go) runs every mode on both brokers at N = 1
// and 2 with 400 messages, 2 workers, batches of 20 and 8 partitions,
// and requires every check to pass, a kill and a replacement at N = 2
// (the batch modes may finish before it),
// and CPU, wait events and commits sampled: about 35 s alone, 60 to 90 s
// under -race on a loaded machine. INBOX_SCALEOUT_MESSAGES=N sizes it.
package main
