package store

import (
	"context"
	"errors"
	"time"
)

// The idempotency keys' table, Tables.Prefix+"idempotency_keys", holds one
// row per HTTP request that carried an Idempotency-Key header and whose
// response was stored. Its primary key is (scope, idem_key). The row is
// inserted in the transaction that runs the request's handler, and the
// response is written into it before that transaction commits. So a
// committed row always holds a response, and a rolled-back handler leaves
// no row behind.

// KeyStore is what package idempotency needs of a database. Its methods
// claim a request's key in the transaction that runs the handler, store the
// response there, and prune old keys.
type KeyStore[TTx any] interface {
	Schema
	// Begin opens a transaction without a key, as [Driver.Begin] does. It is
	// for a request that carries none where the key is optional.
	Begin(ctx context.Context, p *BeginParams) (TTx, error)
	// Rollback rolls tx back, as [Driver.Rollback] does.
	Rollback(ctx context.Context, tx TTx) error
	// Commit commits tx, as [Driver.Commit] does.
	Commit(ctx context.Context, tx TTx) error

	// KeyBegin opens a transaction and claims p's key in it.
	//
	// When no committed row holds the key, it inserts one and returns the
	// transaction open, with Claimed true. Its lock timeout is then
	// p.LockTimeout.
	//
	// When a committed row holds the key, it reads the row, rolls the
	// transaction back and returns the row in Stored, with a zero TTx.
	//
	// When another transaction holds the key uncommitted for longer than
	// p.Wait, it rolls back and returns an error wrapping [ErrKeyInUse]. If
	// that transaction rolls back within p.Wait, the claim goes on as if
	// there had been no row. A database with one writer at a time (SQLite)
	// waits for its write lock at BEGIN instead, up to p.LockTimeout, and
	// never returns ErrKeyInUse.
	KeyBegin(ctx context.Context, p *KeyClaimParams) (TTx, *KeyClaimResult, error)

	// KeyCommit writes p.Response into the row of p's key, claimed in tx,
	// then commits tx. Its errors are those of [Driver.Commit].
	KeyCommit(ctx context.Context, tx TTx, p *KeyCommitParams) error

	// KeyPrune deletes up to p.Limit rows created more than p.Retention ago,
	// by the database's clock, oldest first. It reports how many it deleted.
	// When another pruner holds the table, it deletes nothing and reports
	// Busy. p.From is ignored.
	KeyPrune(ctx context.Context, p *PruneParams) (*PruneResult, error)
}

// ErrKeyInUse is wrapped by [KeyStore.KeyBegin]'s error when another
// transaction holds the key and did not end within the wait.
var ErrKeyInUse = errors.New("inbox store: another transaction holds this idempotency key")

// KeyClaimParams are the parameters of [KeyStore.KeyBegin].
type KeyClaimParams struct {
	// Scope is a digest of who sent the request and to what: its principal,
	// method and route. It is 32 bytes. Two scopes never share a key.
	Scope []byte
	// Key is the Idempotency-Key's value, 1 to [MaxKeyLength] bytes.
	Key []byte
	// Method and Route are kept in the row for operators, as they are. The
	// principal is kept only in Scope's digest.
	Method, Route string
	// Fingerprint is a digest of the request, compared with the stored one
	// by the caller.
	Fingerprint []byte
	// Wait bounds the wait for another transaction that holds the key. The
	// databases take what they can: whole milliseconds, at least 1, on
	// PostgreSQL; whole seconds rounded up, at least 1, on MySQL.
	Wait time.Duration
	// LockTimeout is the lock timeout for the rest of the transaction, where
	// the handler runs.
	LockTimeout time.Duration
}

// MaxKeyLength is the longest key the table takes, in bytes.
const MaxKeyLength = 255

// KeyCommitParams are the parameters of [KeyStore.KeyCommit].
type KeyCommitParams struct {
	// Scope and Key are those of the claim.
	Scope, Key []byte
	// Response is the response to store.
	Response KeyResponse
}

// KeyClaimResult is what [KeyStore.KeyBegin] found.
type KeyClaimResult struct {
	// Claimed is true when the key was claimed, and the transaction is open.
	Claimed bool
	// Stored is the committed row that holds the key, when not Claimed. It
	// is nil when that row was pruned between the claim and its read.
	Stored *StoredKey
}

// StoredKey is a committed row of the idempotency keys' table.
type StoredKey struct {
	// Fingerprint is the fingerprint of the request that stored it.
	Fingerprint []byte
	// Response is the response stored.
	Response KeyResponse
	// CreatedAt is when the key was claimed, by the database's clock.
	CreatedAt time.Time
}

// KeyResponse is a response stored with its key.
type KeyResponse struct {
	// Status is the HTTP status code.
	Status int
	// Header is the stored header fields, encoded by package idempotency.
	// The store keeps it as it is.
	Header []byte
	// Body is the response's body.
	Body []byte
}
