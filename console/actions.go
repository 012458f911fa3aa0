package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/inboxkit/inbox/internal/replay"
	"github.com/inboxkit/inbox/store"
)

// notices are what a page says after the action that redirected to it,
// by the query's "done". Only the numeric "id" of the query is shown
// with it.
var notices = map[string]string{
	"replayed":     "Dead letter %d was replayed: published again, for its consumer to process once.",
	"processed":    "Dead letter %d was removed: its message was processed since it failed. Nothing was published.",
	"discarded":    "Dead letter %d was discarded.",
	"unparked":     "Outbox row %d was unparked: a relay publishes it.",
	"ob-discarded": "Outbox row %d was discarded.",
}

func notice(q url.Values) string {
	f, ok := notices[q.Get("done")]
	id, err := strconv.ParseInt(q.Get("id"), 10, 64)
	if !ok || err != nil || id <= 0 {
		return ""
	}
	return fmt.Sprintf(f, id)
}

// done redirects, after an action, to page (relative to the console's
// root) with the notice of what happened to id.
func (c *Console) done(w http.ResponseWriter, r *http.Request, page, what string, id int64) {
	u := c.base(r, "", "").Root + page + "?" + url.Values{"done": {what}, "id": {strconv.FormatInt(id, 10)}}.Encode()
	// Relative, as the links are: http.Redirect would make it absolute
	// from r.URL.Path, without the prefix a mount strips.
	w.Header().Set("Location", u)
	w.WriteHeader(http.StatusSeeOther)
}

// replayer is the replay of consumer's dead letters, nil when
// Config.Replay names no destination for it.
func (c *Console) replayer(consumer []byte) *replay.Replayer {
	d := c.cfg.Replay[string(consumer)]
	if d == nil || c.release == nil {
		return nil
	}
	return &replay.Replayer{
		Release:     c.release,
		Dest:        replay.Destination{Publisher: d.Publisher, Subject: d.Subject, QuietDedup: d.QuietDedup},
		Consumer:    consumer,
		ScopeByType: d.ScopeIDByType,
		LockTimeout: c.cfg.LockTimeout,
		Timeout:     d.Timeout,
	}
}

// noDestination is the page's message for a consumer without one.
func noDestination(consumer []byte) string {
	return fmt.Sprintf("The console has no destination for consumer %s: it cannot replay its dead letters. "+
		"Give it one (console.Config.Replay, or the command's -replay flags), or use inbox dead-letters replay.", show(consumer))
}

func (c *Console) deadLetterReplay(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r, "id")
	if !ok || c.dl == nil {
		c.fail(w, r, http.StatusNotFound, "No such dead letter.", nil)
		return
	}
	ctx := r.Context()
	d, err := c.dl.DeadLetterGet(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No dead letter has ID %d: it was replayed or discarded meanwhile.", id), nil)
		return
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	rp := c.replayer(d.Key.Consumer)
	if rp == nil {
		c.fail(w, r, http.StatusConflict, noDestination(d.Key.Consumer), nil)
		return
	}
	res := rp.One(ctx, id)
	c.logReplay(r, &res)
	switch res.Status {
	case replay.Replayed:
		c.done(w, r, "dead-letters", "replayed", id)
	case replay.ProcessedSince:
		c.done(w, r, "dead-letters", "processed", id)
	default:
		status, msg := replayFailure(&res)
		c.fail(w, r, status, msg, nil)
	}
}

// logReplay logs what became of a replay: the console's actions leave a
// trace in the program's log.
func (c *Console) logReplay(r *http.Request, res *replay.Result) {
	args := []any{"dead_letter", res.ID, "status", string(res.Status),
		"consumer", string(res.Key.Consumer), "message_id", string(res.Key.MessageID)}
	if res.Err != nil {
		c.log.WarnContext(r.Context(), "console: replay failed", append(args, "err", res.Err)...)
		return
	}
	c.log.InfoContext(r.Context(), "console: replayed", args...)
}

// replayFailure is the status and the message of a replay that did not
// happen. A store's or a broker's error stays in the log.
func replayFailure(res *replay.Result) (int, string) {
	var ce *replay.CommitError
	var qe *replay.QuietWindowError
	switch {
	case res.Status == replay.NotFound:
		return http.StatusNotFound, fmt.Sprintf("No dead letter has ID %d: it was replayed or discarded meanwhile.", res.ID)
	case res.Status == replay.Refused:
		return http.StatusConflict, "Not replayed: " + res.Err.Error() + "."
	case errors.As(res.Err, &qe):
		return http.StatusConflict, fmt.Sprintf("Not replayed: %v. Nothing changed: replay it after %s.", qe, fmtTime(qe.Until()))
	case res.Status == replay.DuplicateWindow:
		return http.StatusConflict, "Not replayed: " + res.Err.Error() + ". Nothing changed: replay it again once the broker's duplicate window has passed."
	case errors.As(res.Err, &ce):
		return http.StatusBadGateway, "The message was published, then the COMMIT failed: whether the replay happened is unknown. " +
			"If it did not, the consumer takes the copy as a duplicate and the dead letter is still here: replay it again. The program's log has the error."
	}
	return http.StatusBadGateway, "The replay failed and changed nothing. The program's log has the error."
}

func (c *Console) deadLetterDiscard(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r, "id")
	if !ok || c.dl == nil {
		c.fail(w, r, http.StatusNotFound, "No such dead letter.", nil)
		return
	}
	gone, err := c.dl.DeadLetterDiscard(r.Context(), []int64{id})
	switch {
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
	case len(gone) == 0:
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No dead letter has ID %d: it was replayed or discarded meanwhile.", id), nil)
	default:
		c.log.InfoContext(r.Context(), "console: discarded a dead letter", "dead_letter", id)
		c.done(w, r, "dead-letters", "discarded", id)
	}
}

func (c *Console) outboxAct(w http.ResponseWriter, r *http.Request) {
	seq, ok := pathID(r, "seq")
	if !ok || c.parked == nil {
		c.fail(w, r, http.StatusNotFound, "No such outbox row, or this store cannot change the outbox.", nil)
		return
	}
	act, verb := c.parked.OutboxUnpark, "unparked"
	if path.Base(r.URL.Path) == "discard" {
		act, verb = c.parked.OutboxDiscard, "ob-discarded"
	}
	switch err := act(r.Context(), seq); {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No parked outbox row has SEQ %d: it was unparked, published or discarded meanwhile.", seq), nil)
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
	default:
		c.log.InfoContext(r.Context(), "console: changed an outbox row", "seq", seq, "done", verb)
		c.done(w, r, "outbox", verb, seq)
	}
}
