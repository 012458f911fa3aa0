package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/inboxkit/inbox/internal/replay"
	"github.com/inboxkit/inbox/internal/selection"
	"github.com/inboxkit/inbox/store"
)

// maxFailuresShown bounds the failures a bulk action's page lists; the
// log has every one.
const maxFailuresShown = 20

// bulkPage asks to confirm a bulk action, then tells what it did.
type bulkPage struct {
	base
	// Action is replay, discard or unpark, Verb the button's word for
	// it; What is "dead letter" or "parked outbox row"; List is the
	// list's page, for the links.
	Action, Verb, What, List string
	// Fields are the filter, as the form carries it.
	Fields []field
	// Back links to the list under the filter.
	Back    template.URL
	Invalid string
	// Count is how many the filter selects; Through the greatest ID or
	// SEQ among them, the last the action takes.
	Count   int
	Through int64
	// ByConsumer counts dead letters per consumer, with whether the
	// console can replay them.
	ByConsumer []consumerCount
	// Old counts dead letters older than the retention.
	Old       int
	Retention string
	// Blocked says why the action cannot run; the page has no button.
	Blocked string
	// Result is set once the action ran.
	Result *bulkResult
}

// verbs are the bulk actions' buttons.
var verbs = map[string]string{"replay": "Replay", "discard": "Discard", "unpark": "Unpark"}

type field struct{ Name, Value string }

type consumerCount struct {
	Name          string
	Count         int
	NoDestination bool
	Subject       string
}

// bulkResult is what a bulk action did.
type bulkResult struct {
	// Done counts those changed; Gone those that went meanwhile.
	Done, Gone int
	// Counts by outcome, for replays.
	Counts   []outcomeCount
	Failures []failure
	// More counts the failures not listed.
	More int
}

type outcomeCount struct {
	Outcome string
	Count   int
}

type failure struct {
	ID   int64
	Text string
}

// dlFields are f as the bulk form carries it: each value as [show]
// writes it, which the filter reads back as its bytes.
func (f *dlFilter) fields() []field {
	return []field{{"consumer", f.Consumer}, {"type", f.Type}, {"group", f.Group}, {"error", f.Error},
		{"since", f.Since}, {"until", f.Until}, {"message-id", f.MessageID}}
}

func (f *obFilter) fields() []field {
	return []field{{"state", f.State}, {"destination", f.Destination}, {"type", f.Type}, {"error", f.Error},
		{"since", f.Since}, {"until", f.Until}, {"message-id", f.MessageID}}
}

// bulkValues are the query or form of a bulk request: the query for the
// page that asks, the form for the POST that acts.
func bulkValues(r *http.Request) url.Values {
	if r.Method == http.MethodPost {
		return r.PostForm
	}
	return r.URL.Query()
}

// deadLetterBulk asks to confirm, on GET, and runs, on POST, a replay or
// a discard of every dead letter a filter selects. The page counts them
// first; the POST takes those selected then, up to the greatest ID
// counted, so that one dead-lettered meanwhile is left alone.
func (c *Console) deadLetterBulk(w http.ResponseWriter, r *http.Request) {
	q := bulkValues(r)
	p := &bulkPage{base: c.base(r, "", "dead-letters"), Action: q.Get("action"), What: "dead letter", List: "dead-letters",
		Retention: duration(c.cfg.Retention)}
	if p.Action != "replay" && p.Action != "discard" {
		c.fail(w, r, http.StatusNotFound, "A bulk action on dead letters is replay or discard.", nil)
		return
	}
	p.Title, p.Verb = "Bulk "+p.Action+" of dead letters", verbs[p.Action]
	if c.dl == nil {
		c.fail(w, r, http.StatusNotFound, "This store cannot list dead letters: it does not implement store.Inspector.", nil)
		return
	}
	var sp store.DeadLetterSearchParams
	f, err := parseDLFilter(q, c.now(), &sp)
	p.Fields, p.Back = f.fields(), query(f.pairs()...)
	if err != nil {
		p.Invalid = err.Error()
		c.render(w, r, http.StatusBadRequest, "bulk", p)
		return
	}
	if r.Method == http.MethodPost {
		c.runDeadLetterBulk(w, r, p, &sp, q)
		return
	}
	err = replay.Each(r.Context(), c.dl, &sp, func(d *store.DeadLetterInfo) {
		p.Count++
		p.Through = d.ID
		p.countConsumer(d.Key.Consumer, c.cfg.Replay[string(d.Key.Consumer)])
		if c.now().Sub(d.FailedAt) > c.cfg.Retention {
			p.Old++
		}
	})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	if p.Action == "replay" {
		for _, cc := range p.ByConsumer {
			if cc.NoDestination {
				p.Blocked = "The console has no destination for some of these consumers. Filter by a consumer it can replay to."
			}
		}
	}
	c.render(w, r, http.StatusOK, "bulk", p)
}

// countConsumer counts one dead letter of consumer, in byte order.
func (p *bulkPage) countConsumer(consumer []byte, d *Destination) {
	name := show(consumer)
	i, found := slices.BinarySearchFunc(p.ByConsumer, name, func(cc consumerCount, n string) int { return strings.Compare(cc.Name, n) })
	if !found {
		cc := consumerCount{Name: name, NoDestination: d == nil}
		if d != nil {
			cc.Subject = d.Subject
		}
		p.ByConsumer = slices.Insert(p.ByConsumer, i, cc)
	}
	p.ByConsumer[i].Count++
}

// throughOf reads the form's greatest ID or SEQ to act on.
func throughOf(q url.Values) (int64, bool) {
	n, err := strconv.ParseInt(q.Get("through"), 10, 64)
	return n, err == nil && n > 0
}

func (c *Console) runDeadLetterBulk(w http.ResponseWriter, r *http.Request, p *bulkPage, sp *store.DeadLetterSearchParams, q url.Values) {
	ctx := r.Context()
	through, ok := throughOf(q)
	if !ok {
		c.fail(w, r, http.StatusBadRequest, "The form names no dead letter to act on: start again from the list.", nil)
		return
	}
	var selected []*store.DeadLetterInfo
	err := replay.Each(ctx, c.dl, sp, func(d *store.DeadLetterInfo) {
		if d.ID <= through {
			selected = append(selected, d)
		}
	})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	res := &bulkResult{}
	if p.Action == "discard" {
		err = c.discardAll(ctx, selected, res)
	} else {
		c.replayAll(r, selected, res)
	}
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("Discarded %d, then the store failed. The program's log has the error.", res.Done), err)
		return
	}
	c.log.InfoContext(ctx, "console: bulk action on dead letters", "action", p.Action, "selected", len(selected),
		"done", res.Done, "gone", res.Gone, "failed", len(res.Failures)+res.More)
	p.Count, p.Result = len(selected), res
	c.render(w, r, http.StatusOK, "bulk", p)
}

// discardAll discards the dead letters a page of the selection at a
// time, each in a transaction.
func (c *Console) discardAll(ctx context.Context, selected []*store.DeadLetterInfo, res *bulkResult) error {
	for chunk := range slices.Chunk(selected, replay.SelectPage) {
		ids := make([]int64, len(chunk))
		for i, d := range chunk {
			ids[i] = d.ID
		}
		gone, err := c.dl.DeadLetterDiscard(ctx, ids)
		if err != nil {
			return err
		}
		res.Done += len(gone)
		res.Gone += len(ids) - len(gone)
	}
	return nil
}

// replayAll replays the dead letters one transaction each; a failure
// does not stop the others. It stops when the request is cancelled.
func (c *Console) replayAll(r *http.Request, selected []*store.DeadLetterInfo, res *bulkResult) {
	counts := map[replay.Status]int{}
	for _, d := range selected {
		if r.Context().Err() != nil {
			break
		}
		rp := c.replayer(d.Key.Consumer)
		if rp == nil {
			res.fail(d.ID, noDestination(d.Key.Consumer))
			counts[replay.Refused]++
			continue
		}
		out := rp.One(r.Context(), d.ID)
		c.logReplay(r, &out)
		counts[out.Status]++
		switch out.Status {
		case replay.Replayed, replay.ProcessedSince:
			res.Done++
		case replay.NotFound:
			res.Gone++
		default:
			_, msg := replayFailure(&out)
			res.fail(d.ID, msg)
		}
	}
	for _, s := range []replay.Status{replay.Replayed, replay.ProcessedSince, replay.NotFound, replay.DuplicateWindow, replay.Refused, replay.Failed} {
		if counts[s] > 0 {
			res.Counts = append(res.Counts, outcomeCount{outcomes[s], counts[s]})
		}
	}
}

// outcomes name the statuses of a replay on the page.
var outcomes = map[replay.Status]string{
	replay.Replayed:        "replayed",
	replay.ProcessedSince:  "removed, processed since they failed",
	replay.NotFound:        "gone meanwhile",
	replay.DuplicateWindow: "within the broker's duplicate window, kept",
	replay.Refused:         "refused, kept",
	replay.Failed:          "failed, kept",
}

func (res *bulkResult) fail(id int64, text string) {
	if len(res.Failures) < maxFailuresShown {
		res.Failures = append(res.Failures, failure{id, text})
		return
	}
	res.More++
}

// outboxBulk asks to confirm, on GET, and runs, on POST, an unpark or a
// discard of every parked row a filter selects, up to the greatest SEQ
// counted.
func (c *Console) outboxBulk(w http.ResponseWriter, r *http.Request) {
	q := bulkValues(r)
	p := &bulkPage{base: c.base(r, "", "outbox"), Action: q.Get("action"), What: "parked outbox row", List: "outbox"}
	if p.Action != "unpark" && p.Action != "discard" {
		c.fail(w, r, http.StatusNotFound, "A bulk action on the outbox is unpark or discard.", nil)
		return
	}
	p.Title, p.Verb = "Bulk "+p.Action+" of parked outbox rows", verbs[p.Action]
	if c.outbox == nil || c.parked == nil {
		c.fail(w, r, http.StatusNotFound, "This store cannot change the outbox: it does not implement store.OutboxInspector and store.OutboxRelayer.", nil)
		return
	}
	var sp store.OutboxSearchParams
	f, err := parseOBFilter(q, c.now(), &sp)
	f.State, f.raw[0], sp.State = string(store.OutboxStateParked), string(store.OutboxStateParked), store.OutboxStateParked
	p.Fields, p.Back = f.fields(), query(f.pairs()...)
	if err != nil {
		p.Invalid = err.Error()
		c.render(w, r, http.StatusBadRequest, "bulk", p)
		return
	}
	through := int64(0)
	if r.Method == http.MethodPost {
		var ok bool
		if through, ok = throughOf(q); !ok {
			c.fail(w, r, http.StatusBadRequest, "The form names no outbox row to act on: start again from the list.", nil)
			return
		}
	}
	parked, err := selection.Parked(r.Context(), c.outbox, &sp)
	var seqs []int64
	for _, o := range parked {
		if through == 0 || o.Seq <= through {
			seqs = append(seqs, o.Seq)
		}
	}
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	p.Count = len(seqs)
	if r.Method != http.MethodPost {
		if len(seqs) > 0 {
			p.Through = seqs[len(seqs)-1]
		}
		c.render(w, r, http.StatusOK, "bulk", p)
		return
	}
	p.Result = &bulkResult{}
	if err := c.changeParked(r.Context(), p.Action, seqs, p.Result); err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("Changed %d rows, then the store failed. The program's log has the error.", p.Result.Done), err)
		return
	}
	c.log.InfoContext(r.Context(), "console: bulk action on parked outbox rows", "action", p.Action, "selected", len(seqs),
		"done", p.Result.Done, "gone", p.Result.Gone)
	c.render(w, r, http.StatusOK, "bulk", p)
}

// changeParked unparks or discards the rows seqs, each in a transaction
// of its own. A row that is no longer parked counts as gone.
func (c *Console) changeParked(ctx context.Context, action string, seqs []int64, res *bulkResult) error {
	act := c.parked.OutboxUnpark
	if action == "discard" {
		act = c.parked.OutboxDiscard
	}
	for _, seq := range seqs {
		switch err := act(ctx, seq); {
		case errors.Is(err, store.ErrNotFound):
			res.Gone++
		case err != nil:
			return err
		default:
			res.Done++
		}
	}
	return nil
}
