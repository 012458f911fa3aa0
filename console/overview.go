package console

import (
	"bytes"
	"context"
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/inboxkit/inbox/store"
)

// overviewGroups is how many error groups the overview shows per
// consumer.
const overviewGroups = 3

type overviewPage struct {
	base
	Window string
	// The interfaces the driver lacks: the page says what it cannot show.
	NoInspector, NoActivity, NoOutbox bool
	Consumers                         []*consumerView
	Outbox                            *outboxStatsView
}

type consumerView struct {
	Name  string
	Query template.URL // ?consumer=…
	Chart *chart
	// Retrying is nil when none is being retried.
	Retrying    *store.RetryingStats
	RetryingAge string
	DeadLetters int64
	Groups      []groupView
	key         []byte
}

type groupView struct {
	Name       string
	Count      int64
	Href       template.URL
	First      time.Time
	Last       time.Time
	Unassigned bool
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := c.now()
	p := &overviewPage{base: c.base(r, "Overview", "overview"), Window: duration(c.cfg.ThroughputWindow),
		NoInspector: c.dl == nil, NoActivity: c.act == nil, NoOutbox: c.outbox == nil}
	byName := map[string]*consumerView{}
	consumer := func(name []byte) *consumerView {
		v := byName[string(name)]
		if v == nil {
			v = &consumerView{Name: show(name), Query: query("consumer", string(name)), key: name}
			byName[string(name)] = v
		}
		return v
	}
	if c.dl != nil {
		counts, err := c.consumers(ctx)
		if err != nil {
			c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
			return
		}
		for _, n := range counts {
			consumer(n.Consumer).DeadLetters = n.DeadLetters
		}
	}
	minutes := int(c.cfg.ThroughputWindow / time.Minute)
	start := now.UTC().Truncate(time.Minute).Add(-time.Duration(minutes-1) * time.Minute)
	var counts map[string][]int64
	if c.act != nil {
		buckets, err := c.act.Throughput(ctx, &store.ThroughputParams{Since: start})
		if err != nil {
			c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
			return
		}
		counts = throughput(buckets, start, minutes)
		for name := range counts {
			consumer([]byte(name))
		}
		retrying, err := c.act.Retrying(ctx, nil)
		if err != nil {
			c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
			return
		}
		for _, s := range retrying {
			v := consumer(s.Consumer)
			v.Retrying, v.RetryingAge = s, age(now, s.OldestFailedAt)
		}
	}
	for _, v := range byName {
		p.Consumers = append(p.Consumers, v)
	}
	slices.SortFunc(p.Consumers, func(a, b *consumerView) int { return bytes.Compare(a.key, b.key) })
	for _, v := range p.Consumers {
		if c.act != nil {
			n := counts[string(v.key)]
			if n == nil {
				n = make([]int64, minutes)
			}
			v.Chart = newChart(start, n)
		}
		if c.dl != nil && v.DeadLetters > 0 {
			groups, err := c.dl.DeadLetterGroups(ctx, &store.DeadLetterSearchParams{Consumer: v.key, Limit: overviewGroups})
			if err != nil {
				c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
				return
			}
			v.Groups = groupViews(groups, "consumer", string(v.key))
		}
	}
	if c.outbox != nil {
		s, err := c.outbox.OutboxStats(ctx)
		if err != nil {
			c.fail(w, r, http.StatusInternalServerError, storeFailed, err)
			return
		}
		p.Outbox = newOutboxStatsView(s)
	}
	c.render(w, r, http.StatusOK, "overview", p)
}

// consumers lists the consumers with their dead letters. Without
// ActivityInspector it takes them from Stats, which reads every row of
// the inbox's three tables.
func (c *Console) consumers(ctx context.Context) ([]*store.ConsumerCount, error) {
	if c.act != nil {
		return c.act.Consumers(ctx)
	}
	stats, err := c.dl.Stats(ctx, &store.StatsParams{})
	out := make([]*store.ConsumerCount, 0, len(stats))
	for _, s := range stats {
		out = append(out, &store.ConsumerCount{Consumer: s.Consumer, DeadLetters: s.DeadLetters})
	}
	return out, err
}

// groupViews are groups with links to the dead letters of each, under
// the filter pairs.
func groupViews(groups []*store.DeadLetterGroup, filter ...string) []groupView {
	out := make([]groupView, 0, len(groups))
	for _, g := range groups {
		v := groupView{Name: g.Group, Count: g.Count, First: g.FirstFailedAt, Last: g.LastFailedAt}
		if g.Group == "" {
			// Written before the stores recorded groups: no filter finds
			// them by group.
			v.Name, v.Unassigned = "(no group yet: inbox migrate fills it in)", true
		} else {
			v.Href = query(append(filter, "group", g.Group)...)
		}
		out = append(out, v)
	}
	return out
}
