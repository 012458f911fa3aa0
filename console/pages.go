package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html static/console.css
var files embed.FS

var css = func() []byte {
	b, err := files.ReadFile("static/console.css")
	if err != nil {
		panic(err)
	}
	return b
}()

var funcs = template.FuncMap{
	"time":  fmtTime,
	"vis":   vis,
	"short": func(s string) string { return shorten(vis(s), 80) },
	"bytes": bytesSize,
	"show":  show,
}

// pages are the templates, by name: each is the layout with the page's
// "content".
var pages = func() map[string]*template.Template {
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", n))
	}
	return out
}()

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.overview)
	m.HandleFunc("GET /dead-letters", c.deadLetterList)
	m.HandleFunc("GET /dead-letters/{id}", c.deadLetterShow)
	m.HandleFunc("GET /dead-letters/{id}/payload", c.deadLetterPayload)
	m.HandleFunc("POST /dead-letters/{id}/replay", c.deadLetterReplay)
	m.HandleFunc("POST /dead-letters/{id}/discard", c.deadLetterDiscard)
	m.HandleFunc("GET /dead-letters/bulk", c.deadLetterBulk)
	m.HandleFunc("POST /dead-letters/bulk", c.deadLetterBulk)
	m.HandleFunc("GET /retrying", c.retrying)
	m.HandleFunc("GET /outbox", c.outboxList)
	m.HandleFunc("GET /outbox/{seq}", c.outboxShow)
	m.HandleFunc("GET /outbox/{seq}/payload", c.outboxPayload)
	m.HandleFunc("POST /outbox/{seq}/unpark", c.outboxAct)
	m.HandleFunc("POST /outbox/{seq}/discard", c.outboxAct)
	m.HandleFunc("GET /outbox/bulk", c.outboxBulk)
	m.HandleFunc("POST /outbox/bulk", c.outboxBulk)
	m.HandleFunc("GET /static/console.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(css)
	})
	m.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such page.", nil)
	})
	c.mux = m
}

// base is what every page shows around its content.
type base struct {
	Title string
	// Root is the relative path from the page to the console's root,
	// "./" or "../": links work under any prefix, with http.StripPrefix
	// or behind a proxy that strips it.
	Root     string
	Nav      string
	ReadOnly bool
	// CSRF is the token the page's forms carry; empty when read-only.
	CSRF string
	// Notice says what the action that led here did.
	Notice string
	// Status is the error a page shows instead of its content.
	Status, Message string
}

func (c *Console) base(r *http.Request, title, nav string) base {
	depth := strings.Count(r.URL.Path, "/") - 1
	root := "./"
	if depth > 0 {
		root = strings.Repeat("../", depth)
	}
	b := base{Title: title, Root: root, Nav: nav, ReadOnly: c.cfg.ReadOnly, Notice: notice(r.URL.Query())}
	if !c.cfg.ReadOnly {
		b.CSRF = c.formToken(c.now())
	}
	return b
}

// render executes page into a buffer first, so that a failure midway
// is a clean 500, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var buf bytes.Buffer
	if err := pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		c.log.ErrorContext(r.Context(), "console: rendering a page", "page", page, "err", err)
		http.Error(w, "500 internal server error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// fail renders an error page. A store's error goes to the log, not to
// the page: it may name hosts, tables or values.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		c.log.ErrorContext(r.Context(), "console: reading the store", "path", r.URL.Path, "err", err)
	}
	b := c.base(r, http.StatusText(status), "")
	b.Status, b.Message = fmt.Sprintf("%d %s", status, http.StatusText(status)), msg
	c.render(w, r, status, "error", b)
}

// storeFailed is the page's message for a store's error.
const storeFailed = "Reading the store failed. The program's log has the error."

// query builds a link's query from pairs of names and values, leaving
// out empty values. Values are bytes: a binary consumer or ID survives.
func query(pairs ...string) template.URL {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	// url.Values.Encode escapes every byte a URL cannot carry: the
	// result is safe as a URL, whatever the values hold.
	return template.URL("?" + v.Encode())
}

// parseTime reads a filter's time: RFC 3339, a date and time in UTC
// (2026-01-02T15:04 or with a space), a date, or a duration before now
// (24h, 90m).
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("want RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02) or a duration before now (24h)")
}

// pathID reads the positive integer of a path's {name}.
func pathID(r *http.Request, name string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	return id, err == nil && id > 0
}

// limit is the page size a request asks for with ?limit=, else the
// configured one.
func (c *Console) limit(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || n < 1 {
		return c.cfg.PageSize
	}
	return min(n, MaxPageSize)
}

// download sends b as a file to save, never to render.
func download(w http.ResponseWriter, r *http.Request, name string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	h.Set("Content-Length", strconv.Itoa(len(b)))
	// A payload is the sender's bytes: no policy lets them act.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
