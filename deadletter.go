package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/internal/idscope"
	"github.com/inboxkit/inbox/store"
)

// ErrDeadLetterNotFound is returned for a dead letter ID that does not
// exist, or that belongs to another consumer.
var ErrDeadLetterNotFound = errors.New("inbox: dead letter not found")

// DeadLetter is a message that failed for good.
//
// It is kept with its payload until it is replayed or discarded. Its inbox
// row is marked dead, so redeliveries are duplicates.
type DeadLetter struct {
	// ID identifies the dead letter, not the message.
	ID       int64
	Message  Message
	Error    string
	Attempts int
	FailedAt time.Time
	// PayloadLost is true when the database refused to store the message's
	// payload and headers with the dead letter. That happens when they are
	// larger than MySQL's max_allowed_packet. Message then has neither, and
	// Error says why. The broker's copy, if any, is the only one. Replay
	// refuses such a dead letter.
	PayloadLost bool
}

// payloadLostMarker is stored in place of the headers of a dead letter
// without its payload; encodeHeaders never writes a JSON array.
var payloadLostMarker = headers.LostMarker

// DeadLetterQuery selects dead letters.
type DeadLetterQuery struct {
	// AfterID lists dead letters whose ID is greater. Pass the last ID of a
	// page for the next. Default 0, from the first.
	AfterID int64
	// Limit is the most listed. Default 100.
	Limit int
}

// DeadLetters lists the consumer's dead letters in ID order.
func (ib *Inbox[TTx]) DeadLetters(ctx context.Context, q *DeadLetterQuery) ([]DeadLetter, error) {
	p := &store.DeadLetterListParams{Consumer: ib.consumer, Limit: 100}
	if q != nil {
		p.AfterID = q.AfterID
		if q.Limit > 0 {
			p.Limit = q.Limit
		}
	}
	rows, err := ib.driver.DeadLetterList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("inbox: listing dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(rows))
	for _, r := range rows {
		dl, err := deadLetterFrom(r, ib.cfg.ScopeIDByType)
		if err != nil {
			return nil, err
		}
		out = append(out, dl)
	}
	return out, nil
}

// deadLetterFrom makes a stored dead letter a DeadLetter. With
// scopeByType its key holds the message's type as it came (r.Type is the
// storable form) and its ID: a replay claims the same key again.
func deadLetterFrom(r *store.DeadLetter, scopeByType bool) (DeadLetter, error) {
	lost := bytes.Equal(r.Headers, payloadLostMarker)
	if lost {
		r.Headers = nil
	}
	h, err := decodeHeaders(r.Headers)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("inbox: dead letter %d: %w", r.ID, err)
	}
	typ, id := r.Type, string(r.Key.MessageID)
	if scopeByType {
		if t, i, ok := idscope.Split(r.Key.MessageID); ok {
			typ, id = t, i
		}
	}
	return DeadLetter{
		ID:          r.ID,
		Message:     Message{ID: id, Type: typ, Payload: r.Payload, Headers: h},
		Error:       r.Error,
		Attempts:    r.Attempts,
		FailedAt:    r.FailedAt,
		PayloadLost: lost,
	}, nil
}

// Replay processes dead letter id again through h.
//
// One transaction removes the dead letter, claims the message again, runs h
// and forgets the failed attempts. If h fails, nothing changes and the dead
// letter stays.
//
// The message may have been processed since it was dead-lettered. A
// redelivery after its dead inbox row was pruned does that. Then h does not
// run, the dead letter is removed, and the outcome is Duplicate.
//
// A dead letter of an invalid message cannot be replayed, and the error
// says why. Nor can one whose payload was not kept, with [ErrPayloadLost].
// [Inbox.Discard] them.
//
// Two replays of one dead letter at once run h once. The other waits for
// the first. It then gets [ErrDeadLetterNotFound], or a lock timeout. Hooks
// are told of the outcome once the dead letter was read. A failure is told
// as Retry.
//
// A nil inbox or handler is an error wrapping [ErrInvalidConfig].
func (ib *Inbox[TTx]) Replay(ctx context.Context, id int64, h Handler[TTx]) (Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return Outcome{Status: Retry}, err
	}
	start := time.Now()
	tx, err := ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout})
	if err != nil {
		return ib.retryNow(), fmt.Errorf("inbox: replay: %w", err)
	}
	msg, out, err := ib.takeForReplay(ctx, tx, id)
	if err != nil {
		_ = ib.driver.Rollback(ctx, tx)
		return out, err
	}
	ctx = ib.hooks.started(ctx, ib.cfg.Consumer, &msg)
	pr := &processing{msg: &msg, start: start}
	// From here on the hooks hear of a failure too, as Retry: a StartHook
	// is owed an outcome.
	failed := func(out Outcome, err error) (Outcome, error) {
		_ = ib.driver.Rollback(ctx, tx)
		if ib.hooks.any {
			ib.hooks.outcome(ctx, &Event{Consumer: ib.cfg.Consumer, Message: &msg, Outcome: out, Duration: time.Since(start), HandlerDuration: pr.handler})
		}
		return out, err
	}
	p := ib.claimParams(&msg)
	claimed, err := ib.driver.InboxReclaim(ctx, tx, p)
	if err != nil {
		return failed(ib.retryNow(), fmt.Errorf("inbox: replay: %w", err))
	}
	out = Outcome{Status: Duplicate}
	if claimed {
		if herr := ib.runHandler(pr, func() error { return h(ctx, tx, &msg) }); herr != nil {
			return failed(Outcome{Status: Retry, Err: herr}, herr)
		}
		out.Status = Processed
	}
	if err := ib.driver.AttemptsDelete(ctx, tx, p.Key); err != nil {
		return failed(ib.retryNow(), fmt.Errorf("inbox: replay: %w", err))
	}
	if err := ib.driver.Commit(ctx, tx); err != nil {
		return failed(ib.retryNow(), fmt.Errorf("inbox: replay: commit: %w", err))
	}
	return ib.finish(ctx, pr, out, nil)
}

// takeForReplay takes dead letter id in tx and returns its message. Or it
// returns the outcome and error that end the replay: not found, a read
// that failed, a payload not kept, an invalid message.
func (ib *Inbox[TTx]) takeForReplay(ctx context.Context, tx TTx, id int64) (Message, Outcome, error) {
	r, err := ib.driver.DeadLetterTake(ctx, tx, ib.consumer, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Message{}, Outcome{Status: Retry}, ErrDeadLetterNotFound
	case err != nil:
		return Message{}, ib.retryNow(), fmt.Errorf("inbox: replay: %w", err)
	}
	dl, err := deadLetterFrom(r, ib.cfg.ScopeIDByType)
	if err != nil {
		return Message{}, Outcome{Status: Retry}, err
	}
	if dl.PayloadLost {
		return Message{}, Outcome{Status: Retry}, fmt.Errorf("%w: dead letter %d cannot be replayed (discard it)", ErrPayloadLost, id)
	}
	if err := dl.Message.validate(ib.cfg.ScopeIDByType); err != nil {
		return Message{}, Outcome{Status: Retry}, fmt.Errorf("inbox: replay of dead letter %d: %w", id, err)
	}
	return dl.Message, Outcome{}, nil
}

// Discard deletes dead letter id for good. Its inbox row stays marked dead,
// so redeliveries of the message are still duplicates.
func (ib *Inbox[TTx]) Discard(ctx context.Context, id int64) error {
	tx, err := ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout})
	if err != nil {
		return fmt.Errorf("inbox: discard: %w", err)
	}
	_, err = ib.driver.DeadLetterTake(ctx, tx, ib.consumer, id)
	if err != nil {
		_ = ib.driver.Rollback(ctx, tx)
		if errors.Is(err, store.ErrNotFound) {
			return ErrDeadLetterNotFound
		}
		return fmt.Errorf("inbox: discard: %w", err)
	}
	if err := ib.driver.Commit(ctx, tx); err != nil {
		_ = ib.driver.Rollback(ctx, tx)
		return fmt.Errorf("inbox: discard: commit: %w", err)
	}
	return nil
}
