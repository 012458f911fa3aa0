package browser

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserRuns: the harness starts Chromium, which loads a page and
// reads its DOM. A console test that fails then fails on the console.
func TestBrowserRuns(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>t</title><p id="p">&lt;script&gt;</p>`))
	}))
	t.Cleanup(srv.Close)
	ctx := New(t, 1280, 800)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text("#p"))
	if err != nil {
		t.Fatal(err)
	}
	if text != "<script>" {
		t.Errorf("the page's text: %q, want <script>", text)
	}
}
