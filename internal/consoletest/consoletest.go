// Package consoletest is the web console's test suite, run over real HTTP
// against every store: package console's tests run it on PostgreSQL and
// MySQL, tests/console on SQLite, whose module the root cannot import.
package consoletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
)

// quiet drops the inbox's log of the fixture's failures.
var quiet = slog.New(slog.DiscardHandler)

// Open returns a driver on fresh, migrated tables, closed when t ends.
type Open[TTx any] func(t *testing.T) store.Driver[TTx]

// The hostile values of the fixture: markup, invalid UTF-8, NUL bytes and
// a right-to-left override in every field a page shows.
const (
	Script   = "<script>alert(1)</script>"
	Img      = `"><img src=x onerror=alert(1)>`
	Evil     = "evil" + Script + "\xff\u202e"
	EvilID   = Img + "\x00\xff\u202e"
	EvilType = Script
	EvilErr  = Script + " \u202e\x00 failed " + Img
)

// The fixture's consumers and their dead letters.
const (
	billing = "billing"
	// poisonGroup is the group of billing's three "charge poison-N" dead
	// letters.
	poisonGroup = "charge poison-<n>: card declined"
)

// fixture is what fill wrote.
type fixture struct {
	// dead are the dead letters' IDs by message ID.
	dead map[string]int64
	// retrying: whether the store tells retries (ActivityInspector).
	activity bool
	seq      map[string]int64
	evilSize int
}

// fill processes messages through inbox.Inbox with failing handlers, and
// writes outbox rows through outbox, parking one through the relay's
// store calls:
//
//	billing: ok-1..ok-3 processed; charge poison-0..2 (card declined),
//	  expired and json-1 (card expired, json-1 with a JSON payload) and
//	  bin-1 (bad payload, binary) dead; retry-1 failed once (timeout)
//	Evil:    EvilID dead, with EvilType, headers, EvilErr, 1 MiB payload
//	outbox:  o-1, o-2 pending; o-3 parked with an error of markup
func fill[TTx any](t *testing.T, d store.Driver[TTx]) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{dead: map[string]int64{}, seq: map[string]int64{}}
	_, f.activity = d.(store.ActivityInspector)
	newInbox := func(consumer string) *inbox.Inbox[TTx] {
		ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: consumer, MaxAttempts: 3, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return ib
	}
	b, evil := newInbox(billing), newInbox(Evil)
	ok := func(context.Context, TTx, *inbox.Message) error { return nil }
	fail := func(err error) inbox.Handler[TTx] {
		return func(context.Context, TTx, *inbox.Message) error { return err }
	}
	evilPayload := bytes.Repeat([]byte(Script+Img+"\u202e "), (1<<20)/60) // text: shown, not dumped
	f.evilSize = len(evilPayload)
	steps := []struct {
		ib   *inbox.Inbox[TTx]
		m    inbox.Message
		h    inbox.Handler[TTx]
		want inbox.Status
	}{
		{b, inbox.Message{ID: "ok-1"}, ok, inbox.Processed},
		{b, inbox.Message{ID: "poison-0", Type: "charge", Payload: []byte("p0")}, fail(inbox.Permanent(errors.New("charge poison-00000: card declined"))), inbox.DeadLettered},
		{b, inbox.Message{ID: "ok-2"}, ok, inbox.Processed},
		{b, inbox.Message{ID: "poison-1", Type: "charge", Payload: []byte("p1")}, fail(inbox.Permanent(errors.New("charge poison-00001: card declined"))), inbox.DeadLettered},
		{b, inbox.Message{ID: "poison-2", Type: "charge", Payload: []byte("p2")}, fail(inbox.Permanent(errors.New("charge poison-00002: card declined"))), inbox.DeadLettered},
		{b, inbox.Message{ID: "expired", Type: "refund", Payload: []byte("x")}, fail(inbox.Permanent(errors.New("card expired"))), inbox.DeadLettered},
		{b, inbox.Message{ID: "json-1", Type: "refund", Payload: []byte(`{"order":"o-1","note":"<b>bold</b>","amount":20}`)}, fail(inbox.Permanent(errors.New("card expired"))), inbox.DeadLettered},
		{b, inbox.Message{ID: "bin-1", Type: "refund", Payload: []byte("\xff\x00\x01\x02 binary \xfe")}, fail(inbox.Permanent(errors.New("bad payload"))), inbox.DeadLettered},
		{b, inbox.Message{ID: "retry-1"}, fail(errors.New("timeout after 5s")), inbox.Retry},
		{b, inbox.Message{ID: "ok-3"}, ok, inbox.Processed},
		{evil, inbox.Message{ID: EvilID, Type: EvilType, Payload: evilPayload,
			Headers: map[string]string{"<b>h</b>\xff": Img, "trace": "\u202e\x00"}}, fail(inbox.Permanent(errors.New(EvilErr))), inbox.DeadLettered},
	}
	for i, s := range steps {
		time.Sleep(3 * time.Millisecond) // each dead letter its own failed_at
		out, err := s.ib.Process(ctx, s.m, s.h)
		if out.Status != s.want {
			t.Fatalf("fixture step %d (%q): %v, %v; want %v", i, s.m.ID, out.Status, err, s.want)
		}
	}
	in := d.(store.Inspector[TTx])
	all, err := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 100})
	if err != nil || len(all) != 7 {
		t.Fatalf("fixture: %d dead letters, %v; want 7", len(all), err)
	}
	for _, dl := range all {
		f.dead[string(dl.Key.MessageID)] = dl.ID
	}

	ob, err := outbox.New(ctx, d.(store.OutboxWriter[TTx]), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*outbox.Message{
		{ID: "o-1", Destination: "orders", Type: "placed", Payload: []byte(`{"n":1}`)},
		{ID: "o-2", Destination: "orders", Type: "placed", Payload: []byte(`{"n":2}`)},
		{ID: "o-3", Destination: "payments", Type: "charge", Payload: []byte("charge " + Script), Headers: map[string]string{"x": Img}},
	} {
		tx, err := d.Begin(ctx, &store.BeginParams{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Write(ctx, tx, m); err != nil {
			_ = d.Rollback(ctx, tx)
			t.Fatal(err)
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	rs := d.(store.OutboxRelayer)
	recs, err := rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 3, Lease: time.Minute, Token: []byte("tok-0123456789ab")})
	if err != nil || len(recs) != 3 {
		t.Fatalf("fixture: claimed %d outbox rows, %v; want 3", len(recs), err)
	}
	var fails []store.OutboxFailure
	for _, r := range recs {
		f.seq[string(r.ID)] = r.Seq
		if string(r.ID) == "o-3" {
			fails = append(fails, store.OutboxFailure{Seq: r.Seq, Park: true, Error: "refused: " + Script})
		} else {
			fails = append(fails, store.OutboxFailure{Seq: r.Seq, Released: true})
		}
	}
	if err := rs.OutboxFail(ctx, []byte("tok-0123456789ab"), fails); err != nil {
		t.Fatal(err)
	}
	return f
}

// Run runs the suite: it fills one set of tables and runs its cases in
// parallel, each on a console of its own over real HTTP.
func Run[TTx any](t *testing.T, open Open[TTx]) {
	d := open(t)
	f := fill(t, d)
	serve := func(t *testing.T, cfg *console.Config) *httptest.Server {
		t.Helper()
		c, err := console.New(d, cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		return srv
	}
	tests := []struct {
		name string
		run  func(t *testing.T, srv func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture)
	}{
		{"overview", testOverview[TTx]},
		{"dead letters filtered", testDeadLetterFilters[TTx]},
		{"dead letters paged", testDeadLetterPaging[TTx]},
		{"dead letter shown", testDeadLetterShow[TTx]},
		{"hostile values escaped", testHostile[TTx]},
		{"outbox", testOutbox[TTx]},
		{"security headers and methods", testHeaders[TTx]},
		{"authentication", testAuth[TTx]},
		{"mounted under a prefix", testPrefix[TTx]},
		{"a driver without the inspectors", testMissing[TTx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, serve, d, f)
		})
	}
	// The actions change what they act on: each case fills tables of its
	// own.
	actions := []struct {
		name string
		run  func(t *testing.T, open Open[TTx])
	}{
		{"forged and read-only POSTs refused", testForgery[TTx]},
		{"discard", testDiscard[TTx]},
		{"replay", testReplay[TTx]},
		{"bulk replay and discard", testBulk[TTx]},
		{"outbox unpark and discard", testOutboxActions[TTx]},
	}
	for _, tc := range actions {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open)
		})
	}
}

// page is a response as the tests read it.
type page struct {
	status int
	header http.Header
	body   string
	url    *url.URL
}

// get requests u, with auth set on it by the optional edit.
func get(t *testing.T, u string, edit ...func(*http.Request)) *page {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edit {
		e(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &page{status: resp.StatusCode, header: resp.Header, body: string(b), url: req.URL}
}

// must requests u and fails t unless the status is want.
func must(t *testing.T, u string, want int) *page {
	t.Helper()
	p := get(t, u)
	if p.status != want {
		t.Fatalf("GET %s: %d, want %d\n%s", u, p.status, want, p.body)
	}
	return p
}

var hrefRE = regexp.MustCompile(`href="([^"]*)"`)

// links are the page's links, resolved, whose text matches text (a
// regular expression on the escaped HTML between the tags).
func (p *page) links(t *testing.T, text string) []string {
	t.Helper()
	re := regexp.MustCompile(`<a[^>]* href="([^"]*)"[^>]*>` + text + `</a>`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(p.body, -1) {
		out = append(out, p.resolve(t, m[1]))
	}
	return out
}

func (p *page) resolve(t *testing.T, href string) string {
	t.Helper()
	ref, err := url.Parse(html.UnescapeString(href))
	if err != nil {
		t.Fatalf("link %q: %v", href, err)
	}
	return p.url.ResolveReference(ref).String()
}

// link is the one link whose text matches text.
func (p *page) link(t *testing.T, text string) string {
	t.Helper()
	l := p.links(t, text)
	if len(l) != 1 {
		t.Fatalf("%s: %d links with text %q, want 1: %v\n%s", p.url, len(l), text, l, p.body)
	}
	return l[0]
}

// dlIDs are the dead letter IDs a list page shows, in order.
func (p *page) dlIDs() []int64 {
	var out []int64
	for _, m := range regexp.MustCompile(`<a class="dl" href="[^"]*">(\d+)</a>`).FindAllStringSubmatch(p.body, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, n)
	}
	return out
}

func (p *page) contains(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(p.body, w) {
			t.Errorf("%s lacks %q", p.url, w)
		}
	}
}

func testOverview[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, nil)
	p := must(t, srv.URL+"/", 200)
	// The dead letters' count links to the consumer's list: billing 6,
	// the other 1.
	counts := regexp.MustCompile(`<a class="deadletters[^"]*" href="([^"]*)">(\d+)</a>`).FindAllStringSubmatch(p.body, -1)
	if len(counts) != 2 || counts[0][2] != "6" || counts[1][2] != "1" {
		t.Fatalf("dead letters per consumer %v, want billing 6 and the other 1", counts)
	}
	for i, want := range []string{billing, Evil} {
		if u, _ := url.Parse(p.resolve(t, counts[i][1])); u.Path != "/dead-letters" || u.Query().Get("consumer") != want {
			t.Errorf("the dead letters of %q link to %s, want /dead-letters?consumer=…", want, u)
		}
	}
	if ids := must(t, p.resolve(t, counts[0][1]), 200).dlIDs(); len(ids) != 6 {
		t.Errorf("billing's link lists %d dead letters, want the 6 counted", len(ids))
	}
	// The largest group first, linked with the consumer and the group.
	g := p.link(t, regexp.QuoteMeta(html.EscapeString(poisonGroup)))
	if u, _ := url.Parse(g); u.Query().Get("group") != poisonGroup || u.Query().Get("consumer") != billing {
		t.Errorf("group link %s, want consumer=billing and group=%q", g, poisonGroup)
	}
	if i, j, k := strings.Index(p.body, html.EscapeString(poisonGroup)), strings.Index(p.body, "card expired"), strings.Index(p.body, "bad payload"); i < 0 || j < i || k < j {
		t.Errorf("the overview lists the groups of 3, 2 and 1 at %d, %d, %d: want them in that order", i, j, k)
	}
	// Following the group's link lists its 3 dead letters.
	if ids := must(t, g, 200).dlIDs(); len(ids) != 3 {
		t.Errorf("the group's link lists %v, want 3 dead letters", ids)
	}
	// Outbox: 2 pending, 1 parked, each linking to its state.
	for id, want := range map[string]string{"outbox-pending": "2", "outbox-parked": "1"} {
		m := regexp.MustCompile(`<a id="` + id + `" href="([^"]*)"[^>]*>(\d+)</a>`).FindStringSubmatch(p.body)
		if m == nil || m[2] != want {
			t.Errorf("overview: %s shows %v, want %s", id, m, want)
			continue
		}
		state := strings.TrimPrefix(id, "outbox-")
		if u, _ := url.Parse(p.resolve(t, m[1])); u.Path != "/outbox" || u.Query().Get("state") != state {
			t.Errorf("overview: %s links to %s, want /outbox?state=%s", id, u, state)
		}
	}
	if !f.activity {
		p.contains(t, "does not implement store.ActivityInspector")
		return
	}
	// billing: 3 processed and 6 dead rows in the window; 1 in retry.
	tp := regexp.MustCompile(`<strong class="throughput">(\d+)</strong>`).FindAllStringSubmatch(p.body, -1)
	if len(tp) != 2 || tp[0][1] != "9" || tp[1][1] != "1" {
		t.Errorf("throughput per consumer %v, want billing 9 and the other 1", tp)
	}
	if m := regexp.MustCompile(`<(?:a|span) class="retrying[^"]*"[^>]*>(\d+)</`).FindAllStringSubmatch(p.body, -1); len(m) != 2 || m[0][1] != "1" || m[1][1] != "0" {
		t.Errorf("in retry %v, want billing 1 and the other 0", m)
	}
	// billing's count links to its messages in retry: retry-1, and its
	// error.
	m := regexp.MustCompile(`<a class="retrying[^"]*" href="([^"]+)">1</a>`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatal("overview: billing's count in retry links nowhere")
	}
	retrying := must(t, p.resolve(t, html.UnescapeString(m[1])), 200)
	retrying.contains(t, "<td>retry-1</td>", "timeout after 5s")
	if strings.Contains(retrying.body, "ok-1") || strings.Contains(retrying.body, "poison-0") {
		t.Error("the messages in retry list a processed or dead-lettered message")
	}
	if other := must(t, p.url.ResolveReference(&url.URL{Path: "retrying", RawQuery: "consumer=" + url.QueryEscape(Evil)}).String(), 200); !strings.Contains(other.body, "No message is in retry") {
		t.Error("the messages in retry of the hostile consumer: some listed, want none")
	}
	if n := strings.Count(p.body, `<rect class="bar"`); n < 1 {
		t.Errorf("the charts draw %d bars, want some", n)
	}
}

func testDeadLetterFilters[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, nil)
	id := f.dead
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		query string
		want  []int64
	}{
		{"", []int64{id["poison-0"], id["poison-1"], id["poison-2"], id["expired"], id["json-1"], id["bin-1"], id[EvilID]}},
		{"consumer=billing", []int64{id["poison-0"], id["poison-1"], id["poison-2"], id["expired"], id["json-1"], id["bin-1"]}},
		{"consumer=" + url.QueryEscape(Evil), []int64{id[EvilID]}},
		{"consumer=" + url.QueryEscape(strconv.Quote(Evil)), []int64{id[EvilID]}}, // typed as shown
		{"type=refund", []int64{id["expired"], id["json-1"], id["bin-1"]}},
		{"group=" + url.QueryEscape(poisonGroup), []int64{id["poison-0"], id["poison-1"], id["poison-2"]}},
		{"group=card+expired&type=refund&consumer=billing", []int64{id["expired"], id["json-1"]}},
		{"error=00001", []int64{id["poison-1"]}},
		{"message-id=poison-2", []int64{id["poison-2"]}},
		{"message-id=" + url.QueryEscape(EvilID), []int64{id[EvilID]}},
		{"since=" + url.QueryEscape(future), nil},
		{"until=1h", nil},
		{"since=1h&until=" + url.QueryEscape(future) + "&type=charge", []int64{id["poison-0"], id["poison-1"], id["poison-2"]}},
	}
	for _, tc := range tests {
		p := must(t, srv.URL+"/dead-letters?"+tc.query, 200)
		if got := p.dlIDs(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("?%s lists %v, want %v", tc.query, got, tc.want)
		}
	}
	// The groups under a filter: billing's two, the largest first.
	p := must(t, srv.URL+"/dead-letters?consumer=billing", 200)
	groups := regexp.MustCompile(`<a class="group" href="([^"]*)">([^<]*)</a></td><td class="num">(\d+)</td>`).FindAllStringSubmatch(p.body, -1)
	if len(groups) != 3 || html.UnescapeString(groups[0][2]) != poisonGroup || groups[0][3] != "3" || groups[1][2] != "card expired" || groups[1][3] != "2" {
		t.Fatalf("billing's groups %v, want %q 3, \"card expired\" 2, \"bad payload\" 1", groups, poisonGroup)
	}
	// A group's link keeps the consumer filter.
	if u, _ := url.Parse(p.resolve(t, groups[1][1])); u.Query().Get("consumer") != billing || u.Query().Get("group") != "card expired" {
		t.Errorf("group link %s, want consumer and group", u)
	}
	// A filter the page cannot read is a 400 that says why.
	bad := must(t, srv.URL+"/dead-letters?since=yesterday", 400)
	bad.contains(t, "Invalid filter: since: want RFC 3339")
	if !strings.Contains(bad.body, `value="yesterday"`) {
		t.Errorf("the form lost the value typed")
	}
}

func testDeadLetterPaging[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, &console.Config{PageSize: 2})
	id := f.dead
	want := [][]int64{{id["poison-0"], id["poison-1"]}, {id["poison-2"], id["expired"]}, {id["json-1"], id["bin-1"]}}
	u := srv.URL + "/dead-letters?consumer=billing"
	for i, w := range want {
		p := must(t, u, 200)
		if got := p.dlIDs(); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("page %d (%s): %v, want %v", i+1, u, got, w)
		}
		next := p.links(t, "next page")
		if i < len(want)-1 && len(next) != 1 {
			t.Fatalf("page %d: %d next links, want 1", i+1, len(next))
		}
		if len(next) == 0 {
			// The last page ends the list: a next page would be empty.
			// The store cannot know that before it is asked, but the
			// extra row read tells.
			break
		}
		nu, _ := url.Parse(next[0])
		if nu.Query().Get("consumer") != billing || nu.Query().Get("after") != strconv.FormatInt(w[1], 10) {
			t.Errorf("page %d's next link %s, want the filter and after=%d", i+1, next[0], w[1])
		}
		u = next[0]
	}
	if p := must(t, u, 200); len(p.links(t, "next page")) != 0 || len(p.links(t, "first page")) != 1 {
		t.Errorf("the last page: want no next page and a first page link")
	}
	// ?limit overrides the page size.
	if got := must(t, srv.URL+"/dead-letters?limit=5", 200).dlIDs(); len(got) != 5 {
		t.Errorf("?limit=5 lists %d", len(got))
	}
}

func testDeadLetterShow[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, nil)
	js := must(t, fmt.Sprintf("%s/dead-letters/%d", srv.URL, f.dead["json-1"]), 200)
	js.contains(t, "shown as JSON", "{\n  &#34;order&#34;: &#34;o-1&#34;,\n  &#34;note&#34;: &#34;&lt;b&gt;bold&lt;/b&gt;&#34;",
		"card expired", ">dead: redeliveries are duplicates", "refund")
	if g := js.link(t, "card expired"); !strings.Contains(g, "group=card+expired") || !strings.Contains(g, "consumer=billing") {
		t.Errorf("the group links to %s", g)
	}
	bin := must(t, fmt.Sprintf("%s/dead-letters/%d", srv.URL, f.dead["bin-1"]), 200)
	bin.contains(t, "shown as binary", "ff 00 01 02 20 62 69 6e")
	pay := get(t, fmt.Sprintf("%s/dead-letters/%d/payload", srv.URL, f.dead["bin-1"]))
	if pay.status != 200 || pay.body != "\xff\x00\x01\x02 binary \xfe" || pay.header.Get("Content-Type") != "application/octet-stream" ||
		!strings.HasPrefix(pay.header.Get("Content-Disposition"), "attachment") || pay.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("payload download: %d %q %v", pay.status, pay.body, pay.header)
	}
	must(t, srv.URL+"/dead-letters/999999999", 404).contains(t, "No dead letter has ID 999999999")
	must(t, srv.URL+"/dead-letters/abc", 404)
	must(t, srv.URL+"/dead-letters/-1/payload", 404)
}

// testHostile: nothing a message carries reaches a page as markup or
// as bytes that are not valid UTF-8, and a 1 MiB payload gives a bounded
// page.
func testHostile[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, nil)
	detail := fmt.Sprintf("%s/dead-letters/%d", srv.URL, f.dead[EvilID])
	for _, u := range []string{srv.URL + "/", srv.URL + "/dead-letters", srv.URL + "/dead-letters?consumer=" + url.QueryEscape(Evil),
		detail, srv.URL + "/outbox", fmt.Sprintf("%s/outbox/%d", srv.URL, f.seq["o-3"]),
		srv.URL + "/retrying?consumer=" + url.QueryEscape(Evil), srv.URL + "/dead-letters/bulk?action=replay&consumer=" + url.QueryEscape(Evil)} {
		p := must(t, u, 200)
		for _, bad := range []string{"<script", "<img", "\x00", "\u202e", "\xff"} {
			if strings.Contains(p.body, bad) {
				i := strings.Index(p.body, bad)
				t.Errorf("%s holds %q unescaped: …%s…", u, bad, p.body[max(0, i-80):min(len(p.body), i+80)])
			}
		}
		if !utf8.ValidString(p.body) {
			t.Errorf("%s: the page is not valid UTF-8", u)
		}
		if len(p.body) > 200<<10 {
			t.Errorf("%s: %d bytes, want at most 200 KiB", u, len(p.body))
		}
	}
	p := must(t, detail, 200)
	// What the page shows instead: escapes a reader sees.
	p.contains(t, html.EscapeString(strconv.Quote(Evil)), html.EscapeString(strconv.Quote(EvilID)), "&lt;script&gt;alert(1)&lt;/script&gt;",
		`\u202e`, html.EscapeString(strconv.Quote("<b>h</b>\xff")), "shown as text", "characters escaped", "the first 64.0 KiB only", "Download the whole payload")
	whole := get(t, detail+"/payload")
	if whole.status != 200 || len(whole.body) != f.evilSize {
		t.Errorf("the download: %d, %d bytes; want 200, %d", whole.status, len(whole.body), f.evilSize)
	}
	if whole.header.Get("Content-Type") != "application/octet-stream" || whole.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("the download's headers: %v", whole.header)
	}
}

func testOutbox[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, &console.Config{PageSize: 1})
	seqs := func(p *page) []int64 {
		var out []int64
		for _, m := range regexp.MustCompile(`<a class="ob" href="[^"]*">(\d+)</a>`).FindAllStringSubmatch(p.body, -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			out = append(out, n)
		}
		return out
	}
	p := must(t, srv.URL+"/outbox?limit=10", 200)
	if got, want := seqs(p), []int64{f.seq["o-1"], f.seq["o-2"], f.seq["o-3"]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outbox lists %v, want %v", got, want)
	}
	p.contains(t, "refused: &lt;script&gt;")
	for q, want := range map[string][]int64{
		"state=parked":                   {f.seq["o-3"]},
		"state=pending&limit=10":         {f.seq["o-1"], f.seq["o-2"]},
		"destination=payments":           {f.seq["o-3"]},
		"message-id=o-2":                 {f.seq["o-2"]},
		"error=refused&limit=10":         {f.seq["o-3"]},
		"type=placed&destination=orders": {f.seq["o-1"]}, // a page of 1
	} {
		if got := seqs(must(t, srv.URL+"/outbox?"+q, 200)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outbox?%s lists %v, want %v", q, got, want)
		}
	}
	// Paging keeps the filter.
	p = must(t, srv.URL+"/outbox?type=placed", 200)
	next := p.link(t, "next page")
	if u, _ := url.Parse(next); u.Query().Get("type") != "placed" || u.Query().Get("after") != strconv.FormatInt(f.seq["o-1"], 10) {
		t.Errorf("next link %s", next)
	}
	if got := seqs(must(t, next, 200)); fmt.Sprint(got) != fmt.Sprint([]int64{f.seq["o-2"]}) {
		t.Errorf("the next page lists %v", got)
	}
	must(t, srv.URL+"/outbox?state=gone", 400).contains(t, "Invalid filter")
	row := must(t, fmt.Sprintf("%s/outbox/%d", srv.URL, f.seq["o-3"]), 200)
	row.contains(t, "parked at", "not published until unparked", "payments", "charge &lt;script&gt;", html.EscapeString(Img))
	must(t, srv.URL+"/outbox/999999999", 404)
}

func testHeaders[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, nil)
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"X-Frame-Options":         "DENY",
	}
	for _, path := range []string{"/", "/dead-letters", fmt.Sprintf("/dead-letters/%d", f.dead["json-1"]), "/outbox",
		fmt.Sprintf("/outbox/%d", f.seq["o-1"]), "/static/console.css", "/nowhere", "/dead-letters/0"} {
		p := get(t, srv.URL+path)
		for k, v := range want {
			if got := p.header.Get(k); got != v && !(k == "Content-Security-Policy" && strings.Contains(path, "payload")) {
				t.Errorf("GET %s: %s %q, want %q", path, k, got, v)
			}
		}
		if path == "/static/console.css" && (p.status != 200 || !strings.HasPrefix(p.header.Get("Content-Type"), "text/css")) {
			t.Errorf("the CSS: %d %s", p.status, p.header.Get("Content-Type"))
		}
		if strings.Contains(p.body, " style=") || strings.Contains(p.body, "<script") {
			t.Errorf("GET %s: an inline style or script, which the policy forbids", path)
		}
	}
	// Methods other than GET, HEAD and POST: 405; a POST without the
	// form's token: 403. Read-only, every one but GET and HEAD: 405.
	ro := serve(t, &console.Config{ReadOnly: true})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, "PURGE"} {
		for _, s := range []struct {
			srv    *httptest.Server
			status int
			allow  string
		}{{srv, http.StatusMethodNotAllowed, "GET, HEAD, POST"}, {ro, http.StatusMethodNotAllowed, "GET, HEAD"}} {
			if m == http.MethodPost && s.srv == srv {
				s.status, s.allow = http.StatusForbidden, ""
			}
			req, _ := http.NewRequest(m, s.srv.URL+"/dead-letters", strings.NewReader("x=1"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != s.status || resp.Header.Get("Allow") != s.allow || resp.Header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("%s: %d, Allow %q; want %d with Allow %q and the headers", m, resp.StatusCode, resp.Header.Get("Allow"), s.status, s.allow)
			}
		}
	}
	resp, err := http.Head(srv.URL + "/dead-letters")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HEAD: %d, want 200", resp.StatusCode)
	}
}

func testAuth[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	srv := serve(t, &console.Config{Auth: console.Auth{Token: "s3cret-token", User: "ops", Password: "pa55"}})
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	basic := func(u, p string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth(u, p) } }
	tests := []struct {
		name string
		edit func(*http.Request)
		want int
	}{
		{"none", func(*http.Request) {}, 401},
		{"wrong token", bearer("s3cret-tokeN"), 401},
		{"token prefix", bearer("s3cret"), 401},
		{"token", bearer("s3cret-token"), 200},
		{"basic", basic("ops", "pa55"), 200},
		{"basic, wrong password", basic("ops", "pa56"), 401},
		{"basic, wrong user", basic("root", "pa55"), 401},
		{"basic with the token", basic("anyone", "s3cret-token"), 200},
	}
	for _, tc := range tests {
		for _, path := range []string{"/", "/dead-letters", fmt.Sprintf("/dead-letters/%d/payload", f.dead["bin-1"]), "/static/console.css"} {
			p := get(t, srv.URL+path, tc.edit)
			if p.status != tc.want {
				t.Errorf("%s: GET %s: %d, want %d", tc.name, path, p.status, tc.want)
			}
			if tc.want == 401 && (!strings.HasPrefix(p.header.Get("WWW-Authenticate"), "Basic ") || strings.Contains(p.body, "billing") || p.header.Get("X-Frame-Options") != "DENY") {
				t.Errorf("%s: GET %s: 401 with WWW-Authenticate %q, body %q", tc.name, path, p.header.Get("WWW-Authenticate"), p.body)
			}
		}
	}
}

func testPrefix[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	c, err := console.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/inbox/", http.StripPrefix("/ops/inbox", c))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r := get(t, srv.URL+"/ops/inbox")
	if r.status/100 != 3 || r.resolve(t, r.header.Get("Location")) != srv.URL+"/ops/inbox/" {
		t.Errorf("GET /ops/inbox: %d to %q, want a redirect to /ops/inbox/", r.status, r.header.Get("Location"))
	}
	// Every link of every page stays under the prefix, and answers.
	seen := map[string]bool{}
	for _, start := range []string{"/ops/inbox/", fmt.Sprintf("/ops/inbox/dead-letters/%d", f.dead["json-1"]), fmt.Sprintf("/ops/inbox/outbox/%d", f.seq["o-1"])} {
		p := must(t, srv.URL+start, 200)
		for _, m := range hrefRE.FindAllStringSubmatch(p.body, -1) {
			u := p.resolve(t, m[1])
			if seen[u] {
				continue
			}
			seen[u] = true
			if !strings.HasPrefix(u, srv.URL+"/ops/inbox/") {
				t.Errorf("%s links to %s, outside the prefix", start, u)
				continue
			}
			if p := get(t, u); p.status != 200 {
				t.Errorf("%s links to %s: %d", start, u, p.status)
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("followed %d links, want at least 10", len(seen))
	}
}

// hidden is a driver that shows none of its optional interfaces.
type hidden[TTx any] struct{ store.Driver[TTx] }

func testMissing[TTx any](t *testing.T, serve func(*testing.T, *console.Config) *httptest.Server, d store.Driver[TTx], f *fixture) {
	c, err := console.New[TTx](hidden[TTx]{d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	for path, want := range map[string][]string{
		"/":                   {"does not implement store.Inspector", "does not implement store.ActivityInspector", "does not implement store.OutboxInspector"},
		"/dead-letters":       {"does not implement store.Inspector"},
		"/dead-letters/1":     {"does not implement store.Inspector"},
		"/outbox":             {"does not implement store.OutboxInspector"},
		"/outbox/1":           {"does not implement store.OutboxInspector"},
		"/static/console.css": {"body"},
	} {
		must(t, srv.URL+path, 200).contains(t, want...)
	}
}
