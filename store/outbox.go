package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The outbox's table, Tables.Prefix+"outbox", holds the messages a
// transaction wrote to be published, until a relay has published them:
// published rows are deleted, so that the table stays as small as the
// backlog. A row is due when its available_at (database clock) has passed
// and it is not parked; a relay leases due rows by moving available_at
// past the lease and stamping its token, so that rows whose relay died
// become due again when the lease runs out.

// Schema tells the schema version the tables are at, and the one the code
// needs. The code needs the last of Migrations.
type Schema interface {
	// SchemaVersion returns the highest migration version applied, 0 when
	// the tables were never migrated.
	SchemaVersion(ctx context.Context) (int, error)
	// Migrations returns the migrations, in order.
	Migrations() []Migration
}

// OutboxWriter writes outbox rows in the caller's transaction.
type OutboxWriter[TTx any] interface {
	Schema
	// OutboxWrite inserts rows in tx, in their order, and returns how many it
	// inserted. The rows are available at once, by the database's clock. Their
	// sequence numbers increase in that order. A row whose ID is already in the
	// table is skipped.
	OutboxWrite(ctx context.Context, tx TTx, rows []*OutboxRow) (int, error)
}

// OutboxRelayer is what the relay needs. Each method runs in a transaction
// of its own.
type OutboxRelayer interface {
	Schema
	// Unrecoverable reports whether err, returned by one of these methods, is
	// one that no retry fixes, as [Driver.Unrecoverable] tells.
	Unrecoverable(err error) bool
	// OutboxClaim leases up to p.Limit due rows, oldest available first, and
	// returns them. It sets their available_at to now + p.Lease and their token
	// to p.Token. It skips rows another relay is claiming at the same moment,
	// with SKIP LOCKED or the database's single writer.
	//
	// With p.Ordered, it returns a row only if no unpublished row of the same
	// non-empty key has a lower sequence number. A parked or leased older row
	// holds it back. One marked published does not.
	OutboxClaim(ctx context.Context, p *OutboxClaimParams) ([]*OutboxRecord, error)
	// OutboxDelete deletes the rows of seqs that are still leased by
	// token, after their publication, and returns how many it deleted.
	// A row whose lease ran out and that another relay claimed is left to
	// that relay, which publishes it again.
	OutboxDelete(ctx context.Context, token []byte, seqs []int64) (int, error)
	// OutboxMarkPublished is OutboxDelete that keeps the rows, marked
	// published. They are never claimed again. OutboxPrunePublished deletes
	// them later.
	OutboxMarkPublished(ctx context.Context, token []byte, seqs []int64) (int, error)
	// OutboxPrunePublished deletes at most limit rows marked published more
	// than age ago, oldest first, and returns how many it deleted. Age is by
	// the database's clock.
	OutboxPrunePublished(ctx context.Context, age time.Duration, limit int) (int, error)
	// OutboxFail records failed publications of rows still leased by token.
	// Each counts one attempt and keeps its error when not empty. It becomes due
	// after its Delay, or is parked. A parked row is never claimed again until
	// unparked. A Released one counts no attempt.
	OutboxFail(ctx context.Context, token []byte, fails []OutboxFailure) error
	// OutboxParked lists parked rows in sequence order, after p.AfterSeq.
	OutboxParked(ctx context.Context, p *OutboxListParams) ([]*OutboxRecord, error)
	// OutboxUnpark makes a parked row due again with its attempts reset. It
	// returns [ErrNotFound] when no parked row has that sequence number.
	OutboxUnpark(ctx context.Context, seq int64) error
	// OutboxDiscard deletes a parked row. It returns [ErrNotFound] when no
	// parked row has that sequence number. The row's ID may then be written
	// again.
	OutboxDiscard(ctx context.Context, seq int64) error
}

// OutboxListener is implemented by drivers whose database may tell a relay
// that rows were committed. The relay then need not poll. PostgreSQL's
// LISTEN/NOTIFY does this, and fires at COMMIT.
type OutboxListener interface {
	// OutboxListen starts listening. Wait on the result returns when rows may
	// have been committed since the last Wait, or when ctx is done. An error
	// wrapping [ErrNoNotifications] means that this database, dialect or driver
	// cannot. It may also mean the pool is too small, with [ErrPoolTooSmall].
	// The relay then polls.
	OutboxListen(ctx context.Context) (OutboxNotifications, error)
}

// ErrNoNotifications is wrapped by OutboxListen's error where the database
// cannot tell relays of new rows.
var ErrNoNotifications = errors.New("inbox store: the database cannot tell relays of new outbox rows")

// ErrPoolTooSmall is wrapped by OutboxListen's error when the pool has at
// most one connection. LISTEN would hold it for good, and every other
// statement on the pool would wait for ever. It wraps [ErrNoNotifications].
// The relay polls instead, and says so.
var ErrPoolTooSmall = fmt.Errorf("%w: the pool has at most one connection, which LISTEN would hold", ErrNoNotifications)

// OutboxNotifications delivers the notifications of OutboxListen.
type OutboxNotifications interface {
	// Wait blocks until a notification, ctx's end or a broken connection. It
	// returns nil for a notification, and ctx's error at ctx's end. After a
	// broken connection it returns an error, and the caller listens again.
	Wait(ctx context.Context) error
	// Close stops listening and gives the connection back.
	Close() error
}

// OutboxRow is one message to publish, as written.
type OutboxRow struct {
	// ID is the message's ID, 1 to 1024 bytes, unique in the table.
	ID []byte
	// Destination is where to publish, such as a topic, subject, queue or
	// routing key. It is valid UTF-8 without NUL bytes.
	Destination string
	// Key orders and partitions, as opaque bytes. It orders with
	// OutboxClaimParams.Ordered. Empty means none.
	Key []byte
	// Type is the optional message type, valid UTF-8 without NUL bytes.
	Type string
	// Headers are encoded by package outbox. They are nil when there are none.
	Headers []byte
	Payload []byte
}

// OutboxRecord is a stored outbox row.
type OutboxRecord struct {
	OutboxRow
	// Seq is the row's sequence number.
	Seq int64
	// Attempts counts the failed publications so far.
	Attempts int
	// LastError is the last failure's error, empty if none.
	LastError string
	// CreatedAt is when the row was written, by the database's clock.
	CreatedAt time.Time
	// ParkedAt is when the row was parked. It is zero if it is not.
	ParkedAt time.Time
}

// OutboxClaimParams are the parameters of OutboxRelayer.OutboxClaim.
type OutboxClaimParams struct {
	// Limit is the most rows returned, at least 1.
	Limit int
	// Lease is how long the rows stay with this relay, at least 1 ms.
	Lease time.Duration
	// Token identifies this claim, as 16 random bytes.
	Token []byte
	// Ordered keeps each key's rows in sequence order.
	Ordered bool
}

// OutboxFailure is one row's failed publication.
type OutboxFailure struct {
	Seq int64
	// Error is the failure, valid UTF-8 without NUL bytes.
	Error string
	// Delay is how long until the row is due again.
	Delay time.Duration
	// Park parks the row instead.
	Park bool
	// Released gives the row back without counting an attempt. The relay ran
	// out of its lease before publishing it, and there is no Error. Or the
	// broker is down, and the Error is kept.
	Released bool
}

// OutboxListParams are the parameters of OutboxRelayer.OutboxParked.
type OutboxListParams struct {
	// AfterSeq lists rows whose Seq is greater. A value of 0 starts at the
	// first.
	AfterSeq int64
	// Limit is the most returned, at least 1.
	Limit int
}
