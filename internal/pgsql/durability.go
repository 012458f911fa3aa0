package pgsql

import (
	"fmt"

	"github.com/inboxkit/inbox/store"
)

// durability reads the settings that decide whether a committed claim
// survives a crash or a failover, and the WAL senders. The standbys are
// the physical ones: a logical subscriber (its slot says so) is not a
// standby that a failover promotes, and a base backup is not one yet. A
// sender named in synchronous_standby_names, logical or not, is sync,
// quorum or potential (named, not yet caught up); its sync_state shows
// only to a superuser or pg_read_all_stats, and to others is null.
const durability = `SELECT current_setting('synchronous_commit'), current_setting('fsync'),
	pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
	current_setting('synchronous_standby_names'),
	count(*) FILTER (WHERE NOT logical), count(*),
	count(*) FILTER (WHERE sync_state IN ('sync', 'quorum', 'potential')), count(sync_state)
FROM (SELECT r.sync_state, EXISTS (SELECT 1 FROM pg_replication_slots s
                                    WHERE s.active_pid = r.pid AND s.slot_type = 'logical') AS logical
      FROM pg_stat_replication r
      WHERE coalesce(r.state, '') <> 'backup') AS senders`

// Durability holds what the Durability statement reads.
type Durability struct {
	SynchronousCommit string // synchronous_commit: on, remote_apply, remote_write, local or off
	Fsync             string // fsync: on or off
	InRecovery        bool   // a standby: pg_is_in_recovery()
	ReadOnly          bool   // transaction_read_only, true on a standby
	StandbyNames      string // synchronous_standby_names
	Standbys          int    // the physical standbys streaming from this server now
	Senders           int    // every WAL sender, logical subscribers too
	Named             int    // the senders that synchronous_standby_names names
	Known             int    // the senders whose sync_state this role may read
}

// ScanDurability reads the Durability statement's row through scan, a
// pgx.Row's or a *sql.Row's Scan.
func ScanDurability(scan func(dest ...any) error) (Durability, error) {
	var d Durability
	err := scan(&d.SynchronousCommit, &d.Fsync, &d.InRecovery, &d.ReadOnly, &d.StandbyNames,
		&d.Standbys, &d.Senders, &d.Named, &d.Known)
	return d, err
}

// Warnings returns what in d lets a committed claim be lost in a crash or
// a failover, or stops commits, one sentence each. A database that takes
// no writes is an error wrapping [store.ErrReadOnly] instead: every claim
// would fail.
func (d Durability) Warnings() ([]string, error) {
	switch {
	case d.InRecovery:
		return nil, fmt.Errorf("%w: PostgreSQL is a standby; connect to the primary", store.ErrReadOnly)
	case d.ReadOnly:
		return nil, fmt.Errorf("%w: default_transaction_read_only is on", store.ErrReadOnly)
	}
	var w []string
	if d.SynchronousCommit == "off" {
		w = append(w, "PostgreSQL runs with synchronous_commit=off: a crash can lose the last claims and writes after their ack")
	}
	if d.Fsync == "off" {
		w = append(w, "PostgreSQL runs with fsync=off: a crash can lose or corrupt committed claims")
	}
	waits := d.StandbyNames != "" && d.SynchronousCommit != "off" && d.SynchronousCommit != "local"
	switch {
	case d.Standbys > 0 && !waits:
		w = append(w, fmt.Sprintf("PostgreSQL streams to %s, but commits wait for none (synchronous_standby_names %q, synchronous_commit %s): a failover loses the last claims and writes after their ack",
			standbys(d.Standbys), d.StandbyNames, d.SynchronousCommit))
	case waits && d.Senders == 0:
		w = append(w, fmt.Sprintf("PostgreSQL commits wait for a standby that synchronous_standby_names (%q) names, and none is streaming: every commit waits", d.StandbyNames))
	case waits && d.Known == d.Senders && d.Named == 0:
		w = append(w, fmt.Sprintf("PostgreSQL streams to %s, but synchronous_standby_names (%q) names none of them: every commit waits (a standby's name is its application_name)",
			standbys(d.Senders), d.StandbyNames))
	}
	return w, nil
}

func standbys(n int) string {
	if n == 1 {
		return "1 standby"
	}
	return fmt.Sprintf("%d standbys", n)
}
