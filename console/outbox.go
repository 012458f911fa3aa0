package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/inboxkit/inbox/store"
)

type outboxStatsView struct {
	*store.OutboxStats
	PendingAge, ParkedAge string
}

func newOutboxStatsView(s *store.OutboxStats) *outboxStatsView {
	return &outboxStatsView{OutboxStats: s, PendingAge: age(s.Now, s.OldestPending), ParkedAge: age(s.Now, s.OldestParked)}
}

// obFilter is the outbox's filter as the form shows it.
type obFilter struct {
	State, Destination, Type, Error, Since, Until, MessageID string
	raw                                                      [7]string
}

var obNames = []string{"state", "destination", "type", "error", "since", "until", "message-id"}

func (f *obFilter) pairs() []string {
	out := make([]string, 0, 14)
	for i, n := range obNames {
		out = append(out, n, f.raw[i])
	}
	return out
}

// parseOBFilter reads the filter of a query or a form into p.
func parseOBFilter(q url.Values, now time.Time, p *store.OutboxSearchParams) (*obFilter, error) {
	f := &obFilter{}
	for i, n := range obNames {
		f.raw[i] = q.Get(n)
	}
	dest, typ, msgID := parseShown(f.raw[1]), parseShown(f.raw[2]), parseShown(f.raw[6])
	f.raw[1], f.raw[2], f.raw[6] = string(dest), string(typ), string(msgID)
	f.State, f.Destination, f.Type, f.MessageID = f.raw[0], show(dest), show(typ), show(msgID)
	f.Error, f.Since, f.Until = f.raw[3], f.raw[4], f.raw[5]
	p.State, p.Destination, p.Type, p.ErrorContains = store.OutboxState(f.State), string(dest), string(typ), f.Error
	if len(msgID) > 0 {
		p.MessageID = msgID
	}
	var err error
	if p.Since, err = parseTime(f.Since, now); err != nil {
		return f, fmt.Errorf("since: %w", err)
	}
	if p.Until, err = parseTime(f.Until, now); err != nil {
		return f, fmt.Errorf("until: %w", err)
	}
	return f, p.Check()
}

type obListPage struct {
	base
	Missing bool
	Stats   *outboxStatsView
	Filter  *obFilter
	Invalid string
	Rows    []obRow
	Next    template.URL
	First   template.URL
	Limit   int
	// StateHrefs link to the list of each state under the other filters.
	AllHref, PendingHref, ParkedHref template.URL
	// BulkUnpark and BulkDiscard link to the pages that confirm a bulk
	// action on the parked rows under the filter; empty when the store
	// cannot change the outbox.
	BulkUnpark, BulkDiscard template.URL
}

type obRow struct {
	Seq                                int64
	State, MessageID, Destination, Key string
	Type, Error, Age                   string
	CreatedAt, AvailableAt, ParkedAt   time.Time
	Attempts                           int
	Size                               int64
	Due                                bool
	DestinationHref                    template.URL
}

func (c *Console) outboxList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := &obListPage{base: c.base(r, "Outbox", "outbox"), Missing: c.outbox == nil, Limit: c.limit(r)}
	if c.outbox == nil {
		c.render(w, r, http.StatusOK, "outbox", p)
		return
	}
	var sp store.OutboxSearchParams
	f, err := parseOBFilter(r.URL.Query(), c.now(), &sp)
	p.Filter = f
	pairs := f.pairs()
	for _, s := range []struct {
		href  *template.URL
		state string
	}{{&p.AllHref, ""}, {&p.PendingHref, "pending"}, {&p.ParkedHref, "parked"}} {
		q := slices.Clone(pairs)
		q[1] = s.state
		*s.href = query(q...)
		if *s.href == "" {
			*s.href = "?"
		}
	}
	if err != nil {
		p.Invalid = err.Error()
		c.render(w, r, http.StatusBadRequest, "outbox", p)
		return
	}
	if c.parked != nil {
		q := slices.Clone(pairs)
		q[1] = string(store.OutboxStateParked)
		p.BulkUnpark = query(append(q, "action", "unpark")...)
		p.BulkDiscard = query(append(q, "action", "discard")...)
	}
	stats, err := c.outbox.OutboxStats(ctx)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	p.Stats = newOutboxStatsView(stats)
	sp.AfterSeq, _ = strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	sp.AfterSeq = max(sp.AfterSeq, 0)
	sp.Limit = p.Limit + 1
	found, err := c.outbox.OutboxSearch(ctx, &sp)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	limit := ""
	if p.Limit != c.cfg.PageSize {
		limit = strconv.Itoa(p.Limit)
	}
	if len(found) > p.Limit {
		found = found[:p.Limit]
		p.Next = query(append(slices.Clone(pairs), "limit", limit, "after", strconv.FormatInt(found[len(found)-1].Seq, 10))...)
	}
	if sp.AfterSeq > 0 {
		if p.First = query(append(slices.Clone(pairs), "limit", limit)...); p.First == "" {
			p.First = "?"
		}
	}
	for _, o := range found {
		p.Rows = append(p.Rows, obRow{
			Seq: o.Seq, State: o.State(), MessageID: show(o.ID), Destination: show([]byte(o.Destination)), Key: show(o.Key),
			Type: show([]byte(o.Type)), Error: o.LastError, Age: age(stats.Now, o.CreatedAt),
			CreatedAt: o.CreatedAt, AvailableAt: o.AvailableAt, ParkedAt: o.ParkedAt,
			Attempts: o.Attempts, Size: o.PayloadSize,
			Due:             o.State() == string(store.OutboxStatePending) && !o.AvailableAt.After(stats.Now),
			DestinationHref: query("destination", o.Destination),
		})
	}
	c.render(w, r, http.StatusOK, "outbox", p)
}

type obShowPage struct {
	base
	Missing bool
	*store.OutboxInfo
	State, MessageID, Destination, Key, Type string
	Headers                                  []header
	HeadersErr                               string
	Payload                                  payloadView
	PayloadHref                              string
	Age                                      string
	// CanChange: the store can unpark and discard the row.
	CanChange bool
}

func (c *Console) outboxShow(w http.ResponseWriter, r *http.Request) {
	seq, ok := pathID(r, "seq")
	if !ok {
		c.fail(w, r, http.StatusNotFound, "An outbox row's SEQ is a positive number.", nil)
		return
	}
	p := &obShowPage{base: c.base(r, fmt.Sprintf("Outbox row %d", seq), "outbox"), Missing: c.outbox == nil}
	if c.outbox == nil {
		c.render(w, r, http.StatusOK, "outboxrow", p)
		return
	}
	o, err := c.outbox.OutboxGet(r.Context(), seq)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No outbox row has SEQ %d: it was published and deleted, or discarded.", seq), nil)
		return
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	p.OutboxInfo = o
	p.State, p.MessageID, p.Destination, p.Key, p.Type = o.State(), show(o.ID), show([]byte(o.Destination)), show(o.Key), show([]byte(o.Type))
	p.Headers, p.HeadersErr = viewHeaders(o.Headers)
	p.Payload, p.PayloadHref = viewPayload(o.Payload), fmt.Sprintf("%d/payload", seq)
	p.Age = age(c.now(), o.CreatedAt)
	p.CanChange = c.parked != nil
	c.render(w, r, http.StatusOK, "outboxrow", p)
}

func (c *Console) outboxPayload(w http.ResponseWriter, r *http.Request) {
	seq, ok := pathID(r, "seq")
	if !ok || c.outbox == nil {
		c.fail(w, r, http.StatusNotFound, "No such outbox row.", nil)
		return
	}
	o, err := c.outbox.OutboxGet(r.Context(), seq)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No outbox row has SEQ %d.", seq), nil)
		return
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	download(w, r, fmt.Sprintf("outbox-%d.bin", seq), o.Payload)
}
