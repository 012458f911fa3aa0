package console

import (
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/inboxkit/inbox/internal/failgroup"
	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/store"
)

// listGroups is how many error groups the dead letters' page shows.
const listGroups = 10

// dlFilter is the dead letters' filter as the form shows it and links
// carry it. The form's fields hold what [show] makes of each value.
type dlFilter struct {
	Consumer, Type, Group, Error, Since, Until, MessageID string
	// raw are the values as the query gave them, for links.
	raw [7]string
}

func (f *dlFilter) pairs() []string {
	names := []string{"consumer", "type", "group", "error", "since", "until", "message-id"}
	out := make([]string, 0, 14)
	for i, n := range names {
		out = append(out, n, f.raw[i])
	}
	return out
}

// Active reports whether any filter is set.
func (f *dlFilter) Active() bool { return f.raw != [7]string{} }

// parseDLFilter reads the filter of a query or a form into p.
func parseDLFilter(q url.Values, now time.Time, p *store.DeadLetterSearchParams) (*dlFilter, error) {
	f := &dlFilter{}
	for i, n := range []string{"consumer", "type", "group", "error", "since", "until", "message-id"} {
		f.raw[i] = q.Get(n)
	}
	// A value typed in the form as show wrote it reads back as its bytes.
	consumer, typ, msgID := parseShown(f.raw[0]), parseShown(f.raw[1]), parseShown(f.raw[6])
	f.raw[0], f.raw[1], f.raw[6] = string(consumer), string(typ), string(msgID)
	f.Consumer, f.Type, f.MessageID = show(consumer), show(typ), show(msgID)
	f.Group, f.Error, f.Since, f.Until = f.raw[2], f.raw[3], f.raw[4], f.raw[5]
	if len(consumer) > 0 {
		p.Consumer = consumer
	}
	if len(msgID) > 0 {
		p.MessageID = msgID
	}
	p.Type, p.Group, p.ErrorContains = string(typ), f.Group, f.Error
	var err error
	if p.Since, err = parseTime(f.Since, now); err != nil {
		return f, fmt.Errorf("since: %w", err)
	}
	if p.Until, err = parseTime(f.Until, now); err != nil {
		return f, fmt.Errorf("until: %w", err)
	}
	return f, nil
}

type dlListPage struct {
	base
	Missing bool
	Filter  *dlFilter
	Invalid string
	Groups  []groupView
	Rows    []dlRow
	// Next and First link to the next page and back to the first; empty
	// when there is none to go to.
	Next, First template.URL
	Limit       int
	// BulkReplay and BulkDiscard link to the pages that confirm a bulk
	// action under the filter.
	BulkReplay, BulkDiscard template.URL
}

type dlRow struct {
	ID                          int64
	Consumer, MessageID, Type   string
	FailedAt                    time.Time
	Attempts                    int
	Size                        int64
	Error                       string
	ConsumerHref, MessageIDHref template.URL
	TypeHref                    template.URL
}

func (c *Console) deadLetterList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := &dlListPage{base: c.base(r, "Dead letters", "dead-letters"), Missing: c.dl == nil, Limit: c.limit(r)}
	if c.dl == nil {
		c.render(w, r, http.StatusOK, "deadletters", p)
		return
	}
	var sp store.DeadLetterSearchParams
	f, err := parseDLFilter(r.URL.Query(), c.now(), &sp)
	p.Filter = f
	if err != nil {
		p.Invalid = err.Error()
		c.render(w, r, http.StatusBadRequest, "deadletters", p)
		return
	}
	gp := sp
	gp.Group, gp.Limit = "", listGroups
	groups, err := c.dl.DeadLetterGroups(ctx, &gp)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	pairs := f.pairs()
	noGroup := slices.Clone(pairs)
	noGroup[5] = ""
	p.Groups = groupViews(groups, noGroup...)
	p.BulkReplay = query(append(slices.Clone(pairs), "action", "replay")...)
	p.BulkDiscard = query(append(slices.Clone(pairs), "action", "discard")...)
	sp.AfterID, _ = strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	sp.AfterID = max(sp.AfterID, 0)
	sp.Limit = p.Limit + 1 // one more tells whether a next page exists
	found, err := c.dl.DeadLetterSearch(ctx, &sp)
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
		p.Next = query(append(slices.Clone(pairs), "limit", limit, "after", strconv.FormatInt(found[len(found)-1].ID, 10))...)
		if p.Next == "" {
			p.Next = "?"
		}
	}
	if sp.AfterID > 0 {
		p.First = query(append(slices.Clone(pairs), "limit", limit)...)
		if p.First == "" {
			p.First = "?"
		}
	}
	for _, d := range found {
		p.Rows = append(p.Rows, dlRow{
			ID: d.ID, Consumer: show(d.Key.Consumer), MessageID: show(d.Key.MessageID), Type: show([]byte(d.Type)),
			FailedAt: d.FailedAt, Attempts: d.Attempts, Size: d.PayloadSize, Error: d.Error,
			ConsumerHref:  query("consumer", string(d.Key.Consumer)),
			MessageIDHref: query("consumer", string(d.Key.Consumer), "message-id", string(d.Key.MessageID)),
			TypeHref:      query("type", d.Type),
		})
	}
	c.render(w, r, http.StatusOK, "deadletters", p)
}

type dlShowPage struct {
	base
	Missing bool
	*store.DeadLetterDetail
	Consumer, MessageID, Type string
	ConsumerHref              template.URL
	Group                     string
	GroupHref                 template.URL
	Headers                   []header
	HeadersErr                string
	Payload                   payloadView
	PayloadHref               string
	// Forgotten says why a replay would be processed as new, empty if it
	// would not.
	Forgotten string
	Retention string
	Age       string
	// ReplayTo is the destination a replay publishes to; NoReplay says
	// why there is none.
	ReplayTo, NoReplay string
}

type header struct{ Name, Value string }

func (c *Console) deadLetterShow(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r, "id")
	if !ok {
		c.fail(w, r, http.StatusNotFound, "A dead letter's ID is a positive number.", nil)
		return
	}
	p := &dlShowPage{base: c.base(r, fmt.Sprintf("Dead letter %d", id), "dead-letters"), Missing: c.dl == nil}
	if c.dl == nil {
		c.render(w, r, http.StatusOK, "deadletter", p)
		return
	}
	d, err := c.dl.DeadLetterGet(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No dead letter has ID %d: it was replayed or discarded, or never was.", id), nil)
		return
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	now := c.now()
	p.DeadLetterDetail = d
	p.Consumer, p.MessageID, p.Type = show(d.Key.Consumer), show(d.Key.MessageID), show([]byte(d.Type))
	p.ConsumerHref = query("consumer", string(d.Key.Consumer))
	p.Group = failgroup.Of(d.Error)
	p.GroupHref = query("consumer", string(d.Key.Consumer), "group", p.Group)
	p.Headers, p.HeadersErr = viewHeaders(d.Headers)
	p.Payload, p.PayloadHref = viewPayload(d.Payload), fmt.Sprintf("%d/payload", id)
	p.Retention, p.Age = duration(c.cfg.Retention), age(now, d.FailedAt)
	if dest := c.cfg.Replay[string(d.Key.Consumer)]; dest != nil {
		p.ReplayTo = dest.Subject
	} else {
		p.NoReplay = noDestination(d.Key.Consumer)
	}
	switch {
	case d.RowState == store.RowNone && len(d.Key.MessageID) > 0:
		p.Forgotten = "The inbox no longer remembers this message: its row was pruned. A replay would be processed as new."
	case d.RowState == store.RowDead && now.Sub(d.FailedAt) > c.cfg.Retention:
		p.Forgotten = fmt.Sprintf("This dead letter is older than the retention (%s): the inbox no longer remembers it once its row is pruned. A replay would then be processed as new.", duration(c.cfg.Retention))
	}
	c.render(w, r, http.StatusOK, "deadletter", p)
}

func (c *Console) deadLetterPayload(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r, "id")
	if !ok || c.dl == nil {
		c.fail(w, r, http.StatusNotFound, "No such dead letter.", nil)
		return
	}
	d, err := c.dl.DeadLetterGet(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No dead letter has ID %d.", id), nil)
		return
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	download(w, r, fmt.Sprintf("dead-letter-%d.bin", id), d.Payload)
}

// viewHeaders decodes headers for a page, by name.
func viewHeaders(b []byte) ([]header, string) {
	if len(b) == 0 {
		return nil, ""
	}
	h, err := headers.Decode(b)
	if err != nil {
		return nil, "The headers cannot be read: " + err.Error()
	}
	var out []header
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = append(out, header{Name: show([]byte(k)), Value: show([]byte(h[k]))})
	}
	return out, ""
}
