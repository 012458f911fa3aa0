package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/bench/internal/ledger"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
	mysqlstore "github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// storeKind makes a fresh set of tables per measurement on one database
// server.
type storeKind interface {
	name() string
	// prepare creates the ledger, the accounts (w.NumAccounts rows, at
	// 0) and the inbox's tables, in a schema (database) of their own.
	prepare(ctx context.Context, w *ledger.Workload) (env, error)
	// deadlocks reads the server's deadlock counter.
	deadlocks(ctx context.Context) (int64, error)
	close()
}

// env is one measurement's tables, with the modes that run on them.
type env interface {
	runner(mode string) (runFunc, error)
	// outcomes are the last inbox mode's outcomes, nil after another mode.
	outcomes() *inbox.Counts
	// state reads the ledger and the accounts.
	state(ctx context.Context) (*ledger.State, error)
	// drop closes the pool and drops the tables.
	drop(ctx context.Context)
	// traffic is what was sent to the database so far; false where it is
	// not counted (MariaDB).
	traffic() (traffic, bool)
}

// pgKind runs on a PostgreSQL database of its own, created for the run
// (so that pg_stat_database's deadlocks are the run's only) and dropped
// after it; each measurement has a schema in it.
type pgKind struct {
	o       *options
	dbName  string
	dbURL   string
	admin   *pgx.Conn // on dbName
	baseURL string
}

func openPostgres(ctx context.Context, o *options) (*pgKind, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	base, err := pgx.Connect(cctx, o.pgURL)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL at %s: %w", errUnavailable, o.pgURL, err)
	}
	defer base.Close(ctx)
	k := &pgKind{o: o, dbName: ledger.RandomName("consumebench"), baseURL: o.pgURL}
	if _, err := base.Exec(ctx, "CREATE DATABASE "+k.dbName); err != nil {
		return nil, fmt.Errorf("postgres: create database: %w", err)
	}
	u, err := url.Parse(o.pgURL)
	if err != nil {
		k.close()
		return nil, fmt.Errorf("-pg: %w", err)
	}
	u.Path = "/" + k.dbName
	k.dbURL = u.String()
	k.admin, err = pgx.Connect(ctx, k.dbURL)
	if err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

func (k *pgKind) name() string { return "postgres" }

func (k *pgKind) close() {
	ctx := context.Background()
	if k.admin != nil {
		_ = k.admin.Close(ctx)
	}
	if base, err := pgx.Connect(ctx, k.baseURL); err == nil {
		if _, err := base.Exec(ctx, "DROP DATABASE IF EXISTS "+k.dbName+" WITH (FORCE)"); err != nil {
			k.o.logger.Warn("postgres: drop database", "database", k.dbName, "error", err)
		}
		_ = base.Close(ctx)
	}
}

// deadlocks reads pg_stat_database. A busy backend reports its counts
// when it exits, at the latest: so it waits (up to 5 s) for the closed
// pool's backends to be gone, and a moment more for their last report.
func (k *pgKind) deadlocks(ctx context.Context) (int64, error) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		var others int
		if err := k.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
			k.dbName).Scan(&others); err != nil {
			return 0, err
		}
		if others == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	var n int64
	if _, err := k.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	err := k.admin.QueryRow(ctx, "SELECT deadlocks FROM pg_stat_database WHERE datname = $1", k.dbName).Scan(&n)
	return n, err
}

func (k *pgKind) prepare(ctx context.Context, w *ledger.Workload) (env, error) {
	cfg, err := pgxpool.ParseConfig(k.dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(2*k.o.workers + 2)
	trips := &tripCounter{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pg := ledger.NewPG(ledger.RandomName("m"))
	e := &pgEnv{pool: pool, pg: pg, trips: trips}
	s := pg.Schema
	ddl := pg.DDL(w.NumAccounts) + ";CREATE TABLE " + s + ".wm_dedup (key text PRIMARY KEY, expires_at timestamptz NOT NULL)"
	if _, err := pool.Exec(ctx, ddl); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: create tables: %w", err)
	}
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: s}})
	if err != nil {
		e.drop(ctx)
		return nil, err
	}
	if err := d.Migrate(ctx); err != nil {
		e.drop(ctx)
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	e.modes = &modes[pgx.Tx]{o: k.o, driver: d,
		inTx:        func(ctx context.Context, fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) },
		record:      pg.Record,
		recordBatch: pg.RecordBatch,
		queue:       pg.Queue,
		watermill:   watermillMode(k.o, pool, s, pg.Record),
	}
	return e, nil
}

type pgEnv struct {
	*modes[pgx.Tx]
	pool  *pgxpool.Pool
	pg    *ledger.PG
	trips *tripCounter
}

func (e *pgEnv) traffic() (traffic, bool) { return e.trips.traffic(), true }

func (e *pgEnv) state(ctx context.Context) (*ledger.State, error) { return e.pg.ReadState(ctx, e.pool) }

func (e *pgEnv) drop(ctx context.Context) {
	if _, err := e.pool.Exec(ctx, "DROP SCHEMA "+e.pg.Schema+" CASCADE"); err != nil {
		e.modes.o.logger.Warn("postgres: drop schema", "schema", e.pg.Schema, "error", err)
	}
	e.pool.Close()
}

// mariaKind runs on MariaDB (or MySQL), with a database per measurement.
// Its Innodb_deadlocks is the server's: it counts other clients' too.
type mariaKind struct {
	o     *options
	cfg   *gomysql.Config
	admin *sql.DB
}

func openMariaDB(ctx context.Context, o *options) (*mariaKind, error) {
	cfg, err := gomysql.ParseDSN(o.mysqlDSN)
	if err != nil {
		return nil, fmt.Errorf("-mysql: %w", err)
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	admin := sql.OpenDB(conn)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(cctx); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("%w: MariaDB at %s: %w", errUnavailable, cfg.Addr, err)
	}
	return &mariaKind{o: o, cfg: cfg, admin: admin}, nil
}

func (k *mariaKind) name() string { return "mariadb" }
func (k *mariaKind) close()       { _ = k.admin.Close() }

func (k *mariaKind) deadlocks(ctx context.Context) (int64, error) {
	var name string
	var n int64
	err := k.admin.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n)
	return n, err
}

func (k *mariaKind) prepare(ctx context.Context, w *ledger.Workload) (env, error) {
	name := ledger.RandomName("consumebench")
	if _, err := k.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("mariadb: create database: %w", err)
	}
	cfg := k.cfg.Clone()
	cfg.DBName = name
	// One round trip per statement with arguments, for the handlers and
	// the inbox alike (mysql.Open's advice); every mode gets it.
	cfg.InterpolateParams = true
	db, err := mysqlstore.Open(cfg.FormatDSN(), nil)
	if err != nil {
		_, _ = k.admin.ExecContext(ctx, "DROP DATABASE "+name)
		return nil, err
	}
	db.SetMaxOpenConns(2*k.o.workers + 2)
	e := &mariaEnv{k: k, db: db, dbName: name}
	for _, q := range []string{
		"CREATE TABLE ledger (msg_id VARCHAR(200) NOT NULL, account BIGINT NOT NULL, amount BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			e.drop(ctx)
			return nil, fmt.Errorf("mariadb: create tables: %w", err)
		}
	}
	for from := 0; from < w.NumAccounts; from += 1000 {
		var sb strings.Builder
		sb.WriteString("INSERT INTO accounts (id, balance) VALUES ")
		for i := from; i < min(from+1000, w.NumAccounts); i++ {
			if i > from {
				sb.WriteByte(',')
			}
			sb.WriteString("(" + strconv.Itoa(i) + ",0)")
		}
		if _, err := db.ExecContext(ctx, sb.String()); err != nil {
			e.drop(ctx)
			return nil, fmt.Errorf("mariadb: create accounts: %w", err)
		}
	}
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysqlstore.Dialect, Logger: k.o.logger})
	if err != nil {
		e.drop(ctx)
		return nil, err
	}
	if err := d.Migrate(ctx); err != nil {
		e.drop(ctx)
		return nil, fmt.Errorf("mariadb: migrate: %w", err)
	}
	const (
		insert = "INSERT INTO ledger (msg_id, account, amount) VALUES (?, ?, ?)"
		add    = "UPDATE accounts SET balance = balance + ? WHERE id = ?"
	)
	e.modes = &modes[*sql.Tx]{o: k.o, driver: d,
		inTx: func(ctx context.Context, fn func(*sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		record: func(ctx context.Context, tx *sql.Tx, en ledger.Entry) error {
			if _, err := tx.ExecContext(ctx, insert, en.ID, en.Account, en.Amount); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, add, en.Amount, en.Account)
			return err
		},
		recordBatch: func(ctx context.Context, tx *sql.Tx, es []ledger.Entry) error {
			var sb strings.Builder
			sb.WriteString("INSERT INTO ledger (msg_id, account, amount) VALUES ")
			args := make([]any, 0, 3*len(es))
			for i, en := range es {
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString("(?, ?, ?)")
				args = append(args, en.ID, en.Account, en.Amount)
			}
			if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
				return err
			}
			for _, c := range ledger.Credits(es) {
				if _, err := tx.ExecContext(ctx, add, c.Amount, c.Account); err != nil {
					return err
				}
			}
			return nil
		},
	}
	return e, nil
}

type mariaEnv struct {
	*modes[*sql.Tx]
	k      *mariaKind
	db     *sql.DB
	dbName string
}

func (e *mariaEnv) traffic() (traffic, bool) { return traffic{}, false }

func (e *mariaEnv) state(ctx context.Context) (*ledger.State, error) {
	s := ledger.NewState()
	if err := e.db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT msg_id) FROM ledger").Scan(&s.Rows, &s.Distinct); err != nil {
		return nil, err
	}
	if err := sqlPairs(ctx, e.db, "SELECT account, CAST(SUM(amount) AS SIGNED) FROM ledger GROUP BY account", s.Sums); err != nil {
		return nil, err
	}
	if err := sqlPairs(ctx, e.db, "SELECT id, balance FROM accounts WHERE balance <> 0", s.Balances); err != nil {
		return nil, err
	}
	return s, nil
}

func sqlPairs(ctx context.Context, db *sql.DB, q string, into map[int64]int64) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v int64
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		into[k] = v
	}
	return rows.Err()
}

func (e *mariaEnv) drop(ctx context.Context) {
	_ = e.db.Close()
	if _, err := e.k.admin.ExecContext(ctx, "DROP DATABASE "+e.dbName); err != nil {
		e.k.o.logger.Warn("mariadb: drop database", "database", e.dbName, "error", err)
	}
}
