// Package replay sends dead letters back through their broker, one
// transaction each. The command's dead-letters replay and the web console
// share it.
//
// A replay locks and deletes the dead letter, deletes the message's dead
// inbox row and failed attempts, publishes the message and waits for the
// broker's confirmation, then commits. A consumer that receives the copy
// before the COMMIT waits for the dead row's lock. Killed before the
// COMMIT, the database rolls back: the copy finds the dead row and is a
// duplicate, and the dead letter is still there.
package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/internal/idscope"
	"github.com/inboxkit/inbox/store"
)

// ReleaseFunc releases dead letter id in a transaction with lock timeout
// lt, runs fn, and commits when fn returns nil. fn's error rolls back. A
// failed COMMIT is a [*CommitError]. [Release] is one.
type ReleaseFunc func(ctx context.Context, id int64, lt time.Duration, fn func(dl *store.DeadLetter, live bool) error) error

// Release is a [ReleaseFunc] on d. beforeCommit, if not nil, runs just
// before the COMMIT: tests kill the process there.
func Release[TTx any](ctx context.Context, d store.Driver[TTx], in store.Inspector[TTx], id int64, lt time.Duration,
	fn func(dl *store.DeadLetter, live bool) error, beforeCommit func()) error {
	tx, err := d.Begin(ctx, &store.BeginParams{LockTimeout: lt})
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			_ = d.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	dl, live, err := in.DeadLetterRelease(ctx, tx, id)
	if err == nil {
		err = fn(dl, live)
	}
	if err != nil {
		return err
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := d.Commit(ctx, tx); err != nil {
		return &CommitError{err}
	}
	committed = true
	return nil
}

// CommitError: the COMMIT after a publish failed, so that whether the
// replay happened is unknown.
type CommitError struct{ Err error }

func (e *CommitError) Error() string { return "commit: " + e.Err.Error() }
func (e *CommitError) Unwrap() error { return e.Err }

// RefusedError: the dead letter is not replayed, by rule. Nothing
// changed.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

func refuse(format string, a ...any) error { return &RefusedError{fmt.Errorf(format, a...)} }

// QuietWindowError: the dead letter failed within the destination's
// QuietDedup, so the broker would drop the copy and report it sent.
type QuietWindowError struct {
	FailedAt time.Time
	Window   time.Duration
}

func (e *QuietWindowError) Error() string {
	return fmt.Sprintf("the message failed at %s, within the %v in which the destination drops a message whose ID it saw, and reports it sent",
		e.FailedAt.UTC().Format(time.RFC3339), e.Window)
}

// Until is when the copy would no longer be dropped.
func (e *QuietWindowError) Until() time.Time { return e.FailedAt.Add(e.Window) }

// Destination is where a replay publishes.
type Destination struct {
	Publisher broker.Publisher
	// Subject is the message's subject: a subject, topic, routing key or
	// queue URL.
	Subject string
	// QuietDedup is how long the broker drops a message whose ID it saw,
	// while it reports it sent: an SQS FIFO queue's 5 minutes. A dead
	// letter that failed within it is not replayed. 0 means none.
	QuietDedup time.Duration
}

// Replayer replays dead letters of one consumer to one destination.
type Replayer struct {
	Release ReleaseFunc
	Dest    Destination
	// Consumer: a dead letter of another is refused.
	Consumer []byte
	// ScopeByType: the consumer scopes IDs by type; the ID and type that
	// the key holds are published.
	ScopeByType bool
	// LockTimeout is the release's; Timeout bounds each publish.
	LockTimeout, Timeout time.Duration
}

// Status is what became of one dead letter.
type Status string

// The values of Status.
const (
	Replayed Status = "replayed"
	// ProcessedSince: the message was processed since it was
	// dead-lettered. Nothing was published, the dead letter was removed.
	ProcessedSince Status = "processed_since"
	NotFound       Status = "not_found"
	// DuplicateWindow: the broker would drop the copy; nothing changed,
	// and a later replay may pass.
	DuplicateWindow Status = "duplicate_window"
	// Refused: another consumer's, or a key scoped otherwise; nothing
	// changed.
	Refused Status = "refused"
	Failed  Status = "failed"
)

// Result is what became of one dead letter.
type Result struct {
	ID     int64
	Status Status
	// Key is the dead letter's, zero when it was not found.
	Key store.Key
	// Msg is what was published, nil unless Status is Replayed.
	Msg *broker.Message
	// Err says why, unless Status is Replayed or ProcessedSince. It is
	// the error as it came: the callers phrase it.
	Err error
}

// One replays dead letter id in one transaction.
func (rp *Replayer) One(ctx context.Context, id int64) Result {
	r := Result{ID: id}
	var msg *broker.Message
	err := rp.Release(ctx, id, rp.LockTimeout, func(dl *store.DeadLetter, live bool) error {
		r.Key = dl.Key
		// Before anything else: the destination reaches rp.Consumer only.
		if !bytes.Equal(dl.Key.Consumer, rp.Consumer) {
			return refuse("it is a dead letter of consumer %s, not of %s, which the destination reaches: nothing changed; "+
				"replay it with its own consumer and destination",
				strconv.Quote(string(dl.Key.Consumer)), strconv.Quote(string(rp.Consumer)))
		}
		if live {
			return nil // the dead letter goes, nothing is published
		}
		var err error
		if msg, err = Message(dl, rp.Dest.Subject, rp.ScopeByType); err != nil {
			return err
		}
		if w := rp.Dest.QuietDedup; w > 0 && time.Since(dl.FailedAt) < w {
			// The broker would take the copy and drop it: the release would
			// commit, and nothing would reach the consumer.
			return &QuietWindowError{FailedAt: dl.FailedAt, Window: w}
		}
		pctx, cancel := context.WithTimeout(ctx, rp.Timeout)
		defer cancel()
		return rp.Dest.Publisher.Publish(pctx, msg)
	})
	r.Status, r.Err = classify(err, msg)
	if r.Status == Replayed {
		r.Msg = msg
	}
	return r
}

// classify tells the Status of a release that ended with err, having
// published msg.
func classify(err error, msg *broker.Message) (Status, error) {
	var qe *QuietWindowError
	var re *RefusedError
	switch {
	case err == nil && msg == nil:
		return ProcessedSince, nil
	case err == nil:
		return Replayed, nil
	case errors.Is(err, store.ErrNotFound):
		return NotFound, err
	case errors.As(err, &re):
		return Refused, err
	case errors.Is(err, broker.ErrDuplicate), errors.As(err, &qe):
		return DuplicateWindow, err
	}
	return Failed, err
}

// Message is the message that replays dl to subject, or why it cannot be
// replayed. With scopeByType, the ID and type are those that dl's key
// holds (idscope), so that the consumer, scoping them again, claims the
// copy under dl's key.
func Message(dl *store.DeadLetter, subject string, scopeByType bool) (*broker.Message, error) {
	if bytes.Equal(dl.Headers, headers.LostMarker) {
		return nil, fmt.Errorf("%w: its payload and headers were not kept; discard it", inbox.ErrPayloadLost)
	}
	id, typ := string(dl.Key.MessageID), dl.Type
	t, i, ok := idscope.Split(dl.Key.MessageID)
	scoped := ok && t == dl.Type
	switch {
	case scopeByType && !scoped:
		return nil, refuse("its message ID is not scoped by its type %s, as its consumer's are said to be: nothing changed; "+
			"if the consumer does not use inbox.Config.ScopeIDByType, replay it unscoped (without the command's -scope-id-by-type, "+
			"or the console's Destination.ScopeIDByType)", strconv.Quote(dl.Type))
	case scopeByType:
		id, typ = i, t
	case scoped:
		return nil, refuse("its message ID looks scoped by its type %s (inbox.Config.ScopeIDByType): nothing changed; "+
			"if its consumer scopes IDs by type, replay it scoped (the command's -scope-id-by-type, the console's Destination.ScopeIDByType); "+
			"published as is, the ID would be scoped again and the copy claimed under another key",
			strconv.Quote(dl.Type))
	}
	if n := len(id); n == 0 || n > inbox.MaxIDLen {
		return nil, fmt.Errorf("its message ID of %d bytes is invalid (1..%d): it cannot be replayed; discard it", n, inbox.MaxIDLen)
	}
	h, err := headers.Decode(dl.Headers)
	if err != nil {
		return nil, err
	}
	return &broker.Message{ID: id, Subject: subject, Type: typ, Payload: dl.Payload, Headers: h}, nil
}

// Searcher lists dead letters: [store.Inspector]'s DeadLetterSearch.
type Searcher interface {
	DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error)
}

// SelectPage is how many dead letters [Each] reads at a time.
const SelectPage = 500

// Each calls fn with each dead letter p selects now, in ID order, a page
// of [SelectPage] at a time. It sets p.Limit and moves p.AfterID.
func Each(ctx context.Context, s Searcher, p *store.DeadLetterSearchParams, fn func(*store.DeadLetterInfo)) error {
	p.Limit = SelectPage
	for {
		found, err := s.DeadLetterSearch(ctx, p)
		if err != nil || len(found) == 0 {
			return err
		}
		for _, f := range found {
			fn(f)
		}
		p.AfterID = found[len(found)-1].ID
	}
}

// SelectIDs returns the IDs of the dead letters p selects now. A bulk
// action handles these and stops, so that a dead letter made meanwhile (a
// replayed message dead-lettered again, under a greater ID) is left for
// the next one. 8 bytes a dead letter.
func SelectIDs(ctx context.Context, s Searcher, p *store.DeadLetterSearchParams) ([]int64, error) {
	var ids []int64
	err := Each(ctx, s, p, func(f *store.DeadLetterInfo) { ids = append(ids, f.ID) })
	return ids, err
}
