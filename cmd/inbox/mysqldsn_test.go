package main

import "testing"

// A URL given to -mysql is refused with the DSN form go-sql-driver/mysql
// wants, the URL rewritten in it, and the password masked.
func TestMySQLURLFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn, want string
	}{
		{"mysql://root:s3cr3t@127.0.0.1:3306/test",
			"inbox: mysql: Open: a URL is not a go-sql-driver/mysql DSN, which is user:pass@tcp(host:port)/db: write root:xxxxx@tcp(127.0.0.1:3306)/test\n"},
		{"root@127.0.0.1:3306/test",
			"inbox: mysql: Open: the DSN's address lacks tcp(...) around it (default addr for network '127.0.0.1:3306' unknown): " +
				"go-sql-driver/mysql wants user:pass@tcp(host:port)/db: write root@tcp(127.0.0.1:3306)/test\n"},
	}
	for _, tc := range tests {
		t.Run(tc.dsn, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, "stats", "-mysql", tc.dsn)
			if code != exitFailure || stderr != tc.want || stdout != "" {
				t.Fatalf("stats -mysql %s: exit %d, stderr %q, stdout %q\nwant exit 1, stderr %q", tc.dsn, code, stderr, stdout, tc.want)
			}
		})
	}
}
