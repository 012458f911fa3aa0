package consoletest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/store"
)

// publisher records what a replay publishes, and fails with err when
// set.
type publisher struct {
	mu   sync.Mutex
	msgs []*broker.Message
	err  error
}

func (p *publisher) Publish(_ context.Context, m *broker.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.msgs = append(p.msgs, m)
	return nil
}

func (p *publisher) published() []*broker.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*broker.Message(nil), p.msgs...)
}

// actionEnv is a console with actions on tables of its own.
type actionEnv[TTx any] struct {
	d   store.Driver[TTx]
	f   *fixture
	srv *httptest.Server
	pub *publisher
}

func newActionEnv[TTx any](t *testing.T, open Open[TTx], edit func(*console.Config)) *actionEnv[TTx] {
	t.Helper()
	e := &actionEnv[TTx]{d: open(t), pub: &publisher{}}
	e.f = fill(t, e.d)
	cfg := &console.Config{Logger: quiet, Replay: map[string]*console.Destination{
		billing: {Publisher: e.pub, Subject: "payments.billing"},
	}}
	if edit != nil {
		edit(cfg)
	}
	c, err := console.New(e.d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(c)
	t.Cleanup(e.srv.Close)
	return e
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token reads the form token of the page at path.
func (e *actionEnv[TTx]) token(t *testing.T, path string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(must(t, e.srv.URL+path, 200).body)
	if m == nil {
		t.Fatalf("%s: no form token", path)
	}
	return m[1]
}

// post posts form to path without following a redirect.
func (e *actionEnv[TTx]) post(t *testing.T, path string, form url.Values, edit ...func(*http.Request)) *page {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, f := range edit {
		f(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return &page{status: resp.StatusCode, header: resp.Header, body: string(body), url: req.URL}
}

// followed is the page a 303 leads to.
func (e *actionEnv[TTx]) followed(t *testing.T, p *page, wantLocation string) *page {
	t.Helper()
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || loc != wantLocation {
		t.Fatalf("POST %s: %d to %q; want 303 to %q\n%.1500s", p.url.Path, p.status, loc, wantLocation, p.body)
	}
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	return must(t, p.url.ResolveReference(u).String(), 200)
}

func (e *actionEnv[TTx]) deadLetter(t *testing.T, id int64) (*store.DeadLetterDetail, bool) {
	t.Helper()
	d, err := e.d.(store.Inspector[TTx]).DeadLetterGet(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return d, true
}

// process hands msg to billing's inbox, as its consumer would, and
// returns the status and how often the handler ran.
func process[TTx any](t *testing.T, d store.Driver[TTx], msg *broker.Message) (inbox.Status, int) {
	t.Helper()
	ib, err := inbox.New(context.Background(), d, &inbox.Config{Consumer: billing, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	out, err := ib.Process(context.Background(), inbox.Message{ID: msg.ID, Type: msg.Type, Payload: msg.Payload, Headers: msg.Headers},
		func(context.Context, TTx, *inbox.Message) error { runs++; return nil })
	if err != nil {
		t.Fatalf("processing the replayed %q: %v", msg.ID, err)
	}
	return out.Status, runs
}

// testForgery: a POST without the form's token, with a forged or stale
// one, or from another site changes nothing; read-only refuses every
// POST and shows no form.
func testForgery[TTx any](t *testing.T, open Open[TTx]) {
	e := newActionEnv(t, open, nil)
	id := e.f.dead["expired"]
	path := fmt.Sprintf("/dead-letters/%d/discard", id)
	tok := e.token(t, fmt.Sprintf("/dead-letters/%d", id))
	exp, _, _ := strings.Cut(tok, ".")
	for _, tc := range []struct {
		name string
		form url.Values
		edit func(*http.Request)
	}{
		{"no token", url.Values{}, nil},
		{"a forged token", url.Values{"csrf": {exp + ".AAAA"}}, nil},
		{"a token moved in time", url.Values{"csrf": {"99999999999." + strings.SplitN(tok, ".", 2)[1]}}, nil},
		{"the token in the query, not the form", url.Values{}, func(r *http.Request) { r.URL.RawQuery = "csrf=" + url.QueryEscape(tok) }},
		{"another site", url.Values{"csrf": {tok}}, func(r *http.Request) {
			r.Header.Set("Sec-Fetch-Site", "cross-site")
			r.Header.Set("Origin", "https://evil.example")
		}},
	} {
		var edit []func(*http.Request)
		if tc.edit != nil {
			edit = append(edit, tc.edit)
		}
		if p := e.post(t, path, tc.form, edit...); p.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", tc.name, p.status)
		}
	}
	if _, ok := e.deadLetter(t, id); !ok {
		t.Fatal("a refused POST discarded the dead letter")
	}

	ro := newActionEnv(t, open, func(c *console.Config) { c.ReadOnly = true })
	rid := ro.f.dead["expired"]
	for _, path := range []string{fmt.Sprintf("/dead-letters/%d", rid), "/dead-letters", fmt.Sprintf("/outbox/%d", ro.f.seq["o-3"]), "/outbox?state=parked",
		"/dead-letters/bulk?action=discard"} {
		if body := must(t, ro.srv.URL+path, 200).body; strings.Contains(body, `method="post"`) || strings.Contains(body, "bulk-discard") {
			t.Errorf("read-only %s: shows an action", path)
		}
	}
	if p := ro.post(t, fmt.Sprintf("/dead-letters/%d/discard", rid), url.Values{"csrf": {tok}}); p.status != http.StatusMethodNotAllowed || p.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("read-only POST: %d, Allow %q; want 405, GET, HEAD", p.status, p.header.Get("Allow"))
	}
	if _, ok := ro.deadLetter(t, rid); !ok {
		t.Fatal("a read-only console discarded the dead letter")
	}
}

// testDiscard discards one dead letter, then finds it gone.
func testDiscard[TTx any](t *testing.T, open Open[TTx]) {
	e := newActionEnv(t, open, nil)
	id := e.f.dead["expired"]
	path := fmt.Sprintf("/dead-letters/%d", id)
	form := url.Values{"csrf": {e.token(t, path)}}
	after := e.followed(t, e.post(t, path+"/discard", form), fmt.Sprintf("../../dead-letters?done=discarded&id=%d", id))
	after.contains(t, fmt.Sprintf("Dead letter %d was discarded.", id))
	if _, ok := e.deadLetter(t, id); ok {
		t.Fatal("the dead letter is still there")
	}
	if p := e.post(t, path+"/discard", form); p.status != http.StatusNotFound {
		t.Errorf("discarded again: %d, want 404", p.status)
	}
}

// testReplay replays a dead letter: the copy is published, the consumer
// processes it once, a redelivery is a duplicate. A consumer without a
// destination, a failed publish and a duplicate window change nothing.
func testReplay[TTx any](t *testing.T, open Open[TTx]) {
	e := newActionEnv(t, open, nil)
	id := e.f.dead["json-1"]
	path := fmt.Sprintf("/dead-letters/%d", id)
	shown := must(t, e.srv.URL+path, 200)
	shown.contains(t, "Replay to payments.billing")
	form := url.Values{"csrf": {e.token(t, path)}}

	e.pub.err = errors.New("broker down")
	if p := e.post(t, path+"/replay", form); p.status != http.StatusBadGateway || !strings.Contains(p.body, "changed nothing") {
		t.Errorf("replay with the broker down: %d, want 502 that says nothing changed", p.status)
	}
	e.pub.err = fmt.Errorf("stream saw it: %w", broker.ErrDuplicate)
	if p := e.post(t, path+"/replay", form); p.status != http.StatusConflict || !strings.Contains(p.body, "duplicate window") {
		t.Errorf("replay within a duplicate window: %d, want 409 that names the window", p.status)
	}
	if d, ok := e.deadLetter(t, id); !ok || d.RowState != store.RowDead {
		t.Fatalf("after failed replays: the dead letter %v, row %v; want both kept", ok, d)
	}
	e.pub.err = nil

	after := e.followed(t, e.post(t, path+"/replay", form), fmt.Sprintf("../../dead-letters?done=replayed&id=%d", id))
	after.contains(t, fmt.Sprintf("Dead letter %d was replayed", id))
	msgs := e.pub.published()
	if len(msgs) != 1 || msgs[0].ID != "json-1" || msgs[0].Subject != "payments.billing" || msgs[0].Type != "refund" || !strings.Contains(string(msgs[0].Payload), `"order":"o-1"`) {
		t.Fatalf("published %+v; want json-1 to payments.billing with its payload", msgs)
	}
	if st, runs := process(t, e.d, msgs[0]); st != inbox.Processed || runs != 1 {
		t.Fatalf("the replayed copy: %v, handler ran %d times; want processed once", st, runs)
	}
	if st, runs := process(t, e.d, msgs[0]); st != inbox.Duplicate || runs != 0 {
		t.Fatalf("the copy redelivered: %v, handler ran %d times; want a duplicate", st, runs)
	}
	if p := e.post(t, path+"/replay", form); p.status != http.StatusNotFound {
		t.Errorf("replayed again: %d, want 404", p.status)
	}

	evil := e.f.dead[EvilID]
	if p := e.post(t, fmt.Sprintf("/dead-letters/%d/replay", evil), form); p.status != http.StatusConflict || !strings.Contains(p.body, "no destination") {
		t.Errorf("replay of a consumer without a destination: %d, want 409", p.status)
	} else if strings.Contains(p.body, Script) {
		t.Error("the refusal shows the consumer's name unescaped")
	}
	if len(e.pub.published()) != 1 {
		t.Error("a refused replay published")
	}
}

// testBulk replays a group and discards the rest of a filter after the
// page that counts them. A dead letter made after the count is left.
func testBulk[TTx any](t *testing.T, open Open[TTx]) {
	e := newActionEnv(t, open, nil)
	q := url.Values{"consumer": {billing}, "group": {poisonGroup}, "action": {"replay"}}
	confirm := must(t, e.srv.URL+"/dead-letters/bulk?"+q.Encode(), 200)
	confirm.contains(t, `id="bulk-count">3<`, "payments.billing", "Replay 3 dead letters")
	form := url.Values{"csrf": {e.token(t, "/dead-letters/bulk?"+q.Encode())}, "action": {"replay"}, "consumer": {billing}, "group": {poisonGroup},
		"through": {regexp.MustCompile(`name="through" value="(\d+)"`).FindStringSubmatch(confirm.body)[1]}}

	// Dead-lettered after the count: not taken.
	ib, err := inbox.New(context.Background(), e.d, &inbox.Config{Consumer: billing, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := ib.Process(context.Background(), inbox.Message{ID: "poison-9", Type: "charge"},
		func(context.Context, TTx, *inbox.Message) error {
			return inbox.Permanent(errors.New("charge poison-00009: card declined"))
		}); out.Status != inbox.DeadLettered {
		t.Fatalf("poison-9: %v", out.Status)
	}
	done := e.post(t, "/dead-letters/bulk", form)
	if done.status != 200 || !strings.Contains(done.body, `id="bulk-done">3<`) {
		t.Fatalf("bulk replay: %d\n%.2000s", done.status, done.body)
	}
	got := map[string]bool{}
	for _, m := range e.pub.published() {
		got[m.ID] = true
		if st, runs := process(t, e.d, m); st != inbox.Processed || runs != 1 {
			t.Errorf("replayed %s: %v, %d runs; want processed once", m.ID, st, runs)
		}
	}
	if len(got) != 3 || !got["poison-0"] || !got["poison-1"] || !got["poison-2"] {
		t.Errorf("published %v; want poison-0..2", got)
	}
	left := must(t, e.srv.URL+"/dead-letters?group="+url.QueryEscape(poisonGroup), 200)
	if ids := left.dlIDs(); len(ids) != 1 {
		t.Errorf("after the bulk replay, the group lists %v; want poison-9 alone", ids)
	}

	// Discard every refund, after confirming.
	confirm = must(t, e.srv.URL+"/dead-letters/bulk?action=discard&type=refund", 200)
	confirm.contains(t, `id="bulk-count">3<`)
	through := regexp.MustCompile(`name="through" value="(\d+)"`).FindStringSubmatch(confirm.body)[1]
	done = e.post(t, "/dead-letters/bulk", url.Values{"csrf": {e.token(t, "/dead-letters/bulk?action=discard&type=refund")}, "action": {"discard"}, "type": {"refund"}, "through": {through}})
	if done.status != 200 || !strings.Contains(done.body, `id="bulk-done">3<`) {
		t.Fatalf("bulk discard: %d\n%.2000s", done.status, done.body)
	}
	if ids := must(t, e.srv.URL+"/dead-letters?type=refund", 200).dlIDs(); len(ids) != 0 {
		t.Errorf("refunds left after the bulk discard: %v", ids)
	}
	// A replay of a consumer without a destination is not offered.
	blocked := must(t, e.srv.URL+"/dead-letters/bulk?action=replay", 200)
	if blocked.contains(t, "no destination"); strings.Contains(blocked.body, `method="post"`) {
		t.Error("a bulk replay that includes a consumer without a destination is offered")
	}
}

// testOutboxActions unparks a parked row and discards another, alone and
// in bulk.
func testOutboxActions[TTx any](t *testing.T, open Open[TTx]) {
	e := newActionEnv(t, open, nil)
	seq := e.f.seq["o-3"]
	path := fmt.Sprintf("/outbox/%d", seq)
	form := url.Values{"csrf": {e.token(t, path)}}
	after := e.followed(t, e.post(t, path+"/unpark", form), fmt.Sprintf("../../outbox?done=unparked&id=%d", seq))
	after.contains(t, fmt.Sprintf("Outbox row %d was unparked", seq))
	row, err := e.d.(store.OutboxInspector).OutboxGet(context.Background(), seq)
	if err != nil || row.State() != string(store.OutboxStatePending) || row.Attempts != 0 {
		t.Fatalf("after unpark: %+v, %v; want pending with no attempts", row, err)
	}
	if p := e.post(t, path+"/unpark", form); p.status != http.StatusNotFound {
		t.Errorf("unparked again: %d, want 404", p.status)
	}

	// Park every row again, then discard those to orders in bulk.
	rs := e.d.(store.OutboxRelayer)
	ctx := context.Background()
	tok := []byte("tok-fedcba987654")
	recs, err := rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Minute, Token: tok})
	if err != nil || len(recs) != 3 {
		t.Fatalf("claimed %d, %v; want 3", len(recs), err)
	}
	var fails []store.OutboxFailure
	for _, r := range recs {
		fails = append(fails, store.OutboxFailure{Seq: r.Seq, Park: true, Error: "no route"})
	}
	if err := rs.OutboxFail(ctx, tok, fails); err != nil {
		t.Fatal(err)
	}
	confirm := must(t, e.srv.URL+"/outbox/bulk?action=discard&destination=orders", 200)
	confirm.contains(t, `id="bulk-count">2<`)
	through := regexp.MustCompile(`name="through" value="(\d+)"`).FindStringSubmatch(confirm.body)[1]
	done := e.post(t, "/outbox/bulk", url.Values{"csrf": {e.token(t, "/outbox/bulk?action=discard&destination=orders")}, "action": {"discard"}, "destination": {"orders"}, "through": {through}})
	if done.status != 200 || !strings.Contains(done.body, `id="bulk-done">2<`) {
		t.Fatalf("bulk discard: %d\n%.2000s", done.status, done.body)
	}
	st, err := e.d.(store.OutboxInspector).OutboxStats(ctx)
	if err != nil || st.Parked != 1 || st.Pending != 0 {
		t.Fatalf("after the bulk discard: %+v, %v; want payments' row parked alone", st, err)
	}
}
