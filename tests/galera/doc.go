// Package galera tests the inbox and the outbox on a MariaDB Galera
// cluster of three nodes. The findings are in this comment once measured.
package galera
