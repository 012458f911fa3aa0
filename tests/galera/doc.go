// Package galera tests the inbox and the outbox on a MariaDB Galera
// cluster of three nodes, started on loopback by tests/internal/galera.
//
// TestMain starts the cluster once for the package, with a standalone
// MariaDB beside it for the benchmarks. Without mariadbd, galera-4 and
// rsync the tests skip; with INBOX_REQUIRE_SERVICES=1 they fail.
// INBOX_GALERA_MESSAGES sets the number of messages of the larger cases.
//
// # What the inbox meets on Galera
//
// Row locks are local to a node. Certification at COMMIT is what orders
// writes across nodes. The findings below were measured on MariaDB
// 10.11 with Galera 4.
//
// A racing claim is refused at COMMIT. Two nodes that claim one message
// ID at once both insert the inbox row locally, and both run the handler.
// One COMMIT certifies. The other fails with 1213 (40001), "Deadlock
// found when trying to get lock". So does a transaction that a winner's
// write set aborts on its own node (a brute-force abort). The mysql
// dialect treats 1213 as transient: the outcome is Retry, and the
// redelivery is a Duplicate. Handlers run more often than on one server,
// but their effects commit once.
//
// A node outside the primary component refuses statements and COMMITs
// with 1047 (08S01), "WSREP has not yet prepared node for application
// use". The dialect treats it as transient too. A refused COMMIT leaves
// its transaction open on the connection: the next BEGIN there commits
// it implicitly, once the node is back, or certification refuses it.
// Its outcome is thus unknown, as after a lost connection, and the
// redelivery is a Duplicate or processed.
//
// The outbox relay's FOR UPDATE SKIP LOCKED skips only the rows locked
// on its own node. Relays on two nodes may claim the same rows, and
// certification refuses one claim's COMMIT with 1213. The refused relay
// claims again, and publishes only what that claim leased: every row is
// published once. (sqlstore's OutboxClaim once returned the refused
// run's rows when the next run found none, and published them twice. On
// one server a COMMIT rarely fails so; on Galera it does.) A relay killed
// between a publication and its delete still publishes a row again after
// its lease: the consumer's inbox removes that double.
//
// Reads right after a commit elsewhere may be stale. A COMMIT returns
// once its write set is certified, not once the other nodes applied it.
// Read with wsrep_sync_wait=1 (a DSN parameter of go-sql-driver) when a
// read must see a commit made on another node. It also makes each BEGIN
// wait: a redelivery on another node is then a Duplicate at once,
// instead of a handler run refused at certification. DDL is ordered the
// same way: a database that node 1 just created may be unknown (1049) on
// node 2 for a moment.
//
// Migrate's GET_LOCK locks one node. Migrations started on several nodes
// at once conflict on the version rows (1213 or 1062): all but one fail,
// harmlessly. Run Migrate again, or from one node.
//
// A killed node stalls the others' COMMITs for about 6 s, until they
// evict it (evs.suspect_timeout, 5 s). go-sql-driver takes one address
// per DSN: clients keep a pool per node and move on to the next on a
// lost or refused connection, or 1047, as a load balancer would.
package galera
