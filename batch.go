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

// itemState is how far the passes of a batch have settled an item.
type itemState uint8

const (
	pending itemState = iota // this pass has not set the item's outcome yet
	decided                  // out is this pass's outcome
	settled                  // out is final: later passes leave the item out
)

// batchItem is one distinct, valid message of a batch.
type batchItem struct {
	idx   int // in msgs
	msg   *Message
	p     store.ClaimParams
	res   store.ClaimResult
	out   Outcome
	err   error
	state itemState
}

// batch is one ProcessBatch call: its messages, their outcomes, and the
// items of the valid ones.
type batch struct {
	ctx   context.Context // carries the start hooks' contexts (messageCtx)
	start time.Time
	msgs  []Message
	mctx  []context.Context // the start hooks' context of each message, nil without start hooks
	outs  []Outcome
	errs  []error
	items []*batchItem // the first of each ID, in key order
	again []*batchItem // later copies of an ID: duplicates of its first
}

// msgCtx is the context the start hooks made for msgs[i].
func (b *batch) msgCtx(i int) context.Context {
	if b.mctx == nil {
		return b.ctx
	}
	return b.mctx[i]
}

// processBatch is ProcessBatch with run for the handler. With split, a
// batch that meets a lock conflict runs again in parts of the size split
// returns (see runBatch).
func (ib *Inbox[TTx]) processBatch(ctx context.Context, msgs []Message, run batchRun[TTx], split splitFunc) ([]Outcome, error) {
	bc, ok := ib.driver.(store.BatchClaimer[TTx])
	if !ok {
		return retryAll(len(msgs)), fmt.Errorf("%w (%T)", ErrNoBatch, ib.driver)
	}
	b := ib.newBatch(ctx, msgs)
	var err error
	if len(b.items) > 0 {
		err = ib.runBatch(b.ctx, bc, b.items, run, split)
	}
	return ib.finishBatch(b, err)
}

// newBatch tells the start hooks of msgs and dead-letters the invalid
// ones. The valid ones become the batch's items.
func (ib *Inbox[TTx]) newBatch(ctx context.Context, msgs []Message) *batch {
	b := &batch{ctx: ctx, start: time.Now(), msgs: msgs,
		outs: make([]Outcome, len(msgs)), errs: make([]error, len(msgs))}
	if len(ib.hooks.start) > 0 {
		b.mctx = make([]context.Context, len(msgs))
		byMsg := make(map[*Message]context.Context, len(msgs))
		for i := range msgs {
			b.mctx[i] = ib.hooks.started(ctx, ib.cfg.Consumer, &msgs[i])
			byMsg[&msgs[i]] = b.mctx[i]
		}
		b.ctx = context.WithValue(ctx, messageCtxKey{}, byMsg)
	}
	valid := make([]batchItem, 0, len(msgs)) // one allocation for the batch
	items := make([]*batchItem, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if err := m.validate(ib.cfg.ScopeIDByType); err != nil {
			b.outs[i], b.errs[i] = ib.invalidMessage(b.msgCtx(i), nil, m, err)
			continue
		}
		valid = append(valid, batchItem{idx: i, msg: m, p: ib.claimValue(m)})
		items = append(items, &valid[len(valid)-1])
	}
	b.keepFirsts(items)
	return b
}

// keepFirsts sorts items in key order, the claim's. The first of an ID
// counts, and later copies are duplicates.
func (b *batch) keepFirsts(items []*batchItem) {
	slices.SortFunc(items, func(x, y *batchItem) int {
		if c := bytes.Compare(x.p.MessageID, y.p.MessageID); c != 0 {
			return c
		}
		return x.idx - y.idx
	})
	kept := items[:0]
	for _, it := range items {
		if len(kept) > 0 && bytes.Equal(it.p.MessageID, kept[len(kept)-1].p.MessageID) {
			first := kept[len(kept)-1]
			b.outs[it.idx] = Outcome{Status: Duplicate}
			it.res = store.ClaimResult{Fingerprint: first.p.Fingerprint, Type: first.p.Type} // for a conflict
			b.again = append(b.again, it)
			continue
		}
		kept = append(kept, it)
	}
	b.items = kept
}

// finishBatch gathers the outcomes, logs them and tells the hooks, after
// the COMMIT. err is the batch's, or an unrecoverable one of a message's.
func (ib *Inbox[TTx]) finishBatch(b *batch, err error) ([]Outcome, error) {
	byIdx := make([]*batchItem, len(b.msgs))
	for _, it := range b.items {
		b.outs[it.idx], b.errs[it.idx] = it.out, it.err
		byIdx[it.idx] = it
	}
	for _, it := range b.again {
		byIdx[it.idx] = it
	}
	for i := range b.msgs {
		if err == nil && errors.Is(b.errs[i], ErrUnrecoverable) { // an invalid message's dead letter, say
			err = b.errs[i]
		}
		pr := &processing{msg: &b.msgs[i], start: b.start}
		if it := byIdx[i]; it != nil && b.outs[i].Status == Duplicate && conflicts(it.res.Fingerprint, it.p.Fingerprint) {
			pr.claim = &it.p
			b.outs[i] = ib.duplicate(b.msgCtx(i), pr, &it.res) // reports the conflict
		}
		b.outs[i], _ = ib.finish(b.msgCtx(i), pr, b.outs[i], b.errs[i])
	}
	return b.outs, err
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
// *conflictError and nothing else (see batchPass.together).
func (ib *Inbox[TTx]) runPart(ctx context.Context, bc store.BatchClaimer[TTx], items []*batchItem, run batchRun[TTx], mayConflict bool) error {
	first := &batchPass[TTx]{ib: ib, bc: bc, run: run, items: items, mayConflict: mayConflict}
	ok, err := first.do(ctx, first.together)
	if c := (*conflictError)(nil); errors.As(err, &c) {
		return err
	}
	// A pass with savepoints that returns false settled the handler that
	// ended its transaction: the next goes on without it.
	for rest := slices.Clone(items); err == nil && !ok; {
		if rest = slices.DeleteFunc(rest, func(it *batchItem) bool { return it.state == settled }); len(rest) == 0 {
			break
		}
		p := &batchPass[TTx]{ib: ib, bc: bc, run: run, items: rest}
		ok, err = p.do(ctx, p.oneByOne)
	}
	return err
}

// batchPass is one transaction of a batch. It runs the handlers of the
// new messages together, or one by one behind savepoints to find the
// failing ones.
type batchPass[TTx any] struct {
	ib          *Inbox[TTx]
	bc          store.BatchClaimer[TTx]
	run         batchRun[TTx]
	items       []*batchItem // in key order, the claim's
	fresh       []*batchItem // claimed by this pass, in msgs' order
	mayConflict bool         // a lock conflict ends the pass with a *conflictError
}

// passEnd tells how a pass ends once its transaction is over. Its steps
// run in this order: record, unclaim, then conflict or the batch's
// failure.
type passEnd struct {
	ok bool // every item has its outcome
	// record is an item whose failure, herr, is recorded in a transaction
	// of its own.
	record   *batchItem
	herr     error
	unclaim  []*batchItem // claims to delete in a transaction of their own
	conflict error        // a lock conflict: the pass returns a *conflictError
	op       string       // with err: the batch fails, every pending item Retry
	err      error
}

// failBatch ends a pass with the failure of the whole batch.
func failBatch(op string, err error) passEnd { return passEnd{op: op, err: err} }

// recordApart ends a pass as end says, once herr, the failure of it, is
// recorded in a transaction of its own.
func recordApart(it *batchItem, herr error, end passEnd) passEnd {
	it.state = decided
	end.record, end.herr = it, herr
	return end
}

// do runs body in the pass's transaction, then what its end asks. It
// sets each item's outcome and returns true, or false when a message
// failed or a handler ended the transaction. An error fails the whole
// batch (every pending item Retry).
func (p *batchPass[TTx]) do(ctx context.Context, body func(context.Context, TTx) passEnd) (bool, error) {
	for _, it := range p.items { // what an earlier pass decided, this one decides again
		it.state = pending
	}
	end := p.transact(ctx, body)
	if it := end.record; it != nil {
		it.out, it.err = p.ib.failed(ctx, nil, it.msg, &it.p, end.herr)
	}
	if err := p.ib.unclaim(ctx, p.bc, end.unclaim); err != nil {
		return p.fail(ctx, "batch: unclaim", err)
	}
	switch {
	case end.conflict != nil:
		return false, &conflictError{end.conflict}
	case end.err != nil:
		return p.fail(ctx, end.op, end.err)
	case end.ok:
		for _, it := range p.fresh {
			it.state = decided
		}
	}
	return end.ok, nil
}

// fail gives every pending item the outcome of the database's error.
func (p *batchPass[TTx]) fail(ctx context.Context, op string, err error) (bool, error) {
	out, err := p.ib.dbFailed(ctx, op, err)
	for _, it := range p.items {
		if it.state == pending {
			it.out, it.err = out, err
		}
	}
	return true, err
}

// transact begins the pass's transaction, claims the items and runs body.
// It rolls back in one deferred place, a no-op after body's COMMIT.
func (p *batchPass[TTx]) transact(ctx context.Context, body func(context.Context, TTx) passEnd) passEnd {
	cp := &store.ClaimBatchParams{Claims: make([]store.ClaimParams, len(p.items)), LockTimeout: p.ib.cfg.LockTimeout}
	for i, it := range p.items {
		cp.Claims[i] = it.p
	}
	var tx TTx
	var res []store.ClaimResult
	var err error
	bb, oneTrip := p.bc.(store.BatchBeginner[TTx])
	op := "batch claim"
	if oneTrip {
		tx, res, err = bb.BeginClaimBatch(ctx, cp)
	} else {
		op = "batch: begin"
		tx, err = p.ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: p.ib.cfg.LockTimeout})
	}
	if err != nil {
		return failBatch(op, err)
	}
	defer func() { _ = p.ib.driver.Rollback(ctx, tx) }()
	if !oneTrip {
		if res, err = p.bc.ClaimBatch(ctx, tx, cp); err != nil {
			return failBatch("batch claim", err)
		}
	}
	p.ib.health.ok(ctx)
	for i, it := range p.items {
		it.res = res[i]
		if !res[i].Claimed {
			it.out, it.err, it.state = Outcome{Status: Duplicate}, nil, decided
			continue
		}
		p.fresh = append(p.fresh, it)
	}
	slices.SortFunc(p.fresh, func(a, b *batchItem) int { return a.idx - b.idx })
	return body(ctx, tx)
}

// together runs the handlers of the new messages at once, without
// savepoints. When one fails, nothing commits: the next pass finds it.
//
// With mayConflict, a lock conflict of a handler or of the COMMIT ends the
// pass with a conflict, setting no outcome. Without, a handler's is the
// failure of its message, and the COMMIT's fails the batch.
func (p *batchPass[TTx]) together(ctx context.Context, tx TTx) passEnd {
	ms := make([]*Message, len(p.fresh))
	for i, it := range p.fresh {
		ms[i] = it.msg
	}
	n, herr := p.run(ctx, tx, ms)
	if ctx.Err() != nil {
		return failBatch("batch", ctx.Err())
	}
	// After a handler's error too: the check tells whether a handler
	// ended tx.
	cerr := p.ib.driver.CheckTx(ctx, tx, "")
	switch {
	case errors.Is(cerr, store.ErrTxDone):
		// A handler committed or rolled back tx. A COMMIT committed the
		// claims of the whole batch: undo those of the messages whose
		// handlers did not run before it, or they are lost. The messages
		// whose handlers did are Duplicates in the next pass, which finds
		// the handler if it ends tx again.
		return passEnd{unclaim: notRun(p.fresh, n, herr, cerr)}
	case herr != nil && p.mayConflict && p.ib.conflict(herr):
		return passEnd{conflict: herr}
	case herr != nil && p.ib.conflict(herr):
		p.ib.conflictKept(ctx, len(p.fresh), herr)
		return passEnd{} // the savepoint pass, as below
	case herr != nil || cerr != nil:
		return passEnd{} // find the failing messages with savepoints
	}
	if err := p.ib.driver.Commit(ctx, tx); err != nil {
		switch {
		case p.mayConflict && p.ib.conflict(err): // a serialization failure
			return passEnd{conflict: err}
		case IsRetryable(err):
			return failBatch("batch commit", err)
		}
		return passEnd{} // a COMMIT refused for the handlers' doing: isolate them
	}
	for _, it := range p.fresh {
		it.out = Outcome{Status: Processed}
	}
	return passEnd{ok: true}
}

// oneByOne runs each new message's handler behind a savepoint, and
// records the failures in the pass's transaction.
func (p *batchPass[TTx]) oneByOne(ctx context.Context, tx TTx) passEnd {
	for i := range p.fresh {
		if err := p.bc.Savepoint(ctx, tx, batchSavepoint); err != nil {
			return failBatch("batch savepoint", err)
		}
		if end, stop := p.runOne(ctx, tx, i); stop {
			return end
		}
	}
	if err := p.ib.driver.Commit(ctx, tx); err != nil {
		return failBatch("batch commit", err)
	}
	return passEnd{ok: true}
}

// runOne runs the handler of fresh[i] after the savepoint and sets its
// outcome. A failure is undone to the savepoint and recorded in tx. With
// stop, the pass ends as end says.
func (p *batchPass[TTx]) runOne(ctx context.Context, tx TTx, i int) (end passEnd, stop bool) {
	it := p.fresh[i]
	_, herr := p.run(ctx, tx, []*Message{it.msg})
	if herr == nil {
		if herr = p.ib.driver.CheckTx(ctx, tx, batchSavepoint); herr == nil {
			it.out = Outcome{Status: Processed}
			return passEnd{}, false
		}
		if errors.Is(herr, store.ErrTxDone) && ctx.Err() == nil { // database/sql ends a transaction whose ctx ended
			return p.handlerEnded(i, herr), true
		}
		herr = fmt.Errorf("inbox: the handler returned no error, but: %w", herr)
	}
	if ctx.Err() != nil || errors.Is(herr, store.ErrTxUnusable) {
		// Shutting down, or tx cannot go on: retry the batch.
		end := failBatch("batch handler", store.Retryable(herr))
		if errors.Is(herr, store.ErrTxUnusable) { // count it, or it comes back for ever
			end = recordApart(it, herr, end)
		}
		return end, true
	}
	if err := p.ib.driver.RollbackToSavepoint(ctx, tx, batchSavepoint); err != nil {
		switch {
		case errors.Is(err, store.ErrTxDone):
			return p.handlerEnded(i, herr), true
		case errors.Is(err, store.ErrTxRestarted):
			// The server ended the transaction with the messages processed
			// before this one: retry the batch, and count this message's
			// failure, or it comes back for ever.
			return recordApart(it, herr, failBatch("batch handler", store.Retryable(herr))), true
		}
		return failBatch("batch: rollback to savepoint", err), true
	}
	if err := p.bc.Unclaim(ctx, tx, it.p.Key); err != nil {
		return failBatch("batch: unclaim", err), true
	}
	// A transient failure (a deadlock of the handler's queries: PostgreSQL
	// undid the savepoint's subtransaction, and MySQL the whole
	// transaction, which RollbackToSavepoint said above) counts as one for
	// this message alone.
	out, keep, rerr := p.ib.recordFailure(ctx, tx, p.ib.failure(it.msg, &it.p, herr), nil)
	var refused *payloadRefusedError
	switch {
	case errors.As(rerr, &refused): // a dead letter too large: kept without its payload, in a transaction of its own
		apart := store.Retryable(errors.New("inbox: batch rolled back to keep a dead letter apart"))
		return recordApart(it, herr, failBatch("batch", apart)), true
	case !keep && out.Status != Duplicate: // the database failed
		return failBatch("batch: recording a failure", rerr), true
	}
	it.out, it.err = out, rerr
	return passEnd{}, false
}

// handlerEnded ends a pass whose handler of fresh[i] committed or rolled
// back tx. Its failure counts, recorded in a transaction of its own, and
// the next pass goes on without it. The claims of the messages after it,
// which a COMMIT kept without their writes, are deleted. The messages
// processed before it are Duplicates in the next pass if tx committed, or
// processed again. Those whose failure tx recorded are settled as
// recorded, but a dead letter that may not have committed is a Retry.
func (p *batchPass[TTx]) handlerEnded(i int, herr error) passEnd {
	for _, b := range p.fresh[:i] {
		if b.out.Status == DeadLettered {
			b.out = p.ib.retryNow()
		}
		if b.out.Status != Processed {
			b.state = settled
		}
	}
	it := p.fresh[i]
	it.state = settled
	return passEnd{record: it, herr: txEndedError(herr), unclaim: p.fresh[i+1:]}
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
	defer func() { _ = ib.driver.Rollback(ctx, tx) }() // a no-op after COMMIT
	for _, it := range its {
		if err := bc.Unclaim(ctx, tx, it.p.Key); err != nil {
			return err
		}
	}
	return ib.driver.Commit(ctx, tx)
}
