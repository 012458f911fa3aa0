package browser

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// hostile are payloads and errors that would run or inject markup if a
// page did not escape them.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	"bidi \u202e txt.exe and \xff\xfe invalid UTF-8 and a NUL \x00",
}

// consoleDB fills a SQLite inbox for the console: processed messages, a
// group of 4 dead letters, hostile ones, a 1 MiB payload, a message in
// retry, and outbox rows. It returns the driver.
func consoleDB(t *testing.T) *sqlstore.Driver {
	t.Helper()
	d, _ := openConsoleDB(t)
	return d
}

// openConsoleDB is consoleDB that returns the database too.
func openConsoleDB(t *testing.T) (*sqlstore.Driver, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "console.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	quiet := &inbox.Config{Consumer: "billing"}
	ib, err := inbox.New(ctx, d, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *sql.Tx, *inbox.Message) error { return nil }
	failing := func(text string) inbox.Handler[*sql.Tx] {
		return func(context.Context, *sql.Tx, *inbox.Message) error { return inbox.Permanent(errors.New(text)) }
	}
	run := func(m inbox.Message, h inbox.Handler[*sql.Tx], want inbox.Status) {
		t.Helper()
		if out, err := ib.Process(ctx, m, h); out.Status != want {
			t.Fatalf("%s: %v, %v; want %v", m.ID, out.Status, err, want)
		}
	}
	for i := range 30 {
		run(inbox.Message{ID: fmt.Sprintf("ok-%d", i), Type: "charge"}, ok, inbox.Processed)
	}
	for i := range 4 {
		run(inbox.Message{ID: fmt.Sprintf("poison-%05d", i), Type: "charge", Payload: []byte(`{"account":"acct-7","cents":1250}`)},
			failing(fmt.Sprintf("charge poison-%05d: card declined", i)), inbox.DeadLettered)
	}
	for i, h := range hostile {
		run(inbox.Message{ID: fmt.Sprintf("hostile-%d", i), Type: "charge", Payload: []byte(h), Headers: map[string]string{"X-Evil": h}},
			failing(h), inbox.DeadLettered)
	}
	run(inbox.Message{ID: "big", Type: "charge", Payload: []byte(strings.Repeat("<b>x</b>", 1<<17))}, failing("too big"), inbox.DeadLettered)
	run(inbox.Message{ID: "slow", Type: "charge"}, func(context.Context, *sql.Tx, *inbox.Message) error {
		return errors.New("timeout after 30s")
	}, inbox.Retry)

	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Write(ctx, tx, &outbox.Message{ID: fmt.Sprintf("order-%d", i), Destination: "payments", Payload: []byte(hostile[0])}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return d, db
}

// serve serves the console on d, with cfg, over real HTTP.
func serve(t *testing.T, d *sqlstore.Driver, cfg *console.Config) string {
	t.Helper()
	c, err := console.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/inbox/", http.StripPrefix("/ops/inbox", c))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/ops/inbox/"
}

// shot writes a screenshot of the page to the directory
// INBOX_CONSOLE_SCREENSHOTS names, or to the test's temporary directory.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("INBOX_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(png) < 10_000 {
		t.Errorf("screenshot %s: %d bytes, a blank page?", name, len(png))
	}
}

// eval evaluates a JavaScript expression in the page. The page has no
// script of its own: the test's run through DevTools, not the page's CSP.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func navigate(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate to %s: %v", url, err)
	}
}

// waitForPage waits until the tab has loaded a page whose address
// satisfies want. A click or a submit starts a navigation and returns; the
// page before it is still there until the new one commits.
func waitForPage(t *testing.T, ctx context.Context, want func(href string) bool) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// Evaluating during the navigation may fail: try again.
		state, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[location.href, document.readyState]`))
		if err == nil && len(state) == 2 {
			last = state[0]
			if want(state[0]) && state[1] == "complete" {
				return
			}
		}
	}
	t.Fatalf("no page loaded after the click; the tab shows %s", last)
}

// noMarkupFrom checks that no hostile value became markup: no script and
// no img element, and no property that an injected handler would set.
func noMarkupFrom(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	if n := eval[int](t, ctx, `document.querySelectorAll("script, img, iframe, object, embed").length`); n != 0 {
		t.Errorf("%s: %d script or image elements, want none", where, n)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("[onerror], [onload], [onclick]").length`); n != 0 {
		t.Errorf("%s: %d elements with event handler attributes, want none", where, n)
	}
}

// TestConsoleInBrowser walks the console as an operator does, in Chromium:
// the overview, its error group, a dead letter with a hostile payload, the
// outbox, at 1280×800 and at a phone's width.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	d := consoleDB(t)
	base := serve(t, d, &console.Config{})
	for _, size := range []struct {
		name          string
		width, height int
	}{{"wide", 1280, 800}, {"narrow", 390, 844}} {
		t.Run(size.name, func(t *testing.T) {
			t.Parallel()
			ctx := New(t, size.width, size.height)
			ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			// A window is at least 500 px wide: a phone's viewport is emulated.
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(size.width), int64(size.height))); err != nil {
				t.Fatal(err)
			}

			navigate(t, ctx, base)
			if title := eval[string](t, ctx, `document.title`); !strings.Contains(title, "Overview") {
				t.Errorf("overview's title: %q", title)
			}
			if n := eval[int](t, ctx, `document.querySelectorAll("svg.chart rect.bar").length`); n == 0 {
				t.Error("overview: no bar in the throughput chart")
			}
			if got := eval[string](t, ctx, `document.querySelector("strong.throughput").textContent`); got != "38" {
				t.Errorf("overview: %s processed in the window, want 38 (30 processed, 8 dead-lettered)", got)
			}
			if got := eval[string](t, ctx, `document.querySelector(".retrying").textContent`); got != "1" {
				t.Errorf("overview: %s in retry, want 1", got)
			}
			if got := eval[int](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); got > 0 {
				t.Errorf("overview: the page is %d px wider than the window", got)
			}
			noMarkupFrom(t, ctx, "overview")
			shot(t, ctx, "overview-"+size.name)

			// The count in retry leads to the message in retry.
			navigate(t, ctx, eval[string](t, ctx, `document.querySelector("a.retrying").href`))
			if got := eval[string](t, ctx, `[...document.querySelectorAll("table.list tbody td")].map(td => td.textContent).join(" ")`); !strings.Contains(got, "slow") || !strings.Contains(got, "timeout after 30s") {
				t.Errorf("in retry: the list reads %q, want slow and its error", got)
			}
			shot(t, ctx, "retrying-"+size.name)
			navigate(t, ctx, base)

			// The largest error group, followed from the overview.
			group := eval[string](t, ctx, `[...document.querySelectorAll("table.groups a")].find(a => a.textContent.includes("poison-<n>")).href`)
			navigate(t, ctx, group)
			if n := eval[int](t, ctx, `document.querySelectorAll("table.list tbody tr").length`); n != 4 {
				t.Errorf("the group's dead letters: %d rows, want 4", n)
			}
			shot(t, ctx, "dead-letters-group-"+size.name)

			// Filter by message ID with the form, as a person would.
			navigate(t, ctx, base+"dead-letters")
			if err := chromedp.Do(ctx,
				chromedp.SetValue(`input[name="message-id"]`, "hostile-0"),
				chromedp.Click(`form.filters button[type="submit"]`),
			); err != nil {
				t.Fatal(err)
			}
			// table.list is on the page before the click too: wait for the
			// filtered page itself.
			waitForPage(t, ctx, func(href string) bool { return strings.Contains(href, "message-id=hostile-0") })
			if n := eval[int](t, ctx, `document.querySelectorAll("table.list tbody tr").length`); n != 1 {
				t.Errorf("filtered by message ID hostile-0: %d rows, want 1", n)
			}
			navigate(t, ctx, eval[string](t, ctx, `document.querySelector("a.dl").href`))
			payload := eval[string](t, ctx, `document.querySelector("pre.payload").textContent`)
			if !strings.Contains(payload, hostile[0]) {
				t.Errorf("the hostile dead letter's payload reads %q, want %q as text", payload, hostile[0])
			}
			noMarkupFrom(t, ctx, "a hostile dead letter")
			shot(t, ctx, "dead-letter-hostile-"+size.name)

			// The page that counts a bulk discard and asks to confirm.
			navigate(t, ctx, base+"dead-letters/bulk?action=discard&group="+url.QueryEscape("charge poison-<n>: card declined"))
			if got := eval[string](t, ctx, `document.querySelector("#bulk-count").textContent`); got != "4" {
				t.Errorf("the bulk discard counts %s, want 4", got)
			}
			if got := eval[int](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); got > 0 {
				t.Errorf("the bulk page is %d px wider than the window", got)
			}
			shot(t, ctx, "bulk-confirm-"+size.name)

			navigate(t, ctx, base+"outbox")
			if got := eval[string](t, ctx, `document.querySelector("#outbox-pending").textContent`); got != "3" {
				t.Errorf("outbox: %s pending, want 3", got)
			}
			noMarkupFrom(t, ctx, "outbox")
			shot(t, ctx, "outbox-"+size.name)
		})
	}
}

// TestConsoleHostileInBrowser opens every hostile dead letter and the 1
// MiB one: their payloads, headers and errors read as text, nothing runs,
// and the big page stays bounded.
func TestConsoleHostileInBrowser(t *testing.T) {
	t.Parallel()
	d := consoleDB(t)
	base := serve(t, d, &console.Config{})
	ctx := New(t, 1280, 800)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	navigate(t, ctx, base+"dead-letters?limit=500")
	links := eval[[]string](t, ctx, `[...document.querySelectorAll("a.dl")].map(a => a.href)`)
	if len(links) != 8 {
		t.Fatalf("dead letters listed: %d, want 8", len(links))
	}
	for _, link := range links {
		navigate(t, ctx, link)
		noMarkupFrom(t, ctx, link)
		size := eval[int](t, ctx, `document.documentElement.outerHTML.length`)
		if size > 200_000 {
			t.Errorf("%s: the page is %d characters, want a bounded one", link, size)
		}
	}
	// The 1 MiB payload comes whole only as a download.
	resp, err := http.Get(base + "dead-letters/" + lastPart(links[len(links)-1]) + "/payload")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != 1<<20 || resp.Header.Get("Content-Disposition") == "" {
		t.Errorf("the big payload's download: %d bytes, disposition %q; want 1 MiB as an attachment",
			resp.ContentLength, resp.Header.Get("Content-Disposition"))
	}
}

// TestConsoleRefusesInBrowser: with a token set, the browser without it is
// refused, and a form posted from another site changes nothing.
func TestConsoleRefusesInBrowser(t *testing.T) {
	t.Parallel()
	d := consoleDB(t)
	base := serve(t, d, &console.Config{Auth: console.Auth{Token: "s3cret-token"}})
	ctx := New(t, 1280, 800)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Chromium fails the navigation on the 401 (it would ask for a
	// password); a page that loaded must not be the console.
	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err == nil {
		if body := eval[string](t, ctx, `document.body.innerText`); strings.Contains(body, "billing") || strings.Contains(body, "Overview") {
			t.Errorf("without the token the page shows the console:\n%s", body)
		}
	} else if !strings.Contains(err.Error(), "AUTH") {
		t.Errorf("without the token: %v, want a refused authentication", err)
	}

	// Another site's page posts a form to a console without a token: a
	// discard, with a token it made up. The console refuses it as a
	// request of another site, and the dead letter stays.
	open := serve(t, d, &console.Config{})
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%sdead-letters/1/discard"><input name="csrf" value="1.x"></form>`, open)
	}))
	t.Cleanup(evil.Close)
	navigate(t, ctx, strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)) // another origin
	if err := chromedp.Do(ctx, chromedp.Submit(`#f`)); err != nil {
		t.Fatal(err)
	}
	waitForPage(t, ctx, func(href string) bool { return strings.HasPrefix(href, open) })
	after := eval[string](t, ctx, `document.body.innerText`)
	if !strings.Contains(after, "403") || !strings.Contains(after, "another site") {
		t.Errorf("a cross-site POST: the page reads %q; want the console's refusal", after)
	}
	if _, err := d.DeadLetterGet(context.Background(), 1); err != nil {
		t.Errorf("after a cross-site POST, dead letter 1: %v; want it kept", err)
	}
}

func lastPart(u string) string {
	i := strings.LastIndexByte(u, '/')
	if _, err := strconv.Atoi(u[i+1:]); err != nil {
		return ""
	}
	return u[i+1:]
}
