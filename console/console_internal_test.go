package console

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/inbox/store"
)

func TestShow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"billing", "billing"},
		{"a b/c-é", "a b/c-é"},
		{"a\x00b", `"a\x00b"`},
		{"\xff", `"\xff"`},
		{"rtl\u202eevil", `"rtl\u202eevil"`},
		{`"quoted"`, `"\"quoted\""`},
		{"", ""},
	} {
		if got := show([]byte(tc.in)); got != tc.want {
			t.Errorf("show(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if back := string(parseShown(show([]byte(tc.in)))); back != tc.in {
			t.Errorf("parseShown(show(%q)) = %q, want it back", tc.in, back)
		}
	}
}

func TestVisible(t *testing.T) {
	t.Parallel()
	got, n := visible("a\x00b\xffc\u202ed\ne\tf\x1b[2J\u2028")
	if want := "a\\x00b\\xffc\\u202ed\ne\tf\\x1b[2J\\u2028"; got != want || n != 5 {
		t.Errorf("visible: %q, %d escaped; want %q, 5", got, n, want)
	}
}

func TestViewPayload(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("é<"), 100_000) // 300 KB of text
	cut := append(bytes.Repeat([]byte("a"), maxTextShown-1), "é"...)
	for _, tc := range []struct {
		name        string
		in          []byte
		kind        string
		shown       int64
		bodyContain string
	}{
		{"empty", nil, "empty", 0, ""},
		{"JSON", []byte(`{"a":[1,2],"b":"<x>\u202e"}`), "JSON", 27, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"<x>\\u202e\"\n}"},
		{"text with a NUL", []byte("hello\x00 world" + strings.Repeat(".", 200)), "text", 212, `hello\x00 world`},
		{"too many controls for text", []byte("hello\x00 world"), "binary", 12, "68 65 6c 6c 6f 00"},
		{"binary", []byte{0xff, 0, 1, 2, 3}, "binary", 5, "ff 00 01 02 03"},
		{"large text, cut on a rune", big, "text", maxTextShown - 1, "é<é<"}, // 3 bytes a pair
		{"a rune split at the cut", cut, "text", maxTextShown - 1, "aaa"},
		{"large binary", bytes.Repeat([]byte{0, 0xff}, 100_000), "binary", maxHexShown, "00 ff 00 ff"},
	} {
		v := viewPayload(tc.in)
		if v.Kind != tc.kind || v.Shown != tc.shown || v.Size != int64(len(tc.in)) || !strings.Contains(v.Body, tc.bodyContain) {
			t.Errorf("%s: %s, %d of %d shown, body %.80q; want %s, %d, containing %q", tc.name, v.Kind, v.Shown, v.Size, v.Body, tc.kind, tc.shown, tc.bodyContain)
		}
		if !utf8.ValidString(v.Body) || len(v.Body) > 5*maxTextShown {
			t.Errorf("%s: a body of %d bytes, valid UTF-8 %v", tc.name, len(v.Body), utf8.ValidString(v.Body))
		}
	}
}

func TestChart(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 21, 1, 0, 0, time.UTC)
	counts := make([]int64, 180)
	counts[0], counts[90], counts[179] = 3, 17, 1
	c := newChart(start, counts)
	if c.Total != 21 || c.Peak != 17 || len(c.Bars) != 3 {
		t.Fatalf("chart: total %d, peak %d, %d bars; want 21, 17, 3", c.Total, c.Peak, len(c.Bars))
	}
	if got := []string{c.YLabels[0].Text, c.YLabels[1].Text, c.YLabels[2].Text}; strings.Join(got, " ") != "0 10 20" {
		t.Errorf("y labels %v, want 0 10 20", got)
	}
	if len(c.XLabels) < 3 || len(c.XLabels) > chartLabelEvery+1 || c.XLabels[0].Text != "21:30" {
		t.Errorf("x labels %+v, want 3 to 7 on the half hour, from 21:30", c.XLabels)
	}
	for _, b := range c.Bars {
		if b.Y < chartTop || b.Y+b.H > chartTop+chartPlotH+0.01 || b.X < chartLeft || b.X+b.W > chartW-chartRight+0.01 {
			t.Errorf("bar %+v outside the plot", b)
		}
	}
	if b := c.Bars[2]; b.H < 1 || b.Title != "00:00 UTC: 1 message" {
		t.Errorf("the last bar %+v: want at least 1 high, titled 00:00 UTC: 1 message", b)
	}
	for n, want := range map[int64]int64{0: 2, 1: 2, 3: 4, 5: 6, 7: 8, 10: 10, 11: 20, 41: 50, 399: 400, 401: 500, 499: 500, 501: 600} {
		if got := niceCeil(n); got != want {
			t.Errorf("niceCeil(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Retention: time.Minute}, {ThroughputWindow: 25 * time.Hour}, {ThroughputWindow: time.Second},
		{PageSize: -1}, {PageSize: MaxPageSize + 1}, {Auth: Auth{User: "a:b", Password: "p"}}} {
		if _, err := New[struct{}](fakeDriver{}, &cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
	c, err := New[struct{}](fakeDriver{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Retention != DefaultRetention || c.cfg.ThroughputWindow != DefaultThroughputWindow || c.cfg.PageSize != DefaultPageSize {
		t.Errorf("defaults: %+v", c.cfg)
	}
}

// fakeDriver is a store.Driver and a store.Inspector whose one dead
// letter failed 8 days ago: the tests of the stores cannot age one.
type fakeDriver struct {
	store.Driver[struct{}]
	store.Inspector[struct{}]
	state string
}

func (f fakeDriver) DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error) {
	if id != 1 {
		return nil, store.ErrNotFound
	}
	return &store.DeadLetterDetail{DeadLetter: store.DeadLetter{ID: 1, Key: store.Key{Consumer: []byte("c"), MessageID: []byte("m")},
		Error: "boom", Attempts: 1, FailedAt: time.Now().Add(-8 * 24 * time.Hour)}, RowState: f.state}, nil
}

// TestForgotten: the detail says when the inbox no longer remembers a
// dead letter's message, by its row's state or its age.
func TestForgotten(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state     string
		retention time.Duration
		want      string
	}{
		{store.RowDead, 0, "This dead letter is older than the retention (7 days)"},
		{store.RowDead, 9 * 24 * time.Hour, ""},
		{store.RowNone, 9 * 24 * time.Hour, "The inbox no longer remembers this message: its row was pruned. A replay would be processed as new."},
		{store.RowLive, 0, ""},
	} {
		c, err := New[struct{}](fakeDriver{state: tc.state}, &Config{Retention: tc.retention})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/dead-letters/1", nil))
		body := w.Body.String()
		has := strings.Contains(body, `class="warn-box"`)
		if w.Code != 200 || has != (tc.want != "") || tc.want != "" && !strings.Contains(body, tc.want) {
			t.Errorf("%s, retention %v: %d, warning %v; want %q:\n%s", tc.state, tc.retention, w.Code, has, tc.want, body)
		}
	}
}
