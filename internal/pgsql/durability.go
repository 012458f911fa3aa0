package pgsql

import (
	"fmt"

	"github.com/inboxkit/inbox/store"
)

// durability reads the settings that decide whether a committed claim
// survives a crash or a failover. The standbys are the physical
// replication connections: a logical one (its slot says so) is not a
// standby that a failover promotes, and a base backup is not one yet.
// Their sync_state shows only to a superuser or pg_read_all_stats; to
// others it is null.
const durability = `SELECT current_setting('synchronous_commit'), current_setting('fsync'),
	pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
	current_setting('synchronous_standby_names'),
	count(*), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')), count(sync_state)
FROM pg_stat_replication r
WHERE coalesce(r.state, '') <> 'backup'
  AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')`

// Durability holds what the Durability statement reads.
type Durability struct {
	SynchronousCommit string // synchronous_commit: on, remote_apply, remote_write, local or off
	Fsync             string // fsync: on or off
	InRecovery        bool   // a standby: pg_is_in_recovery()
	ReadOnly          bool   // transaction_read_only, true on a standby
	StandbyNames      string // synchronous_standby_names
	Standbys          int    // the standbys streaming from this server now
	Synchronous       int    // those of them that commits wait for
	Known             int    // those whose sync_state this role may read
}

// ScanDurability reads the Durability statement's row through scan, a
// pgx.Row's or a *sql.Row's Scan.
func ScanDurability(scan func(dest ...any) error) (Durability, error) {
	var d Durability
	err := scan(&d.SynchronousCommit, &d.Fsync, &d.InRecovery, &d.ReadOnly, &d.StandbyNames, &d.Standbys, &d.Synchronous, &d.Known)
	return d, err
}

// Warnings returns what in d lets a committed claim be lost in a crash or
// a failover, or stops commits, one sentence each. A database that takes
// no writes is an error wrapping [store.ErrReadOnly] instead: every claim
// would fail.
func (d Durability) Warnings() ([]string, error) {
	switch {
	case d.InRecovery:
		return nil, fmt.Errorf("%w: PostgreSQL is a standby in recovery; connect to the primary (a multi-host DSN with target_session_attrs=read-write finds it)", store.ErrReadOnly)
	case d.ReadOnly:
		return nil, fmt.Errorf("%w: PostgreSQL's transactions are read-only (default_transaction_read_only=on)", store.ErrReadOnly)
	}
	var w []string
	if d.SynchronousCommit == "off" {
		w = append(w, "PostgreSQL runs with synchronous_commit=off: a crash can lose the last committed claims and business writes after the broker was acked; set it to on")
	}
	if d.Fsync == "off" {
		w = append(w, "PostgreSQL runs with fsync=off: a crash can lose or corrupt committed claims; set it to on")
	}
	waits := d.StandbyNames != "" && d.SynchronousCommit != "off" && d.SynchronousCommit != "local"
	switch {
	case d.Standbys > 0 && !waits:
		w = append(w, fmt.Sprintf("PostgreSQL streams to %s, but commits do not wait for any (synchronous_standby_names is %q, synchronous_commit is %s): a failover loses the last committed claims and business writes after the broker was acked; name the standbys in synchronous_standby_names and set synchronous_commit to on",
			standbys(d.Standbys), d.StandbyNames, d.SynchronousCommit))
	case d.Standbys == 0 && waits:
		w = append(w, fmt.Sprintf("PostgreSQL commits wait for a standby in synchronous_standby_names (%q), but none is streaming: every commit waits until one connects", d.StandbyNames))
	case waits && d.Known == d.Standbys && d.Synchronous == 0:
		w = append(w, fmt.Sprintf("PostgreSQL streams to %s, but synchronous_standby_names (%q) names none of them: every commit waits until a named one connects; a standby's name is the application_name in its primary_conninfo",
			standbys(d.Standbys), d.StandbyNames))
	}
	return w, nil
}

func standbys(n int) string {
	if n == 1 {
		return "1 standby"
	}
	return fmt.Sprintf("%d standbys", n)
}
