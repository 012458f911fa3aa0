// Package pgfailover fails over a PostgreSQL primary to its streaming
// standby under load, and checks what the inbox, the outbox relay and the
// pruner make of it. Each test starts its own pair with package pgcluster,
// connects through the multi-host DSN (target_session_attrs=read-write),
// stops the primary as a crash does (pg_ctl stop -m immediate) and
// promotes the standby, while consumers keep running without a restart.
//
// With synchronous replication nothing acked is lost and nothing is done
// twice. With asynchronous replication a failover loses the messages acked
// after a COMMIT that the standby never received: their claim and their
// effect are gone together, and the broker does not redeliver them. The
// tests count them and check that each loss is of that kind. On loopback
// there are few or none; with a replication link that holds the WAL for
// 20 ms (pgcluster's LinkDelay) there must be some, or the test fails.
//
// It has tests only. The default run (CI) sends 1,500 messages per
// consumer test and fails over once per test; INBOX_PGFAILOVER_MESSAGES
// sets more, and INBOX_PGFAILOVER_RUNS repeats the asynchronous test:
//
//	INBOX_REQUIRE_SERVICES=1 INBOX_PGFAILOVER_MESSAGES=20000 INBOX_PGFAILOVER_RUNS=10 \
//		go test -count=1 -p 1 -run 'TestConsume' -v -timeout 30m ./tests/pgfailover/
package pgfailover
