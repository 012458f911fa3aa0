package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ store.KeyStore[*sql.Tx] = (*Driver)(nil)

// KeyBegin opens a transaction and claims the key in it, as
// store.KeyStore tells. The claim waits up to p.Wait for a transaction that
// holds the key: PostgreSQL's lock_timeout, or MySQL's
// innodb_lock_wait_timeout, rounded up to whole seconds. The rest of the
// transaction has p.LockTimeout.
//
// SQLite has one writer at a time. BEGIN IMMEDIATE waits up to
// p.LockTimeout for the write lock, and the transaction that held the key
// has ended by then. So KeyBegin never returns store.ErrKeyInUse there: it
// claims the key or returns the stored one.
//
// On MySQL, racing claims of a key whose holder rolled back may deadlock.
// KeyBegin then begins again, a few times at most, as BeginClaim does.
func (d *Driver) KeyBegin(ctx context.Context, p *store.KeyClaimParams) (*sql.Tx, *store.KeyClaimResult, error) {
	for restarts := 0; ; restarts++ {
		tx, res, err := d.keyBegin(ctx, p)
		if err != nil && restarts < claimRestarts && d.dialect.ClaimDeadlock(err) && ctx.Err() == nil {
			continue // nothing but the claim ran in its transaction
		}
		if errors.Is(err, store.ErrKeyInUse) || err == nil {
			return tx, res, err
		}
		return nil, nil, d.fail("key claim", err)
	}
}

// keyBegin is one attempt of KeyBegin; its errors are not yet classified.
func (d *Driver) keyBegin(ctx context.Context, p *store.KeyClaimParams) (_ *sql.Tx, res *store.KeyClaimResult, err error) {
	wait := p.Wait
	switch {
	case d.q.Keys.WaitAtBegin: // the write lock, taken at BEGIN, is the only wait
		wait = p.LockTimeout
	case d.q.Keys.Lock != "": // Lock sets the wait itself
		wait = p.LockTimeout
	}
	tx, err := d.beginOn(ctx, d.db, wait)
	if err != nil {
		return nil, nil, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil || !res.Claimed {
			d.rollbackQuietly(tx)
		}
	}()
	if err := d.keyWait(ctx, tx, p); err != nil {
		return nil, nil, err
	}
	claimed, err := d.keyClaim(ctx, tx, p)
	// Without Lock and a wait at BEGIN, the claim itself waits for the
	// key's row (MySQL): its lock timeout is the key's.
	claimWaits := d.q.Keys.Lock == "" && !d.q.Keys.WaitAtBegin
	switch {
	case err != nil && claimWaits && d.dialect.Busy(err):
		return nil, nil, fmt.Errorf("sqlstore: %w: %w", store.ErrKeyInUse, err)
	case err != nil:
		return nil, nil, err
	case !claimed:
		stored, err := d.keyLookup(ctx, tx, p.Scope, p.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the stored key: %w", err)
		}
		return nil, &store.KeyClaimResult{Stored: stored}, nil
	}
	if wait != p.LockTimeout {
		if err := d.dialect.SetLockTimeout(ctx, tx, p.LockTimeout); err != nil {
			return nil, nil, fmt.Errorf("set lock timeout: %w", err)
		}
	}
	return tx, &store.KeyClaimResult{Claimed: true}, nil
}

// keyWait runs the dialect's Lock, where it has one: the wait for a claim
// of the key in flight, whose lock timeout alone means ErrKeyInUse.
func (d *Driver) keyWait(ctx context.Context, tx *sql.Tx, p *store.KeyClaimParams) error {
	if d.q.Keys.Lock == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, d.q.Keys.Lock, p.Scope, p.Key, d.q.LockTimeoutText(p.Wait))
	if err != nil && d.dialect.Busy(err) {
		return fmt.Errorf("sqlstore: %w: %w", store.ErrKeyInUse, err)
	}
	if err != nil {
		return err
	}
	return d.dialect.SetLockTimeout(ctx, tx, p.LockTimeout) // Lock left its wait in force
}

// keyClaim inserts the key's row unless it exists, and reports whether it
// did.
func (d *Driver) keyClaim(ctx context.Context, tx *sql.Tx, p *store.KeyClaimParams) (bool, error) {
	r, err := tx.ExecContext(ctx, d.q.Keys.Claim, p.Scope, p.Key, []byte(p.Method), []byte(p.Route), p.Fingerprint)
	if err != nil {
		return false, err
	}
	if d.q.Keys.ClaimMarked {
		return insertedUnlessMarked(r)
	}
	n, err := r.RowsAffected()
	return n == 1, err
}

// keyLookup reads a stored key; nil when it is gone (pruned meanwhile).
func (d *Driver) keyLookup(ctx context.Context, tx *sql.Tx, scope, key []byte) (*store.StoredKey, error) {
	s := &store.StoredKey{}
	var created int64
	err := tx.QueryRowContext(ctx, d.q.Keys.Lookup, scope, key).
		Scan(&s.Fingerprint, &s.Response.Status, &s.Response.Header, &s.Response.Body, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.CreatedAt = time.UnixMilli(created).UTC()
	return s, nil
}

// errKeyNotClaimed is KeyCommit's error when the transaction holds no row
// of the key: it was not claimed in it, or the handler deleted it. Nothing
// is committed.
var errKeyNotClaimed = errors.New("sqlstore: the transaction holds no claim of this idempotency key")

// KeyCommit writes the response into the key's row, then commits tx as
// Commit does. tx is over when it returns, committed or not.
func (d *Driver) KeyCommit(ctx context.Context, tx *sql.Tx, p *store.KeyCommitParams) error {
	defer d.rollbackQuietly(tx) // after Commit: nothing to do
	if d.q.TxAlive != "" {      // PostgreSQL: a handler that ended the transaction block
		if err := d.CheckTx(ctx, tx, ""); err != nil {
			return err
		}
	}
	if err := d.keySave(ctx, tx, p); err != nil {
		return err
	}
	return d.Commit(ctx, tx)
}

// keySave writes the response into the key's row, which must be there.
func (d *Driver) keySave(ctx context.Context, tx *sql.Tx, p *store.KeyCommitParams) error {
	r := p.Response
	args := []any{p.Scope, p.Key, r.Status, nullBytes(r.Header), nullBytes(r.Body)}
	if d.q.Keys.SaveKeyLast {
		args = []any{r.Status, nullBytes(r.Header), nullBytes(r.Body), p.Scope, p.Key}
	}
	n, err := execCount(ctx, tx, d.q.Keys.Save, args...)
	if err != nil {
		if uerr := d.unusable("key commit", err); uerr != nil {
			return uerr
		}
		return d.fail("key commit: saving the response", err)
	}
	if n != 1 {
		return fmt.Errorf("sqlstore: key commit: %w (%d rows updated)", errKeyNotClaimed, n)
	}
	return nil
}

// KeyPrune deletes up to p.Limit keys created more than p.Retention ago,
// by the database's clock, oldest first, in a transaction of its own. One
// pruner of the keys runs at a time, apart from the inbox's: under an
// advisory lock on PostgreSQL, GET_LOCK on MySQL, the write lock on
// SQLite. Busy is reported when another holds it, or when the database was
// busy with another writer past store.DefaultLockTimeout.
func (d *Driver) KeyPrune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := checkPrune(p); err != nil {
		return nil, fmt.Errorf("sqlstore: prune keys: %w", err)
	}
	return d.pruneAlone(ctx, "prune keys", sqldialect.KeysPruner, func(tx *sql.Tx) (*store.PruneResult, error) {
		n, err := execCount(ctx, tx, d.q.Keys.Prune, p.Retention.Milliseconds(), p.Limit)
		return &store.PruneResult{Deleted: n}, err
	})
}
