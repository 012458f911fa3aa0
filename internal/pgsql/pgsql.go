// Package pgsql holds the PostgreSQL SQL of the inbox: migrations and
// queries, shared by store/pgxstore and the PostgreSQL dialect of
// store/sqlstore so that there is one copy. Placeholders are $n.
package pgsql

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
)

// Names are the table names the statements use: quoted names, or
// internal/migrate's tokens ({inbox}, ...) for a store that fills them in
// itself.
type Names struct{ Inbox, Attempts, DeadLetters, Migrations, Outbox, Keys string }

// Tokens are internal/migrate's tokens for the table names.
var Tokens = Names{Inbox: "{inbox}", Attempts: "{attempts}", DeadLetters: "{dead_letters}", Migrations: "{migrations}", Outbox: "{outbox}", Keys: "{idempotency_keys}"}

// Queries are the statements of one set of tables, for pgxstore and for
// sqlstore's PostgreSQL dialect alike. Times come back as unix
// milliseconds; durations go in as milliseconds.
type Queries struct {
	Tables     store.Tables
	Migrations []store.Migration

	// LockKey is the advisory lock key of the tables, for Prune.
	LockKey int64
	// KeysLockKey is the advisory lock key of the idempotency keys'
	// table, for KeyPrune.
	KeysLockKey int64
	// MigrateLockKey is the advisory lock key of Migrate, per schema so
	// that CREATE SCHEMA never races either.
	MigrateLockKey int64
	// CreateSchema creates Tables.Schema if set; empty otherwise.
	CreateSchema string
	// OutboxChannel is the LISTEN/NOTIFY channel of the outbox table.
	OutboxChannel string

	Statements
}

// Statements are the SQL of the inbox on PostgreSQL.
type Statements struct {
	// SetLockTimeout sets the lock timeout for the rest of the
	// transaction: $1 a duration such as "5000ms".
	SetLockTimeout string
	// Claim: $1 consumer, $2 message_id, $3 type, $4 fingerprint. Inserts
	// one row (command tag INSERT 0 1, and a row back) for a new message,
	// none for a duplicate.
	Claim string
	// ClaimSettingLockTimeout is Claim that first sets the lock timeout
	// for the rest of the transaction: $5 a duration such as "5000ms". The
	// CTE runs before the row is inserted, so the timeout bounds the
	// insert's wait behind a racing claim; not a wait for the table's own
	// lock (behind an ALTER TABLE), which the statement takes before.
	ClaimSettingLockTimeout string
	// ClaimPlain is Claim without ON CONFLICT: a duplicate fails it with
	// unique_violation (23505), which aborts the implicit transaction of the
	// queued statements it leads.
	ClaimPlain string
	// ClaimBatch claims many messages of one consumer in one statement, in
	// the arrays' order: $1 consumer, $2 message_id bytea[], $3
	// message_type text[], $4 fingerprint bytea[]. A row per duplicate
	// (none for a claimed message: returning a row per message measured
	// 13 % slower at 8 goroutines): its position in the arrays (from 1),
	// its stored fingerprint and type (null when another transaction's
	// claim was not yet committed when the statement began, and when the
	// message has no fingerprint to compare: Config.NoFingerprint).
	ClaimBatch string
	// Unclaim: $1 consumer, $2 message_id.
	Unclaim string
	// ClaimLookup: $1 consumer, $2 message_id. Returns a duplicate's
	// fingerprint and message type.
	ClaimLookup string
	// AttemptAdd: $1 consumer, $2 message_id, $3 error, $4 attempts to
	// add, $5 transient failures to add (0 or 1 each). Returns both counts.
	AttemptAdd string
	// AttemptsDelete: $1 consumer, $2 message_id.
	AttemptsDelete string
	// DeadLetterAdd: $1 consumer, $2 message_id, $3 type, $4 fingerprint,
	// $5 payload, $6 headers, $7 error, $8 attempts. Returns the dead
	// letter's id, or no row when the inbox row exists.
	DeadLetterAdd string
	// DeadInsert inserts the dead-marked inbox row alone: $1 consumer, $2
	// message_id, $3 type, $4 fingerprint. A row back if it inserted.
	DeadInsert string
	// DeadLetterInsert: the dead letter alone: $1 consumer, $2 message_id,
	// $3 type, $4 payload, $5 headers, $6 error, $7 attempts.
	DeadLetterInsert string
	// DeadLetterList: $1 consumer, $2 after id, $3 limit. Columns:
	// DeadLetterColumns.
	DeadLetterList string
	// DeadLetterTake: $1 consumer, $2 id. Returns the deleted row.
	DeadLetterTake string
	// DeadLetterGet locks and returns one: $1 consumer, $2 id.
	DeadLetterGet string
	// DeadLetterDelete: $1 consumer, $2 id.
	DeadLetterDelete string
	// InboxReclaim: $1 consumer, $2 message_id, $3 type, $4 fingerprint.
	// Returns a row if it made the row live.
	InboxReclaim string
	// TryLock: $1 key. Returns whether the transaction got the lock.
	TryLock string
	// Lock: $1 key. Waits for the lock, for the transaction.
	Lock string
	// TrySessionLock, SessionUnlock: $1 key, for a session.
	TrySessionLock, SessionUnlock string
	// PruneInbox, PruneAttempts: $1 retention in milliseconds, $2 limit.
	// They delete the oldest rows through the btree on the time column
	// (see pruneOldest). PruneInbox also takes $3, the received_at to
	// start from (null: the first), and returns the number of rows deleted
	// and the received_at of the newest.
	PruneInbox, PruneAttempts string
	// Durability returns the settings and the replication state that
	// [ScanDurability] reads.
	Durability string
	// CreateMigrations creates the migrations table if missing.
	CreateMigrations string
	// AppliedVersions lists the applied migration versions.
	AppliedVersions string
	// SchemaVersion returns the highest applied version (0 for none).
	SchemaVersion string
	// RecordMigration: $1 version, $2 name.
	RecordMigration string

	// OutboxWrite inserts rows from arrays in order, skipping IDs already
	// there, and notifies the relays (at COMMIT): $1 message_id bytea[],
	// $2 destination text[], $3 msg_key bytea[] (null: none), $4
	// message_type text[], $5 headers bytea[], $6 payload bytea[], $7 the
	// channel. Returns the number of rows inserted.
	OutboxWrite string
	// OutboxWriteQuiet is OutboxWrite without the notification ($7).
	OutboxWriteQuiet string
	// OutboxWriteOne inserts one row, unless its ID is there: $1
	// message_id, $2 destination, $3 msg_key (null: none), $4
	// message_type, $5 headers, $6 payload. Its tag counts the row.
	// OutboxWriteOneNotify also notifies channel $7 (at COMMIT).
	OutboxWriteOne, OutboxWriteOneNotify string
	// OutboxClaim, OutboxClaimOrdered: $1 limit, $2 lease in milliseconds,
	// $3 token. Return OutboxColumns.
	OutboxClaim, OutboxClaimOrdered string
	// OutboxDelete: $1 seqs bigint[], $2 token. Its tag counts the rows.
	OutboxDelete string
	// OutboxMarkPublished is OutboxDelete that keeps the rows, marked.
	OutboxMarkPublished string
	// OutboxPrunePublished deletes at most $2 rows published more than $1
	// milliseconds ago. Its tag counts them.
	OutboxPrunePublished string
	// OutboxFail: $1 token, $2 seqs bigint[], $3 errors text[], $4 delays
	// in milliseconds bigint[], $5 park bool[], $6 released bool[].
	OutboxFail string
	// OutboxParked: $1 after seq, $2 limit. Returns OutboxColumns.
	OutboxParked string
	// OutboxUnpark: $1 seq. Its tag counts the row.
	OutboxUnpark string
	// OutboxDiscard deletes parked row $1. Its tag counts the row.
	OutboxDiscard string

	// KeyLock waits for a claim of the same key in flight: $1 scope, $2
	// idem_key, $3 the wait as a lock_timeout such as "1ms", set for the
	// rest of the transaction. It takes a transaction-scoped advisory lock
	// on a hash of the key, which every claim of it takes first and holds
	// until its transaction ends. A key whose row is committed already
	// needs no lock: its replays do not wait for one another.
	//
	// Only this statement waits for a key in flight, so that only its
	// lock timeout means "in use". A lock_timeout of the wait over the
	// insert would also time out on the table's own locks, such as its
	// extension lock under load, and turn a fresh key into 409.
	KeyLock string
	// KeyClaim inserts the key's row unless it exists: $1 scope, $2
	// idem_key, $3 method, $4 route, $5 fingerprint. Its tag counts the row
	// inserted. It never meets the key's row uncommitted: that row's
	// transaction holds KeyLock's lock.
	KeyClaim string
	// KeyLookup: $1 scope, $2 idem_key. Returns fingerprint, status,
	// header, body and created_at in unix milliseconds.
	KeyLookup string
	// KeySave writes the response: $1 scope, $2 idem_key, $3 status, $4
	// header, $5 body.
	KeySave string
	// KeySaveClaimed is KeySave that fails with division_by_zero (22012)
	// when the key's row is gone, for a pipeline whose COMMIT is already
	// sent: PostgreSQL then skips the rest of the pipeline, COMMIT
	// included, and the transaction never commits.
	KeySaveClaimed string
	// KeyPrune deletes at most $2 keys created more than $1 milliseconds
	// ago, oldest first. Its tag counts them.
	KeyPrune string
}

// OutboxColumns is the column order of the outbox reads: created_at and
// parked_at in unix milliseconds (parked_at null when not parked).
const OutboxColumns = `seq, message_id, destination, msg_key, message_type, headers, payload, attempts, last_error,
	(extract(epoch FROM created_at) * 1000)::bigint, (extract(epoch FROM parked_at) * 1000)::bigint`

// outboxClaim leases the oldest due rows of table o, skipping those other
// relays are claiming, through the partial index of due rows; ordered
// takes a row only when its key has no older row.
func outboxClaim(o string, ordered bool) string {
	cond := ""
	if ordered {
		cond = `
		AND (d.msg_key IS NULL OR NOT EXISTS (SELECT 1 FROM ` + o + ` p WHERE p.msg_key = d.msg_key AND p.seq < d.seq AND p.published_at IS NULL))`
	}
	return `WITH due AS (
	SELECT seq FROM ` + o + ` d
	WHERE parked_at IS NULL AND published_at IS NULL AND available_at <= now()` + cond + `
	ORDER BY available_at, seq LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE ` + o + ` o SET available_at = now() + $2::bigint * interval '1 millisecond', lease_token = $3
FROM due WHERE o.seq = due.seq
RETURNING ` + strings.ReplaceAll(strings.ReplaceAll(OutboxColumns, "seq,", "o.seq,"), "(extract(epoch FROM ", "(extract(epoch FROM o.")
}

// DeadLetterColumns is the column order of the dead letter reads:
// failed_at in unix milliseconds.
const DeadLetterColumns = `id, consumer, message_id, message_type, payload, headers, error, attempts,
	(extract(epoch FROM failed_at) * 1000)::bigint`

// MigrationFS holds the migrations, NNNN_name.sql in "migrations".
//
//go:embed migrations/*.sql
var MigrationFS embed.FS

// New returns the queries of tables t, which must be valid.
func New(t store.Tables) (*Queries, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	ms, err := migrate.Load(MigrationFS, "migrations", t, store.QuoteDouble)
	if err != nil {
		return nil, err
	}
	q := &Queries{
		Tables:         t,
		Migrations:     ms,
		LockKey:        PruneLockKey(t),
		KeysLockKey:    KeysPruneLockKey(t),
		MigrateLockKey: MigrateLockKey(t),
		Statements: NewStatements(Names{
			Inbox:       t.Name("inbox", store.QuoteDouble),
			Attempts:    t.Name("inbox_attempts", store.QuoteDouble),
			DeadLetters: t.Name("inbox_dead_letters", store.QuoteDouble),
			Migrations:  t.Name("inbox_migrations", store.QuoteDouble),
			Outbox:      t.Name("outbox", store.QuoteDouble),
			Keys:        t.Name("idempotency_keys", store.QuoteDouble),
		}),
		OutboxChannel: OutboxChannel(t),
	}
	q.CreateSchema = CreateSchema(t)
	return q, nil
}

// CreateSchema is the statement that creates t.Schema, empty without one.
func CreateSchema(t store.Tables) string {
	if t.Schema == "" {
		return ""
	}
	return `CREATE SCHEMA IF NOT EXISTS ` + store.QuoteDouble(t.Schema)
}

// OutboxChannel is the NOTIFY channel of t's outbox: a hash, because a
// channel name is cut at 63 bytes and a schema and prefix may be longer.
func OutboxChannel(t store.Tables) string {
	return fmt.Sprintf("inbox_outbox_%016x", uint64(lockKey("outbox", t.Schema, t.Prefix)))
}

// PruneLockKey and MigrateLockKey are the advisory lock keys of tables t.
func PruneLockKey(t store.Tables) int64   { return lockKey("prune", t.Schema, t.Prefix) }
func MigrateLockKey(t store.Tables) int64 { return lockKey("migrate", t.Schema) }

// KeysPruneLockKey is the advisory lock key of t's idempotency keys'
// table, for their pruner, which runs apart from the inbox's.
func KeysPruneLockKey(t store.Tables) int64 { return lockKey("prune-keys", t.Schema, t.Prefix) }

// NewStatements returns the statements on the tables named n.
func NewStatements(n Names) Statements {
	inbox, attempts, dead, migrations := n.Inbox, n.Attempts, n.DeadLetters, n.Migrations
	return Statements{
		SetLockTimeout: `SELECT set_config('lock_timeout', $1, true)`,
		Claim: `INSERT INTO ` + inbox + ` (consumer, message_id, message_type, fingerprint) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING 1`,
		ClaimSettingLockTimeout: `WITH lt AS (SELECT set_config('lock_timeout', $5, true))
INSERT INTO ` + inbox + ` (consumer, message_id, message_type, fingerprint)
SELECT $1::bytea, $2::bytea, $3::text, $4::bytea FROM lt
ON CONFLICT DO NOTHING RETURNING 1`,
		ClaimPlain: `INSERT INTO ` + inbox + ` (consumer, message_id, message_type, fingerprint) VALUES ($1, $2, $3, $4)`,
		ClaimBatch: `WITH input AS (
	SELECT * FROM unnest($2::bytea[], $3::text[], $4::bytea[]) WITH ORDINALITY AS t(message_id, message_type, fingerprint, n)
), ins AS (
	INSERT INTO ` + inbox + ` (consumer, message_id, message_type, fingerprint)
	SELECT $1, message_id, message_type, fingerprint FROM input ORDER BY n
	ON CONFLICT DO NOTHING RETURNING message_id
)
SELECT input.n, old.fingerprint, coalesce(old.message_type, '')
FROM input LEFT JOIN ins ON ins.message_id = input.message_id
LEFT JOIN LATERAL (
	SELECT fingerprint, message_type FROM ` + inbox + ` o
	WHERE o.consumer = $1 AND o.message_id = input.message_id AND input.fingerprint IS NOT NULL
	OFFSET 0 -- not a join: one probe of the key per duplicate that has a fingerprint to compare
) old ON true
WHERE ins.message_id IS NULL`,
		Unclaim:     `DELETE FROM ` + inbox + ` WHERE consumer = $1 AND message_id = $2`,
		ClaimLookup: `SELECT fingerprint, message_type FROM ` + inbox + ` WHERE consumer = $1 AND message_id = $2`,
		AttemptAdd: `INSERT INTO ` + attempts + ` AS a (consumer, message_id, attempts, transient_failures, last_error, error_group)
VALUES ($1, $2, $4, $5, $3, $6)
ON CONFLICT (consumer, message_id) DO UPDATE
SET attempts = a.attempts + EXCLUDED.attempts, transient_failures = a.transient_failures + EXCLUDED.transient_failures,
	last_failed_at = now(), last_error = EXCLUDED.last_error, error_group = EXCLUDED.error_group
RETURNING attempts, transient_failures`,
		AttemptsDelete: `DELETE FROM ` + attempts + ` WHERE consumer = $1 AND message_id = $2`,
		DeadLetterAdd: `WITH ins AS (
	INSERT INTO ` + inbox + ` (consumer, message_id, message_type, fingerprint, dead) VALUES ($1, $2, $3, $4, true)
	ON CONFLICT DO NOTHING RETURNING true
)
INSERT INTO ` + dead + ` (consumer, message_id, message_type, payload, headers, error, attempts, error_group)
SELECT $1, $2, $3, $5, $6, $7, $8, $9 FROM ins
RETURNING id`,
		DeadInsert: `INSERT INTO ` + inbox + ` (consumer, message_id, message_type, fingerprint, dead) VALUES ($1, $2, $3, $4, true)
ON CONFLICT DO NOTHING RETURNING 1`,
		DeadLetterInsert: `INSERT INTO ` + dead + ` (consumer, message_id, message_type, payload, headers, error, attempts, error_group)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		DeadLetterList: `SELECT ` + DeadLetterColumns + ` FROM ` + dead + `
WHERE consumer = $1 AND id > $2 ORDER BY id LIMIT $3`,
		DeadLetterTake:   `DELETE FROM ` + dead + ` WHERE consumer = $1 AND id = $2 RETURNING ` + DeadLetterColumns,
		DeadLetterGet:    `SELECT ` + DeadLetterColumns + ` FROM ` + dead + ` WHERE consumer = $1 AND id = $2 FOR UPDATE`,
		DeadLetterDelete: `DELETE FROM ` + dead + ` WHERE consumer = $1 AND id = $2`,
		InboxReclaim: `INSERT INTO ` + inbox + ` AS i (consumer, message_id, message_type, fingerprint) VALUES ($1, $2, $3, $4)
ON CONFLICT (consumer, message_id) DO UPDATE SET dead = false WHERE i.dead
RETURNING 1`,
		TryLock:        `SELECT pg_try_advisory_xact_lock($1)`,
		Lock:           `SELECT pg_advisory_xact_lock($1)`,
		TrySessionLock: `SELECT pg_try_advisory_lock($1)`,
		SessionUnlock:  `SELECT pg_advisory_unlock($1)`,
		PruneInbox: `WITH d AS (` + pruneOldest(inbox, "received_at", `received_at >= coalesce($3::timestamptz, '-infinity') AND `) + `
	RETURNING received_at)
SELECT count(*), max(received_at) FROM d`,
		PruneAttempts:    pruneOldest(attempts, "last_failed_at", ""),
		Durability:       durability,
		CreateMigrations: `CREATE TABLE IF NOT EXISTS ` + migrations + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
		AppliedVersions:  `SELECT version FROM ` + migrations,
		SchemaVersion:    `SELECT coalesce(max(version), 0) FROM ` + migrations,
		RecordMigration:  `INSERT INTO ` + migrations + ` (version, name) VALUES ($1, $2)`,
		OutboxWrite:      strings.Replace(outboxWrite, "{outbox}", n.Outbox, 1) + ` FROM (SELECT pg_notify($7, '')) AS notify`,
		OutboxWriteQuiet: strings.Replace(outboxWrite, "{outbox}", n.Outbox, 1),
		OutboxWriteOne: `INSERT INTO ` + n.Outbox + ` (message_id, destination, msg_key, message_type, headers, payload)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (message_id) DO NOTHING`,
		OutboxWriteOneNotify: `WITH notify AS (SELECT pg_notify($7, ''))
INSERT INTO ` + n.Outbox + ` (message_id, destination, msg_key, message_type, headers, payload)
SELECT $1::bytea, $2::text, $3::bytea, $4::text, $5::bytea, $6::bytea FROM notify ON CONFLICT (message_id) DO NOTHING`,
		OutboxClaim:        outboxClaim(n.Outbox, false),
		OutboxClaimOrdered: outboxClaim(n.Outbox, true),
		OutboxDelete:       `DELETE FROM ` + n.Outbox + ` WHERE seq = ANY($1) AND lease_token = $2`,
		OutboxMarkPublished: `UPDATE ` + n.Outbox + ` SET published_at = now(), lease_token = NULL
WHERE seq = ANY($1) AND lease_token = $2`,
		OutboxPrunePublished: `DELETE FROM ` + n.Outbox + ` WHERE seq = ANY(ARRAY(
	SELECT seq FROM ` + n.Outbox + ` WHERE published_at < now() - $1::bigint * interval '1 millisecond'
	ORDER BY published_at LIMIT $2))`,
		OutboxFail: `UPDATE ` + n.Outbox + ` o SET
	attempts = o.attempts + CASE WHEN f.released THEN 0 ELSE 1 END,
	last_error = CASE WHEN f.error = '' THEN o.last_error ELSE f.error END,
	available_at = now() + f.delay * interval '1 millisecond',
	parked_at = CASE WHEN f.park THEN now() END,
	lease_token = NULL
FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::boolean[], $6::boolean[]) AS f(seq, error, delay, park, released)
WHERE o.seq = f.seq AND o.lease_token = $1`,
		OutboxParked: `SELECT ` + OutboxColumns + ` FROM ` + n.Outbox + `
WHERE parked_at IS NOT NULL AND seq > $1 ORDER BY seq LIMIT $2`,
		OutboxUnpark: `UPDATE ` + n.Outbox + ` SET parked_at = NULL, attempts = 0, available_at = now(), lease_token = NULL
WHERE seq = $1 AND parked_at IS NOT NULL`,
		OutboxDiscard: `DELETE FROM ` + n.Outbox + ` WHERE seq = $1 AND parked_at IS NOT NULL`,
		KeyLock: `WITH wait AS (SELECT set_config('lock_timeout', $3, true))
SELECT pg_advisory_xact_lock(('x' || encode(substring(sha256($1::bytea || $2::bytea) FROM 1 FOR 8), 'hex'))::bit(64)::bigint)
FROM wait WHERE NOT EXISTS (SELECT FROM ` + n.Keys + ` WHERE scope = $1 AND idem_key = $2)`,
		KeyClaim: `INSERT INTO ` + n.Keys + ` (scope, idem_key, method, route, fingerprint) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`,
		KeyLookup: `SELECT fingerprint, status, header, body, (extract(epoch FROM created_at) * 1000)::bigint
FROM ` + n.Keys + ` WHERE scope = $1 AND idem_key = $2`,
		KeySave: `UPDATE ` + n.Keys + ` SET status = $3, header = $4, body = $5 WHERE scope = $1 AND idem_key = $2`,
		KeySaveClaimed: `WITH u AS (UPDATE ` + n.Keys + ` SET status = $3, header = $4, body = $5 WHERE scope = $1 AND idem_key = $2 RETURNING 1)
SELECT 1 / count(*) FROM u`,
		KeyPrune: pruneOldest(n.Keys, "created_at", ""),
	}
}

// outboxWrite inserts the rows of the arrays in their order (WITH
// ORDINALITY), so that their sequence numbers follow it.
const outboxWrite = `WITH ins AS (
	INSERT INTO {outbox} (message_id, destination, msg_key, message_type, headers, payload)
	SELECT id, dest, k, typ, h, p
	FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::text[], $5::bytea[], $6::bytea[])
		WITH ORDINALITY AS r(id, dest, k, typ, h, p, n)
	ORDER BY n
	ON CONFLICT (message_id) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM ins)`

// pruneOldest deletes the oldest rows of table, at most $2, whose column
// is older than $1 milliseconds by the database's clock, and that match
// from (a condition ending in AND, or empty). The btree on column yields
// them in order, so a batch reads only its own rows (not every expired
// row, to sort them), and the rows are deleted by ctid, with no second
// lookup through the primary key. A ctid names a row within its
// partition only: the batch is matched by (tableoid, ctid), so that a
// partitioned table loses no row of another partition at the same ctid.
// The age is checked again on the row the delete finds. A row updated
// meanwhile has a new ctid: this batch skips it, and a later one takes it
// if it is still old enough.
func pruneOldest(table, column, from string) string {
	older := column + ` < now() - $1::bigint * interval '1 millisecond'`
	return `WITH batch AS MATERIALIZED (
	SELECT tableoid AS part, ctid AS row FROM ` + table + ` WHERE ` + from + older + `
	ORDER BY ` + column + ` LIMIT $2)
DELETE FROM ` + table + ` WHERE ctid = ANY(ARRAY(SELECT row FROM batch))
	AND (tableoid, ctid) IN (SELECT part, row FROM batch) AND ` + older
}

func lockKey(parts ...string) int64 {
	h := fnv.New64a()
	h.Write([]byte("inboxkit/inbox"))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return int64(h.Sum64())
}

// transientCode reports whether a SQLSTATE is one a later attempt may not
// hit: serialization failure (40001), deadlock (40P01), lock timeout
// (55P03), a connection exception (08xxx), server shutdown (57P01..57P03).
func transientCode(c string) bool {
	switch {
	case c == "40001", c == "40P01", c == "55P03", strings.HasPrefix(c, "08"),
		c == "57P01", c == "57P02", c == "57P03":
		return true
	}
	return false
}

// Transient reports whether err carries a PostgreSQL error that a later
// attempt may not hit, recognized by its SQLSTATE, or a failure to
// connect. It judges a handler's error: a timeout or a network error of
// the handler's own (an HTTP call's deadline) is not PostgreSQL's, and a
// handler's query that left the connection busy is the handler's bug.
func Transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientCode(pgErr.Code)
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) && !Unrecoverable(err)
}

// Conflict reports whether err carries a PostgreSQL lock conflict: a
// serialization failure (40001), a deadlock (40P01) or a lock timeout
// (55P03).
func Conflict(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}

// Deadlock reports whether err carries a transaction PostgreSQL rolled
// back to break a deadlock (40P01) or as a serialization failure (40001).
func Deadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// Unrecoverable reports whether err is a PostgreSQL error that no retry
// fixes: a missing table, column or function (42P01, 42703, 42883), a
// missing schema (3F000) or database (3D000), permission denied (42501),
// credentials refused (28000, 28P01).
func Unrecoverable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P01", "42703", "42883", "3F000", "3D000", "42501", "28000", "28P01":
		return true
	}
	return false
}

// TooLarge reports whether err is PostgreSQL's program_limit_exceeded
// (54000), a value or row beyond one of its limits.
func TooLarge(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "54000"
}

// Classify wraps in *store.RetryableError the errors of the store's own
// statements after which a new attempt may succeed: the Transient
// SQLSTATEs, and a broken or timed-out connection (the outcome of a COMMIT
// is then unknown). Other errors, such as a COMMIT that rolled back an
// aborted transaction or a constraint checked at COMMIT, are returned as
// they are (a value too large wrapped in store.ErrTooLarge): retrying the
// same work will fail the same way.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if transientCode(pgErr.Code) {
			return store.Retryable(err)
		}
		if TooLarge(err) {
			return fmt.Errorf("%w: %w", store.ErrTooLarge, err)
		}
		return err
	}
	if Unrecoverable(err) {
		return err
	}
	var netErr net.Error
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgconn.ErrConnClosed) {
		return store.Retryable(err)
	}
	return err
}

// ErrTxAborted is CheckTx's error for an aborted transaction.
var ErrTxAborted = errors.New("the transaction is aborted: a statement failed and its error was not returned (PostgreSQL rolls back the COMMIT of such a transaction)")

// CheckTxStatus returns ErrTxAborted for the transaction status 'E' (in a
// failed transaction block), as pgconn reports it.
func CheckTxStatus(status byte) error {
	if status == 'E' {
		return ErrTxAborted
	}
	return nil
}

// LockTimeout formats d for lock_timeout ("5000ms"): at least 1 ms, since 0
// would mean no timeout. The default's text is kept.
func LockTimeout(d time.Duration) string {
	if d == defaultLockTimeout {
		return defaultLockTimeoutText
	}
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

const (
	defaultLockTimeout     = store.DefaultLockTimeout
	defaultLockTimeoutText = "5000ms"
)

// sessionLockTimeoutKey marks, in a connection's CustomData, the session
// lock_timeout the inbox set on it.
const sessionLockTimeoutKey = "inboxkit/inbox.lock_timeout"

// SetSessionLockTimeout sets the session lock_timeout of conn to d, once
// per connection: a mark in the connection's CustomData remembers it (it
// goes stale after RESET ALL or DISCARD ALL on the connection).
func SetSessionLockTimeout(ctx context.Context, conn *pgx.Conn, d time.Duration) error {
	want := LockTimeout(d)
	data := conn.PgConn().CustomData()
	if data[sessionLockTimeoutKey] == want {
		return nil
	}
	if _, err := conn.Exec(ctx, setSessionLockTimeout, want); err != nil {
		return err
	}
	data[sessionLockTimeoutKey] = want
	return nil
}

const setSessionLockTimeout = `SELECT set_config('lock_timeout', $1, false)`
