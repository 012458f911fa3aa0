package pgsql

import (
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/store"
)

func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	safe := Durability{SynchronousCommit: "on", Fsync: "on"}
	with := func(f func(*Durability)) Durability { d := safe; f(&d); return d }
	tests := []struct {
		name     string
		d        Durability
		want     []string // one substring per warning
		readOnly bool
	}{
		{"alone", safe, nil, false},
		{"synchronous_commit off", with(func(d *Durability) { d.SynchronousCommit = "off" }), []string{"synchronous_commit=off"}, false},
		{"fsync off", with(func(d *Durability) { d.Fsync = "off" }), []string{"fsync=off"}, false},
		{"async standby", with(func(d *Durability) { d.Standbys, d.Senders = 1, 1 }), []string{"streams to 1 standby, but commits wait for none"}, false},
		{"two async standbys", with(func(d *Durability) { d.Standbys, d.Senders = 2, 2 }), []string{"streams to 2 standbys"}, false},
		{"sync standby", with(func(d *Durability) { d.Standbys, d.Senders, d.StandbyNames, d.Named, d.Known = 1, 1, "s1", 1, 1 }), nil, false},
		{"sync standby, state hidden", with(func(d *Durability) { d.Standbys, d.Senders, d.StandbyNames = 1, 1, "s1" }), nil, false},
		{"sync logical subscriber", with(func(d *Durability) { d.Senders, d.StandbyNames, d.Named, d.Known = 1, "sub", 1, 1 }), nil, false},
		{"standby not named", with(func(d *Durability) { d.Standbys, d.Senders, d.StandbyNames, d.Known = 2, 2, "s1", 2 }), []string{"streams to 2 standbys, but synchronous_standby_names (\"s1\") names none"}, false},
		{"sync standby, remote_write", with(func(d *Durability) {
			d.Standbys, d.Senders, d.StandbyNames, d.SynchronousCommit = 1, 1, "s1", "remote_write"
		}), nil, false},
		{"sync standby, commit local", with(func(d *Durability) { d.Standbys, d.Senders, d.StandbyNames, d.SynchronousCommit = 1, 1, "s1", "local" }), []string{"synchronous_commit local"}, false},
		{"sync standby, commit off", with(func(d *Durability) { d.Standbys, d.Senders, d.StandbyNames, d.SynchronousCommit = 1, 1, "s1", "off" }), []string{"synchronous_commit=off", "commits wait for none"}, false},
		{"sync standby missing", with(func(d *Durability) { d.StandbyNames = "FIRST 1 (s1)" }), []string{"none is streaming"}, false},
		{"standby", with(func(d *Durability) { d.InRecovery = true; d.ReadOnly = true }), nil, true},
		{"read-only primary", with(func(d *Durability) { d.ReadOnly = true }), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := tt.d.Warnings()
			if got := errors.Is(err, store.ErrReadOnly); got != tt.readOnly {
				t.Fatalf("error %v, want read-only %v", err, tt.readOnly)
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
