package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/inboxkit/inbox"
)

// openPTY returns a pseudo-terminal's controller and its terminal, for a
// child's stderr (Linux: /dev/ptmx, unlocked, its number asked).
func openPTY(t *testing.T) (ctl, term *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	var unlock, n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ctl.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlocking the pseudo-terminal: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ctl.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("numbering the pseudo-terminal: %v", e)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	return ctl, term
}

// onTerminal runs the command as a child with stderr on a terminal and
// returns its exit code, stdout (a pipe) and what the terminal got.
func onTerminal(t *testing.T, args ...string) (code int, stdout, terminal string) {
	t.Helper()
	ctl, term := openPTY(t)
	var out bytes.Buffer
	child := exec.Command(os.Args[0], args...)
	child.Env = append(os.Environ(), "INBOX_CMD_MAIN=1")
	child.Stdout, child.Stderr = &out, term
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	_ = term.Close()          // the child's copy keeps it open until it exits
	got, _ := io.ReadAll(ctl) // EIO once the child is gone
	_ = child.Wait()
	return child.ProcessState.ExitCode(), out.String(), string(got)
}

// TestProgressOnTerminal: with stderr on a real terminal, discard -all
// shows its progress (the commands' stderr is wrapped to mask
// passwords: the terminal is found under it); with -json it does not.
func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	e := openDB(t, "sqlite")
	for _, c := range []string{"t", "j"} {
		ib := e.inbox(t, inbox.Config{Consumer: c})
		for i := range 3 {
			deadLetterOf(t, e, ib, inbox.Message{ID: fmt.Sprintf("%s-%d", c, i), Type: "t", Payload: []byte("p")})
		}
	}
	code, stdout, term := onTerminal(t, append([]string{"dead-letters", "discard", "-all", "-consumer", "j", "-json"}, e.flags...)...)
	if code != 0 || !strings.Contains(stdout, `"discarded": [`) || term != "" {
		t.Fatalf("discard -all -json on a terminal: exit %d, terminal %q; want 0 and nothing", code, term)
	}
	code, stdout, term = onTerminal(t, append([]string{"dead-letters", "discard", "-all", "-consumer", "t"}, e.flags...)...)
	if code != 0 || strings.Count(stdout, "discarded dead letter") != 3 ||
		!strings.Contains(term, "\rdiscarded 3 of 3 dead letters (100%) in 0s") || !strings.HasSuffix(term, "\r\n") {
		t.Fatalf("discard -all on a terminal: exit %d\nstdout: %s\nterminal: %q\nwant the progress and a final line", code, stdout, term)
	}
}
