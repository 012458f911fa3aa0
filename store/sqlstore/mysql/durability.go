package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/inboxkit/inbox/store"
)

// durability holds the settings and the replication state that decide
// whether a committed claim survives a crash or a failover.
type durability struct {
	flushLog   int64 // innodb_flush_log_at_trx_commit
	logBin     bool  // log_bin
	syncBinlog int64 // sync_binlog
	readOnly   bool  // read_only
	// galera: wsrep_on. ready: wsrep_ready, a node of the primary
	// component that takes queries.
	galera, ready bool
	replicas      int // the replicas reading the binary log now
	// semiSync: rpl_semi_sync_master_enabled (source, on MySQL).
	// semiSyncOn: its status, off once it fell back to asynchronous
	// after a replica did not answer within its timeout.
	semiSync, semiSyncOn bool
}

func (mysqlDialect) DurabilityWarnings(ctx context.Context, conn *sql.Conn) ([]string, error) {
	d, err := readDurability(ctx, conn)
	if err != nil {
		return nil, err
	}
	return d.warnings()
}

// readDurability reads d from conn. The Galera and semi-synchronous
// variables exist only where they apply: a missing one reads as off. On
// a Galera node outside the primary component nothing else matters, and
// nothing else is read.
func readDurability(ctx context.Context, conn *sql.Conn) (durability, error) {
	var d durability
	vars, err := showOn(ctx, conn, `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'rpl_semi_sync_master_enabled', 'rpl_semi_sync_source_enabled')`)
	if err != nil {
		return d, err
	}
	d.galera = vars["wsrep_on"]
	d.semiSync = vars["rpl_semi_sync_master_enabled"] || vars["rpl_semi_sync_source_enabled"]
	status, err := showOn(ctx, conn, `SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'Rpl_semi_sync_master_status', 'Rpl_semi_sync_source_status')`)
	if err != nil {
		return d, err
	}
	d.ready = status["wsrep_ready"]
	d.semiSyncOn = status["rpl_semi_sync_master_status"] || status["rpl_semi_sync_source_status"]
	if d.galera && !d.ready {
		return d, nil
	}
	err = conn.QueryRowContext(ctx, `SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.log_bin, @@GLOBAL.sync_binlog, @@GLOBAL.read_only`).
		Scan(&d.flushLog, &d.logBin, &d.syncBinlog, &d.readOnly)
	if err != nil {
		return d, err
	}
	// Without the PROCESS privilege only the user's own threads show: no
	// replica is seen, and no warning given.
	err = conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'`).Scan(&d.replicas)
	return d, err
}

// showOn runs a SHOW statement of names and values and reports which
// are ON.
func showOn(ctx context.Context, conn *sql.Conn, query string) (map[string]bool, error) {
	rows, err := conn.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	on := map[string]bool{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		on[strings.ToLower(name)] = strings.EqualFold(value, "ON") || value == "1"
	}
	return on, rows.Err()
}

// warnings returns what in d lets a committed claim be lost, one sentence
// each. A server that takes no writes is an error wrapping
// [store.ErrReadOnly] instead.
func (d durability) warnings() ([]string, error) {
	switch {
	case d.galera && !d.ready:
		return nil, fmt.Errorf("%w: this Galera node is outside the primary component (wsrep_ready is OFF)", store.ErrReadOnly)
	case d.readOnly:
		return nil, fmt.Errorf("%w: MySQL has read_only=ON, as a replica has; connect to the source", store.ErrReadOnly)
	}
	var w []string
	if d.flushLog != 1 {
		w = append(w, fmt.Sprintf("MySQL innodb_flush_log_at_trx_commit is %d, not 1: a committed claim can be lost in a crash", d.flushLog))
	}
	if d.logBin && d.syncBinlog != 1 {
		w = append(w, fmt.Sprintf("MySQL sync_binlog is %d, not 1, with the binary log on: a committed claim can be missing from the binary log (and replicas) after a crash", d.syncBinlog))
	}
	const loses = "if a failover promotes one, it loses the last claims and writes after their ack"
	switch {
	case d.replicas > 0 && !d.semiSync:
		w = append(w, fmt.Sprintf("MySQL has %s reading its binary log, and commits wait for none (semi-synchronous replication is off): %s", replicas(d.replicas), loses))
	case d.replicas > 0 && !d.semiSyncOn:
		w = append(w, fmt.Sprintf("MySQL has %s reading its binary log, and semi-synchronous replication fell back to asynchronous: %s", replicas(d.replicas), loses))
	}
	return w, nil
}

func replicas(n int) string {
	if n == 1 {
		return "1 replica or binlog reader"
	}
	return fmt.Sprintf("%d replicas or binlog readers", n)
}
