package mysql_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// A DSN that go-sql-driver/mysql cannot use is refused with the form it
// wants and, when Open can tell, the DSN rewritten in it; never with the
// password. Every error of Open starts with "mysql:". No server is needed:
// these are refused before any connection.
func TestOpenDSNErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, dsn, want string
		also            error
	}{
		{name: "URL", dsn: "mysql://root@db.example:3306/app",
			want: "mysql: Open: a URL is not a go-sql-driver/mysql DSN, which is user:pass@tcp(host:port)/db: write root@tcp(db.example:3306)/app"},
		{name: "URL with a password and parameters", dsn: "mysql://app:s3cr3t@db.example:3306/app?interpolateParams=true",
			want: "mysql: Open: a URL is not a go-sql-driver/mysql DSN, which is user:pass@tcp(host:port)/db: write app:xxxxx@tcp(db.example:3306)/app?interpolateParams=true"},
		{name: "URL that the driver would misread", dsn: "mysql://root:s3cr3t@tcp(db.example:3306)/app",
			want: "mysql: Open: a URL is not a go-sql-driver/mysql DSN, which is user:pass@tcp(host:port)/db"},
		{name: "no tcp()", dsn: "root@db.example:3306/app",
			want: "mysql: Open: the DSN's address lacks tcp(...) around it (default addr for network 'db.example:3306' unknown): go-sql-driver/mysql wants user:pass@tcp(host:port)/db: write root@tcp(db.example:3306)/app"},
		{name: "no tcp(), a password", dsn: "app:s3cr3t@db.example/app",
			want: "mysql: Open: the DSN's address lacks tcp(...) around it (default addr for network 'db.example' unknown): go-sql-driver/mysql wants user:pass@tcp(host:port)/db: write app:xxxxx@tcp(db.example)/app"},
		{name: "no database", dsn: "not a dsn",
			want: "mysql: Open: invalid DSN: missing the slash separating the database name: go-sql-driver/mysql wants user:pass@tcp(host:port)/db"},
		{name: "clientFoundRows", dsn: "root@tcp(127.0.0.1:1)/test?clientFoundRows=true", also: sqlstore.ErrClientFoundRows,
			want: "mysql: Open: " + sqlstore.ErrClientFoundRows.Error()},
		{name: "lock wait not seconds", dsn: "root@tcp(127.0.0.1:1)/test?innodb_lock_wait_timeout=1.5",
			want: `mysql: Open: innodb_lock_wait_timeout="1.5", want whole seconds`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := mysql.Open(tc.dsn, nil)
			if db != nil {
				_ = db.Close()
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Open(%q): %v\nwant %s", tc.dsn, err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("Open(%q): the error shows the password: %v", tc.dsn, err)
			}
			if !errors.Is(err, sqlstore.ErrInvalidConfig) || tc.also != nil && !errors.Is(err, tc.also) {
				t.Errorf("Open(%q): %v, want it to wrap sqlstore.ErrInvalidConfig (and %v)", tc.dsn, err, tc.also)
			}
		})
	}
}

// A server that cannot be reached is named by its address, after "mysql:".
func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	_, err := mysql.Open("root@tcp(127.0.0.1:1)/test?timeout=1s", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "mysql: Open 127.0.0.1:1: ") {
		t.Fatalf("Open on a closed port: %v, want an error starting with \"mysql: Open 127.0.0.1:1: \"", err)
	}
}
