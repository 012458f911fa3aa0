package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inboxkit/inbox/store"
)

// BatchHandler handles the new messages of a batch together in tx.
//
// It suits one multi-row write for all of them. Its error fails every
// message it was given. [Inbox.ProcessBatchFunc] then calls it again one
// message at a time, to find the ones that fail.
//
// A handler that updates rows that other batches update too should update
// them in a stable order, sorted by key. Two batches then wait for each
// other instead of deadlocking.
type BatchHandler[TTx any] func(ctx context.Context, tx TTx, msgs []*Message) error

// ErrNoBatch is returned by [Inbox.ProcessBatch] for a store that cannot
// claim a batch in one statement.
var ErrNoBatch = errors.New("inbox: the store cannot claim a batch")

// batchSavepoint is the savepoint before each message of a batch's
// second pass.
const batchSavepoint = "inbox_batch_msg"

// ProcessBatch processes msgs in one transaction.
//
// One statement claims every ID. Then h runs for each new message in msgs'
// order, and one COMMIT ends it. ProcessBatch returns an outcome per
// message, in msgs' order, by the rules of Process. Of an ID twice in msgs,
// the first counts.
//
// A failing handler fails only its message. Its failure counts as Process
// counts it. A few failures fail the whole batch, such as an error of the
// inbox's own statements. Every message then gets Retry.
//
// The error is non-nil when nothing of the batch committed. Each message's
// outcome says whether to ack it, with [Outcome.Ack]. Otherwise redeliver it
// after [Outcome.Delay]. Hooks are told after the COMMIT.
//
// A handler must not commit or roll back tx, as [ErrTxEndedByHandler]
// tells. The package's sections "Batches" and "Transactions handlers must
// not end" tell the rest.
func (ib *Inbox[TTx]) ProcessBatch(ctx context.Context, msgs []Message, h Handler[TTx]) ([]Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return retryAll(len(msgs)), err
	}
	return ib.processBatch(ctx, msgs, ib.eachRun(h), nil)
}

// eachRun runs h for each message, in order.
func (ib *Inbox[TTx]) eachRun(h Handler[TTx]) batchRun[TTx] {
	return func(ctx context.Context, tx TTx, ms []*Message) (int, error) {
		for i, m := range ms {
			hctx := ctx
			if len(ib.hooks.start) > 0 {
				hctx = messageCtx(ctx, m)
			}
			if err := safely(func() error { return h(hctx, tx, m) }); err != nil {
				return i, err
			}
		}
		return len(ms), nil
	}
}

// ProcessBatchFunc is ProcessBatch with one handler for all the new
// messages of the batch.
//
// When h fails, it is called again with one message at a time, each behind
// a savepoint, to find the failing ones. A handler given several messages
// that commits tx commits all their claims. The inbox cannot tell which
// messages it wrote before.
func (ib *Inbox[TTx]) ProcessBatchFunc(ctx context.Context, msgs []Message, h BatchHandler[TTx]) ([]Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return retryAll(len(msgs)), err
	}
	return ib.processBatch(ctx, msgs, ib.batchFuncRun(h), nil)
}

// batchFuncRun runs h for all the messages at once.
func (ib *Inbox[TTx]) batchFuncRun(h BatchHandler[TTx]) batchRun[TTx] {
	return func(ctx context.Context, tx TTx, ms []*Message) (int, error) {
		if len(ms) == 1 && len(ib.hooks.start) > 0 {
			ctx = messageCtx(ctx, ms[0])
		}
		return len(ms), safely(func() error { return h(ctx, tx, ms) }) // which messages it finished, it cannot tell
	}
}

// batchRun runs the handler for ms in tx and returns how many of ms it
// finished before its error (all when it cannot tell).
type batchRun[TTx any] func(ctx context.Context, tx TTx, ms []*Message) (int, error)

// splitFunc is told that n messages run together met a lock conflict,
// err, and returns how many to run together from then on (at least 1).
type splitFunc func(ctx context.Context, n int, err error) int

// conflictError: a pass without savepoints met a lock conflict, and
// nothing of it committed.
type conflictError struct{ err error }

func (e *conflictError) Error() string { return "inbox: lock conflict in a batch: " + e.err.Error() }
func (e *conflictError) Unwrap() error { return e.err }

// conflict reports whether err is a lock conflict with another
// transaction (store.ConflictReporter), or else any transient database
// error.
func (ib *Inbox[TTx]) conflict(err error) bool {
	if c, ok := ib.driver.(store.ConflictReporter); ok {
		return c.Conflict(err)
	}
	return ib.driver.Retryable(err)
}

// messageCtxKey carries, in a batch's context, the context that the start
// hooks made for each message.
type messageCtxKey struct{}

// messageCtx returns the context the start hooks made for m, or ctx.
func messageCtx(ctx context.Context, m *Message) context.Context {
	if byMsg, ok := ctx.Value(messageCtxKey{}).(map[*Message]context.Context); ok {
		if c := byMsg[m]; c != nil {
			return c
		}
	}
	return ctx
}

func retryAll(n int) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i] = Outcome{Status: Retry}
	}
	return out
}

// batchItem is one distinct, valid message of a batch.
type batchItem struct {
	idx  int // in msgs
	msg  *Message
	p    store.ClaimParams
	res  store.ClaimResult
	out  Outcome
	err  error
	done bool // out is settled
	// settled: out is final, later passes leave the item out (a handler
	// that ended the transaction, a failure recorded in it).
	settled bool
}

// processBatch is ProcessBatch with run for the handler. With split, a
// batch that meets a lock conflict runs again in parts of the size split
// returns (see runBatch).
func (ib *Inbox[TTx]) processBatch(ctx context.Context, msgs []Message, run batchRun[TTx], split splitFunc) ([]Outcome, error) {
	bc, ok := ib.driver.(store.BatchClaimer[TTx])
	if !ok {
		return retryAll(len(msgs)), fmt.Errorf("%w (%T)", ErrNoBatch, ib.driver)
	}
	start := time.Now()
	var mctx []context.Context // the start hooks' context of each message
	if len(ib.hooks.start) > 0 {
		mctx = make([]context.Context, len(msgs))
		byMsg := make(map[*Message]context.Context, len(msgs))
		for i := range msgs {
			mctx[i] = ib.hooks.started(ctx, ib.cfg.Consumer, &msgs[i])
			byMsg[&msgs[i]] = mctx[i]
		}
		ctx = context.WithValue(ctx, messageCtxKey{}, byMsg)
	}
	msgCtx := func(i int) context.Context {
		if mctx == nil {
			return ctx
		}
		return mctx[i]
	}
	outs := make([]Outcome, len(msgs))
	errs := make([]error, len(msgs))
	valid := make([]batchItem, 0, len(msgs)) // one allocation for the batch
	items := make([]*batchItem, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if err := m.validate(ib.cfg.ScopeIDByType); err != nil {
			outs[i], errs[i] = ib.invalidMessage(msgCtx(i), nil, m, err)
			continue
		}
		valid = append(valid, batchItem{idx: i, msg: m, p: ib.claimValue(m)})
		items = append(items, &valid[len(valid)-1])
	}
	// In key order, the claim's; the first of the batch counts, later
	// copies of its ID are duplicates.
	slices.SortFunc(items, func(a, b *batchItem) int {
		if c := bytes.Compare(a.p.MessageID, b.p.MessageID); c != 0 {
			return c
		}
		return a.idx - b.idx
	})
	kept := items[:0]
	var again []*batchItem // later copies, duplicates of their first
	for _, it := range items {
		if len(kept) > 0 && bytes.Equal(it.p.MessageID, kept[len(kept)-1].p.MessageID) {
			first := kept[len(kept)-1]
			outs[it.idx] = Outcome{Status: Duplicate}
			it.res = store.ClaimResult{Fingerprint: first.p.Fingerprint, Type: first.p.Type} // for a conflict
			again = append(again, it)
			continue
		}
		kept = append(kept, it)
	}
	items = kept
	var batchErr error
	if len(items) > 0 {
		batchErr = ib.runBatch(ctx, bc, items, run, split)
	}
	byIdx := make([]*batchItem, len(msgs))
	for _, it := range items {
		outs[it.idx], errs[it.idx] = it.out, it.err
		byIdx[it.idx] = it
	}
	for _, it := range again {
		byIdx[it.idx] = it
	}
	for i := range msgs {
		if batchErr == nil && errors.Is(errs[i], ErrUnrecoverable) { // an invalid message's dead letter, say
			batchErr = errs[i]
		}
		pr := &processing{msg: &msgs[i], start: start}
		if it := byIdx[i]; it != nil && outs[i].Status == Duplicate && conflicts(it.res.Fingerprint, it.p.Fingerprint) {
			pr.claim = &it.p
			outs[i] = ib.duplicate(msgCtx(i), pr, &it.res) // reports the conflict
		}
		outs[i], _ = ib.finish(msgCtx(i), pr, outs[i], errs[i])
	}
	return outs, batchErr
}

// runBatch runs items, sorted by key, in one transaction. With split, a
// transaction of several items that meets a lock conflict is rolled back
// and its items run again in parts of the size split returns, in msgs'
// order, each part in a transaction of its own; nothing counts as failed.
// The items of parts not run after a part's error get that error.
func (ib *Inbox[TTx]) runBatch(ctx context.Context, bc store.BatchClaimer[TTx], items []*batchItem, run batchRun[TTx], split splitFunc) error {
	if split == nil {
		return ib.runPart(ctx, bc, items, run, false)
	}
	inOrder := slices.Clone(items)
	slices.SortFunc(inOrder, func(a, b *batchItem) int { return a.idx - b.idx })
	size := len(items)
	for rest := inOrder; len(rest) > 0; {
		part := items // in key order already
		if size < len(items) {
			part = slices.Clone(rest[:min(size, len(rest))])
			slices.SortFunc(part, func(a, b *batchItem) int { return bytes.Compare(a.p.MessageID, b.p.MessageID) })
		}
		err := ib.runPart(ctx, bc, part, run, len(part) > 1)
		if c := (*conflictError)(nil); errors.As(err, &c) {
			size = split(ctx, len(part), c.err)
			continue
		}
		rest = rest[len(part):]
		if err != nil { // the rest did not run: Retry, after the part's delay
			delay := ib.retryNow().Delay
			for _, it := range part {
				if it.out.Status == Retry && it.out.Attempts == 0 && it.out.Err == nil {
					delay = it.out.Delay // the database's failure, not a message's
					break
				}
			}
			for _, it := range rest {
				it.out, it.err = Outcome{Status: Retry, Delay: delay}, err
			}
			return err
		}
	}
	return nil
}

// runPart runs items in one transaction, then, if a message failed, in
// passes with a savepoint before each message, to find the failing ones.
// With mayConflict, a lock conflict in the first pass returns a
// *conflictError and nothing else (see batchPass).
func (ib *Inbox[TTx]) runPart(ctx context.Context, bc store.BatchClaimer[TTx], items []*batchItem, run batchRun[TTx], mayConflict bool) error {
	ok, err := ib.batchPass(ctx, bc, items, run, false, mayConflict)
	if c := (*conflictError)(nil); errors.As(err, &c) {
		return err
	}
	// A pass with savepoints that returns false settled the handler that
	// ended its transaction: the next goes on without it.
	for pass := slices.Clone(items); err == nil && !ok; {
		if pass = slices.DeleteFunc(pass, func(it *batchItem) bool { return it.settled }); len(pass) == 0 {
			break
		}
		ok, err = ib.batchPass(ctx, bc, pass, run, true, false)
	}
	return err
}

// batchPass runs the batch in one transaction: without savepoints (the
// first pass; false when a message failed, nothing committed), or with one
// before each message (the second), whose failures it records (false when
// a handler ended the transaction: see handlerEnded). It sets each item's
// outcome; an error fails the whole batch (every item Retry).
//
// With mayConflict (a first pass only), a lock conflict of a handler or
// of the COMMIT rolls back and returns a *conflictError, setting no
// outcome. Without, a handler's is the failure of its message, which the
// pass with savepoints finds, and the COMMIT's fails the batch.
func (ib *Inbox[TTx]) batchPass(ctx context.Context, bc store.BatchClaimer[TTx], items []*batchItem, run batchRun[TTx], isolate, mayConflict bool) (bool, error) {
	for _, it := range items { // what an earlier pass settled, this one settles again
		it.done = false
	}
	fail := func(op string, err error) (bool, error) {
		out, err := ib.dbFailed(ctx, op, err)
		for _, it := range items {
			if !it.done {
				it.out, it.err = out, err
			}
		}
		return true, err
	}
	params := make([]store.ClaimParams, len(items))
	for i, it := range items {
		params[i] = it.p
	}
	p := &store.ClaimBatchParams{Claims: params, LockTimeout: ib.cfg.LockTimeout}
	var tx TTx
	var res []store.ClaimResult
	if bb, ok := bc.(store.BatchBeginner[TTx]); ok { // one round trip
		var err error
		if tx, res, err = bb.BeginClaimBatch(ctx, p); err != nil {
			return fail("batch claim", err)
		}
	} else {
		var err error
		if tx, err = ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout}); err != nil {
			return fail("batch: begin", err)
		}
		if res, err = bc.ClaimBatch(ctx, tx, p); err != nil {
			_ = ib.driver.Rollback(ctx, tx)
			return fail("batch claim", err)
		}
	}
	ib.health.ok(ctx)
	var fresh []*batchItem // claimed by this transaction, in msgs' order
	for i, it := range items {
		it.res = res[i]
		if !res[i].Claimed {
			it.out, it.err, it.done = Outcome{Status: Duplicate}, nil, true
			continue
		}
		fresh = append(fresh, it)
	}
	slices.SortFunc(fresh, func(a, b *batchItem) int { return a.idx - b.idx })
	if !isolate {
		ms := make([]*Message, len(fresh))
		for i, it := range fresh {
			ms[i] = it.msg
		}
		n, herr := run(ctx, tx, ms)
		if ctx.Err() != nil {
			_ = ib.driver.Rollback(ctx, tx)
			return fail("batch", ctx.Err())
		}
		// After a handler's error too: the check tells whether a handler
		// ended tx.
		if cerr := ib.driver.CheckTx(ctx, tx, ""); herr != nil || cerr != nil {
			_ = ib.driver.Rollback(ctx, tx)
			if errors.Is(cerr, store.ErrTxDone) {
				// A handler committed or rolled back tx. A COMMIT committed
				// the claims of the whole batch: undo those of the messages
				// whose handlers did not run before it, or they are lost.
				// The messages whose handlers did are Duplicates in the
				// next pass, which finds the handler if it ends tx again.
				if err := ib.unclaim(ctx, bc, notRun(fresh, n, herr, cerr)); err != nil {
					return fail("batch: unclaim", err)
				}
				return false, nil
			}
			if mayConflict && herr != nil && ib.conflict(herr) {
				return false, &conflictError{herr}
			}
			return false, nil // find the failing messages with savepoints
		}
	} else {
		for i, it := range fresh {
			if err := bc.Savepoint(ctx, tx, batchSavepoint); err != nil {
				_ = ib.driver.Rollback(ctx, tx)
				return fail("batch savepoint", err)
			}
			_, herr := run(ctx, tx, []*Message{it.msg})
			if herr == nil {
				if herr = ib.driver.CheckTx(ctx, tx, batchSavepoint); herr == nil {
					it.out = Outcome{Status: Processed}
					continue
				}
				if errors.Is(herr, store.ErrTxDone) && ctx.Err() == nil { // database/sql ends a transaction whose ctx ended
					return ib.handlerEnded(ctx, bc, fresh, i, herr, fail)
				}
				herr = fmt.Errorf("inbox: the handler returned no error, but: %w", herr)
			}
			if ctx.Err() != nil || errors.Is(herr, store.ErrTxUnusable) {
				// Shutting down, or tx cannot go on: retry the batch.
				_ = ib.driver.Rollback(ctx, tx)
				if errors.Is(herr, store.ErrTxUnusable) { // count it, or it comes back for ever
					it.out, it.err = ib.failed(ctx, nil, it.msg, &it.p, herr)
					it.done = true
				}
				return fail("batch handler", store.Retryable(herr))
			}
			if err := ib.driver.RollbackToSavepoint(ctx, tx, batchSavepoint); err != nil {
				if errors.Is(err, store.ErrTxDone) {
					return ib.handlerEnded(ctx, bc, fresh, i, herr, fail)
				}
				_ = ib.driver.Rollback(ctx, tx)
				if errors.Is(err, store.ErrTxRestarted) {
					// The server ended the transaction with the messages
					// processed before this one: retry the batch, and count
					// this message's failure, or it comes back for ever.
					it.out, it.err = ib.failed(ctx, nil, it.msg, &it.p, herr)
					it.done = true
					return fail("batch handler", store.Retryable(herr))
				}
				return fail("batch: rollback to savepoint", err)
			}
			if err := bc.Unclaim(ctx, tx, it.p.Key); err != nil {
				_ = ib.driver.Rollback(ctx, tx)
				return fail("batch: unclaim", err)
			}
			// A transient failure (a deadlock of the handler's queries:
			// PostgreSQL undid the savepoint's subtransaction, and MySQL
			// the whole transaction, which RollbackToSavepoint said above)
			// counts as one for this message alone.
			out, keep, rerr := ib.recordFailure(ctx, tx, ib.failure(it.msg, &it.p, herr), nil)
			var refused *payloadRefusedError
			switch {
			case errors.As(rerr, &refused): // a dead letter too large: kept without its payload, in a transaction of its own
				_ = ib.driver.Rollback(ctx, tx)
				it.out, it.err = ib.failed(ctx, nil, it.msg, &it.p, herr)
				it.done = true
				return fail("batch", store.Retryable(errors.New("inbox: batch rolled back to keep a dead letter apart")))
			case !keep && out.Status != Duplicate: // the database failed
				_ = ib.driver.Rollback(ctx, tx)
				return fail("batch: recording a failure", rerr)
			}
			it.out, it.err = out, rerr
		}
	}
	if err := ib.driver.Commit(ctx, tx); err != nil {
		_ = ib.driver.Rollback(ctx, tx)
		if mayConflict && ib.conflict(err) { // a serialization failure
			return false, &conflictError{err}
		}
		if IsRetryable(err) || isolate {
			for _, it := range fresh {
				it.done = false
			}
			return fail("batch commit", err)
		}
		return false, nil // a COMMIT refused for the handlers' doing: isolate them
	}
	for _, it := range fresh {
		if !isolate {
			it.out = Outcome{Status: Processed}
		}
		it.done = true
	}
	return true, nil
}

// handlerEnded settles a pass with savepoints whose handler of fresh[i]
// committed or rolled back tx. Its failure counts (in a transaction of its
// own), and the pass returns false: the next goes on without it. The
// claims of the messages after it, which a COMMIT committed without their
// writes, are deleted. The messages processed before it are Duplicates in
// the next pass if tx committed, or processed again; those whose failure
// tx recorded are settled, as recorded (a dead letter that may not have
// committed: Retry).
func (ib *Inbox[TTx]) handlerEnded(ctx context.Context, bc store.BatchClaimer[TTx], fresh []*batchItem, i int, herr error, fail func(string, error) (bool, error)) (bool, error) {
	it := fresh[i]
	it.out, it.err = ib.failed(ctx, nil, it.msg, &it.p, txEndedError(herr))
	it.done, it.settled = true, true
	for _, b := range fresh[:i] {
		if b.out.Status == DeadLettered {
			b.out = ib.retryNow()
		}
		b.done, b.settled = b.out.Status != Processed, b.out.Status != Processed
	}
	if err := ib.unclaim(ctx, bc, fresh[i+1:]); err != nil {
		return fail("batch: unclaim", err)
	}
	return false, nil
}

// notRun returns the items of fresh whose handlers did not run in a
// transaction that a handler ended: those after the n that finished, and
// the one that failed (herr) if it failed for using the ended transaction.
func notRun(fresh []*batchItem, n int, herr, ended error) []*batchItem {
	if n >= len(fresh) {
		return nil
	}
	if herr != nil && !usedEndedTx(herr, ended) {
		n++ // it ran, and may be the one that ended tx
	}
	return fresh[n:]
}

// usedEndedTx reports whether herr is the error of a statement run in a
// transaction already over: the driver's own error (sql.ErrTxDone,
// pgx.ErrTxClosed) that ended, a store method's error, wraps with
// store.ErrTxDone.
func usedEndedTx(herr, ended error) bool {
	if errors.Is(herr, store.ErrTxDone) {
		return true
	}
	switch e := ended.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range e.Unwrap() {
			if usedEndedTx(herr, e) {
				return true
			}
		}
		return false
	case interface{ Unwrap() error }:
		return usedEndedTx(herr, e.Unwrap())
	}
	return ended != nil && errors.Is(herr, ended)
}

// unclaim deletes the claims of its in a transaction of its own.
func (ib *Inbox[TTx]) unclaim(ctx context.Context, bc store.BatchClaimer[TTx], its []*batchItem) error {
	if len(its) == 0 {
		return nil
	}
	tx, err := ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout})
	if err != nil {
		return err
	}
	for _, it := range its {
		if err := bc.Unclaim(ctx, tx, it.p.Key); err != nil {
			_ = ib.driver.Rollback(ctx, tx)
			return err
		}
	}
	return ib.driver.Commit(ctx, tx)
}
