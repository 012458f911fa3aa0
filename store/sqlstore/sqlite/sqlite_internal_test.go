package sqlite

import (
	"testing"
	"time"
)

func TestSQLiteDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		opts *Options
		want string
	}{
		{"/var/lib/app/inbox.db", nil,
			"file:/var/lib/app/inbox.db?_pragma=busy_timeout%285000%29&_pragma=journal_mode%28WAL%29&_pragma=synchronous%28FULL%29&_pragma=foreign_keys%281%29&_txlock=immediate"},
		{"rel/a?b#c%d.db", &Options{BusyTimeout: 100 * time.Millisecond},
			"file:rel/a%3Fb%23c%25d.db?_pragma=busy_timeout%28100%29&_pragma=journal_mode%28WAL%29&_pragma=synchronous%28FULL%29&_pragma=foreign_keys%281%29&_txlock=immediate"},
		{"inbox.db", &Options{}, // zero: the default
			"file:inbox.db?_pragma=busy_timeout%285000%29&_pragma=journal_mode%28WAL%29&_pragma=synchronous%28FULL%29&_pragma=foreign_keys%281%29&_txlock=immediate"},
		{"//srv/inbox.db", &Options{BusyTimeout: -1},
			"file:///srv/inbox.db?_pragma=busy_timeout%280%29&_pragma=journal_mode%28WAL%29&_pragma=synchronous%28FULL%29&_pragma=foreign_keys%281%29&_txlock=immediate"},
	} {
		got, err := sqliteDSN(tc.path, tc.opts)
		if err != nil || got != tc.want {
			t.Errorf("sqliteDSN(%q, %+v) =\n%s, %v\nwant\n%s", tc.path, tc.opts, got, err, tc.want)
		}
	}
	if _, err := sqliteDSN("", nil); err == nil {
		t.Error("sqliteDSN(\"\"): want an error")
	}
}
