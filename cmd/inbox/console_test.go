package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// syncBuffer is a bytes.Buffer for a command running in a goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// noConsoleEnv clears the console's credentials from the environment.
func noConsoleEnv(t *testing.T) {
	for _, k := range []string{envConsoleToken, envConsoleUser, envConsolePassword} {
		t.Setenv(k, "")
	}
}

// TestConsoleRefusesOpenAddress: off loopback without credentials the
// command does not start (exit 2), and says what to set.
func TestConsoleRefusesOpenAddress(t *testing.T) {
	noConsoleEnv(t)
	e := openDB(t, "sqlite")
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		code, stdout, stderr := runCmd(t, append([]string{"console", "-listen", listen}, e.flags...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "is not a loopback address: set INBOX_CONSOLE_TOKEN, -token-file, or INBOX_CONSOLE_USER and INBOX_CONSOLE_PASSWORD") {
			t.Errorf("-listen %s: exit %d, stderr %q; want 2 and the refusal", listen, code, stderr)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{envConsoleUser: "ops"}, nil, "set both INBOX_CONSOLE_USER and INBOX_CONSOLE_PASSWORD, or neither"},
		{map[string]string{envConsoleToken: "t"}, []string{"-token-file", "/nonexistent"}, "give INBOX_CONSOLE_TOKEN or -token-file, not both"},
		{nil, []string{"-token-file", filepath.Join(t.TempDir(), "missing")}, "-token-file: open"},
		{nil, []string{"-listen", "nowhere"}, `-listen "nowhere": address nowhere: missing port`},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		code, _, stderr := runCmd(t, append(append([]string{"console"}, tc.args...), e.flags...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want 2 and %q", tc.env, tc.args, code, stderr, tc.want)
		}
		noConsoleEnv(t)
	}
}

// startConsole runs inbox console with args until t ends, and returns
// its URL, read from stderr.
func startConsole(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- exitCode(ctx, append([]string{"console", "-listen", "127.0.0.1:0"}, args...), &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 || !strings.Contains(stderr.String(), "inbox console: stopped") {
				t.Errorf("after SIGINT: exit %d, stderr %q; want 0 and stopped", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the console did not stop within 10 s of its context's end")
		}
	})
	re := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/) \(([^)]*)\)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the console exited %d before serving: %s", code, stderr.String())
		default:
		}
	}
	t.Fatalf("no URL on stderr within 10 s: %q", stderr.String())
	return ""
}

func httpGet(t *testing.T, u string, edit func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestConsoleServes: the command serves the overview of a real SQLite
// database over HTTP, with its dead letters and their group.
func TestConsoleServes(t *testing.T) {
	noConsoleEnv(t)
	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "billing"})
	for _, id := range []string{"p-1", "p-2"} {
		out, _ := ib.Process(context.Background(), inbox.Message{ID: id}, func(context.Context, *sql.Tx, *inbox.Message) error {
			return inbox.Permanent(errors.New("charge " + id + ": card declined"))
		})
		if out.Status != inbox.DeadLettered {
			t.Fatalf("%s: %v, want dead-lettered", id, out.Status)
		}
	}
	u := startConsole(t, append([]string{"-read-only"}, e.flags...)...)
	code, body := httpGet(t, u, nil)
	for _, w := range []string{"<h3>billing</h3>", `href="./dead-letters?consumer=billing">2</a>`, "charge p-&lt;n&gt;: card declined", "read-only</span>"} {
		if !strings.Contains(body, w) {
			t.Errorf("GET %s: %d, lacks %q:\n%s", u, code, w, body)
		}
	}
	if code, _ := httpGet(t, u+"dead-letters?consumer=billing", nil); code != 200 {
		t.Errorf("dead letters: %d", code)
	}
}

// TestConsoleAuth: with a token from the environment or a file, or a
// user and password, a request without them is refused.
func TestConsoleAuth(t *testing.T) {
	noConsoleEnv(t)
	e := openDB(t, "sqlite")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		good, bad func(*http.Request)
	}{
		{"token", map[string]string{envConsoleToken: "from-the-env"}, nil, bearer("from-the-env"), bearer("from-the-file")},
		{"token file", nil, []string{"-token-file", file}, bearer("from-the-file"), bearer("from-the-env")},
		{"basic", map[string]string{envConsoleUser: "ops", envConsolePassword: "pa55"}, nil,
			func(r *http.Request) { r.SetBasicAuth("ops", "pa55") }, func(r *http.Request) { r.SetBasicAuth("ops", "pa5") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			u := startConsole(t, append(tc.args, e.flags...)...)
			for _, r := range []struct {
				edit func(*http.Request)
				want int
			}{{nil, 401}, {tc.bad, 401}, {tc.good, 200}} {
				if code, _ := httpGet(t, u, r.edit); code != r.want {
					t.Errorf("GET %s: %d, want %d", u, code, r.want)
				}
			}
		})
	}
}

// TestConsoleHidesPassword: a database that refuses the console leaves
// its DSN's password out of stderr.
func TestConsoleHidesPassword(t *testing.T) {
	noConsoleEnv(t)
	code, stdout, stderr := runCmd(t, "console", "-listen", "127.0.0.1:0", "-postgres", "postgres://app:hunter2-secret@127.0.0.1:1/app?connect_timeout=2")
	if code != exitFailure || stdout != "" || stderr == "" || strings.Contains(stderr, "hunter2") {
		t.Errorf("exit %d, stderr %q; want 1 and an error without the password", code, stderr)
	}
}

// TestConsoleReplays: with -replay-consumer and NATS, the console's
// replay button publishes the dead letter to the subject with its ID and
// removes it; a broker without -replay-consumer is a usage error.
func TestConsoleReplays(t *testing.T) {
	noConsoleEnv(t)
	s := newReplayStream(t)
	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "billing"})
	id := deadLetterOf(t, e, ib, inbox.Message{ID: "c-1", Type: "charge", Payload: []byte("pay")})

	var stderr strings.Builder
	if code := exitCode(context.Background(), append(append([]string{"console"}, e.flags...), s.flags...), io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "-replay-consumer") {
		t.Errorf("a broker without -replay-consumer: exit %d, %q; want %d", code, stderr.String(), exitUsage)
	}

	u := startConsole(t, append(append([]string{"-replay-consumer", "billing"}, e.flags...), s.flags...)...)
	code, page := httpGet(t, fmt.Sprintf("%sdead-letters/%d", u, id), nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if code != 200 || m == nil || !strings.Contains(page, "Replay to "+s.subject) {
		t.Fatalf("the dead letter's page: %d, no replay form:\n%s", code, page)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(fmt.Sprintf("%sdead-letters/%d/replay", u, id), url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("replay: %d, want 303", resp.StatusCode)
	}
	got := s.published(t)
	if len(got) != 1 || got[0].Header.Get(jetstream.MsgIDHeader) != "c-1" || string(got[0].Data) != "pay" {
		t.Fatalf("published %d messages, want c-1 with its payload", len(got))
	}
	if _, err := e.driver.DeadLetterGet(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after the replay, the dead letter: %v; want it gone", err)
	}
}
