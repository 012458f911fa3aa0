package console

import (
	"html/template"
	"net/http"
	"time"

	"github.com/inboxkit/inbox/store"
)

type retryingPage struct {
	base
	Missing bool
	// Consumer is the filter, as show writes it; empty for every one.
	Consumer string
	Rows     []retryingRow
	Next     template.URL
	First    template.URL
}

type retryingRow struct {
	Consumer, MessageID, Error    string
	Attempts, Transient           int
	FirstFailedAt, LastFailedAt   time.Time
	FailingFor                    string
	ConsumerHref, DeadLettersHref template.URL
}

// retrying lists the messages being retried, of one consumer or of all,
// in key order, a page at a time after the last key.
func (c *Console) retrying(w http.ResponseWriter, r *http.Request) {
	p := &retryingPage{base: c.base(r, "In retry", "retrying"), Missing: c.act == nil}
	if c.act == nil {
		c.render(w, r, http.StatusOK, "retrying", p)
		return
	}
	q := r.URL.Query()
	consumer := parseShown(q.Get("consumer"))
	p.Consumer = show(consumer)
	lp := &store.RetryingListParams{Limit: c.limit(r) + 1}
	if len(consumer) > 0 {
		lp.Consumer = consumer
	}
	lp.After = store.Key{Consumer: []byte(q.Get("after-consumer")), MessageID: []byte(q.Get("after-id"))}
	found, err := c.act.RetryingList(r.Context(), lp)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
		return
	}
	if len(found) == lp.Limit {
		found = found[:len(found)-1]
		last := found[len(found)-1].Key
		p.Next = query("consumer", string(consumer), "after-consumer", string(last.Consumer), "after-id", string(last.MessageID))
	}
	if len(lp.After.Consumer) > 0 {
		if p.First = query("consumer", string(consumer)); p.First == "" {
			p.First = "?"
		}
	}
	now := c.now()
	for _, m := range found {
		p.Rows = append(p.Rows, retryingRow{
			Consumer: show(m.Key.Consumer), MessageID: show(m.Key.MessageID), Error: m.LastError,
			Attempts: m.Attempts, Transient: m.TransientFailures,
			FirstFailedAt: m.FirstFailedAt, LastFailedAt: m.LastFailedAt, FailingFor: age(now, m.FirstFailedAt),
			ConsumerHref: query("consumer", string(m.Key.Consumer)),
		})
	}
	c.render(w, r, http.StatusOK, "retrying", p)
}
