// Package browser drives a headless Chromium for the console's tests:
// Debian's chromium package, or the one INBOX_CHROMIUM names. Without one
// the tests skip, unless INBOX_REQUIRE_SERVICES=1, when they fail.
package browser

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/inboxkit/inbox/internal/testenv"
)

// Path returns the Chromium to run: INBOX_CHROMIUM, or chromium on PATH.
func Path() (string, error) {
	if p := os.Getenv("INBOX_CHROMIUM"); p != "" {
		return p, nil
	}
	return exec.LookPath("chromium")
}

// New returns a browser context for tb, with a window of width × height
// CSS pixels, closed when tb ends. Each call starts a browser of its own,
// so that parallel tests share no cookies.
func New(tb testing.TB, width, height int) context.Context {
	tb.Helper()
	path, err := Path()
	if err != nil {
		testenv.Unavailable(tb, "Chromium (apt-get install chromium, or INBOX_CHROMIUM)", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in a container has no user namespace to sandbox with
		chromedp.Flag("headless", "new"),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	tb.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first call starts the browser, which lives as long as the
	// context of that call: no timeout on it.
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("starting Chromium at %s: %v", path, err)
	}
	return ctx
}
