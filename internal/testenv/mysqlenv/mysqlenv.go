// Package mysqlenv finds the MySQL or MariaDB that tests run against
// (package testenv's rules). Apart from testenv, so that tests of packages
// without MySQL do not import its driver.
package mysqlenv

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox/internal/testenv"
)

// DSN returns INBOX_MYSQL_DSN or the default local DSN
// (go-sql-driver/mysql's format).
func DSN() string {
	if dsn := os.Getenv("INBOX_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test"
}

// Database creates a fresh database on the MySQL or MariaDB server of
// DSN, dropped when tb ends, and returns DSN with that database
// in it; it skips or fails tb when the server does not answer.
func Database(tb testing.TB) string {
	tb.Helper()
	cfg, err := mysql.ParseDSN(DSN())
	if err != nil {
		tb.Fatalf("INBOX_MYSQL_DSN: %v", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		tb.Fatalf("INBOX_MYSQL_DSN: %v", err)
	}
	admin := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		testenv.Unavailable(tb, "MySQL at "+cfg.Addr, err)
	}
	name := testenv.Name("inboxtest_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		tb.Fatalf("create database: %v", err)
	}
	tb.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}
