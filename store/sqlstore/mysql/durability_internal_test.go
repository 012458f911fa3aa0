package mysql

import (
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/store"
)

func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	safe := durability{flushLog: 1, syncBinlog: 1}
	with := func(f func(*durability)) durability { d := safe; f(&d); return d }
	tests := []struct {
		name     string
		d        durability
		want     []string // one substring per warning
		readOnly string
	}{
		{"alone", safe, nil, ""},
		{"flush 2", with(func(d *durability) { d.flushLog = 2 }), []string{"innodb_flush_log_at_trx_commit is 2"}, ""},
		{"binlog not synced", with(func(d *durability) { d.logBin = true; d.syncBinlog = 0 }), []string{"sync_binlog is 0"}, ""},
		{"binlog off, not synced", with(func(d *durability) { d.syncBinlog = 0 }), nil, ""},
		{"async replica", with(func(d *durability) { d.logBin = true; d.replicas = 1 }), []string{"1 replica or binlog reader reading its binary log, and commits wait for none"}, ""},
		{"semi-sync replicas", with(func(d *durability) { d.logBin = true; d.replicas = 2; d.semiSync = true; d.semiSyncOn = true }), nil, ""},
		{"semi-sync fell back", with(func(d *durability) { d.logBin = true; d.replicas = 2; d.semiSync = true }), []string{"2 replicas or binlog readers reading its binary log, and semi-synchronous replication fell back"}, ""},
		{"read-only replica", with(func(d *durability) { d.readOnly = true }), nil, "read_only=ON"},
		{"galera node ready", with(func(d *durability) { d.galera = true; d.ready = true }), nil, ""},
		{"galera node not ready", with(func(d *durability) { d.galera = true }), nil, "wsrep_ready is OFF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := tt.d.warnings()
			if (tt.readOnly != "") != errors.Is(err, store.ErrReadOnly) || (err != nil && !strings.Contains(err.Error(), tt.readOnly)) {
				t.Fatalf("error %v, want read-only %q", err, tt.readOnly)
			}
			if len(w) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", w, len(tt.want))
			}
			for i, sub := range tt.want {
				if !strings.Contains(w[i], sub) {
					t.Errorf("warning %q does not say %q", w[i], sub)
				}
			}
		})
	}
}
