// Package natscluster runs the inbox and the outbox on a NATS JetStream
// cluster of three nodes while nodes die. It has tests only.
//
// TestLeaderKills starts three nats-server processes (package
// tests/internal/natscluster) and a stream with three replicas on file
// storage. A producer publishes messages directly, retrying each until
// the stream acks it; some IDs go out twice at once (the stream's 1 s
// duplicate window drops the second), some again 1.5 s later (the stream
// keeps both; the inbox must skip one). An outbox writer commits rows to
// PostgreSQL, and two relays publish them to the same stream. Four inbox
// consumers share one durable consumer: two per message, two in batches
// of 16. Each part has its own nats.Conn given all three URLs, as a
// process of its own would, with nats.go's reconnect defaults.
//
// Mid-run, the test SIGKILLs the stream's leader, waits until a message
// stored after the kill has been processed, lets the run go on with two
// nodes for 2 s, and restarts the node. Then it does the same to the new
// leader: a second election, among nodes that include the restarted one.
// Nothing in the test restarts a consumer or a relay. At the end every
// message ID and every outbox row has exactly one row in the ledger, the
// outbox is empty with nothing parked, and no Consume or Run has ended.
// The test logs the kills, how long consumption paused after each, the
// redeliveries, the duplicates the inbox skipped, the relays' republishes,
// and what the adapters logged at WARN or above.
//
// The default run (CI) publishes at least 2,000 messages and writes at
// least 1,000 outbox rows, at up to 160 a second and for as long as the two
// kills take. INBOX_NATSCLUSTER_MESSAGES sets more messages, and
// INBOX_NATSCLUSTER_KILLS more leader kills, spread between a tenth and
// nine tenths of the messages:
//
//	INBOX_REQUIRE_SERVICES=1 INBOX_NATSCLUSTER_MESSAGES=15000 INBOX_NATSCLUSTER_KILLS=6 go test -count=1 -run TestLeaderKills -v -timeout 30m ./tests/natscluster/
//
// Measured on 2026-12-02 on the 2-core CI machine, shared with other
// builds (load 11), nats-server v2.15.2:
//
//	run                      messages  kills  pauses (s)     skipped dups  relay republishes  lost  doubled  time
//	default, -race           4,471     2      6.9, 8.7       190           32                 0     0        52 s
//	default                  4,091     2      4.3, 10.1      159           8                  0     0        51 s
//	15,000 messages          15,003    2      4.2, 7.5       519           108                0     0        131 s
//	15,000 messages, 6 kills 18,047    6      4.4 to 8.0     522           700                0     0        153 s
//
// A pause is the time from the SIGKILL until a message stored after it was
// processed. It is the Raft election: nats-server waits 4 to 9 s without
// a leader's heartbeat before a follower stands.
//
// TestPublishWithoutLeader kills a stream's leader and publishes until a
// publish finds no leader: natsjs.Publisher must say that the stream has
// no leader, not that no stream captures the subject.
package natscluster
