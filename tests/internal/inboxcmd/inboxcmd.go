// Package inboxcmd builds the inbox command for tests that run it against
// servers of their own.
package inboxcmd

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the inbox command into tb's temporary directory and
// returns its path. It needs the repository's go.work, as every test of
// this module does.
func Build(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "inbox")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/inboxkit/inbox/cmd/inbox").CombinedOutput(); err != nil {
		tb.Fatalf("go build of the inbox command: %v\n%s", err, out)
	}
	return bin
}

// Check runs bin's check with args and returns its exit code and output.
func Check(tb testing.TB, bin string, args ...string) (int, string) {
	tb.Helper()
	out, err := exec.Command(bin, append([]string{"check"}, args...)...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	case err != nil:
		tb.Fatalf("inbox check: %v", err)
	}
	return 0, string(out)
}
