package mysql_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/storetest"
)

// prepareRefuser is a TCP proxy in front of the real MariaDB that answers
// COM_STMT_PREPARE with the server's own error 1461, as the server does
// when max_prepared_stmt_count is reached (and as a proxy without
// server-side prepares does, with another number). Everything else passes
// through unchanged. It parses plain packets only: no TLS, no compression.
type prepareRefuser struct {
	addr string
	// refuse says whether to refuse the statement being prepared; nil
	// refuses none. Initially every one.
	refuse  atomic.Pointer[func(query []byte) bool]
	refused atomic.Int64
}

func refuseAll([]byte) bool { return true }

// newPrepareRefuser starts the proxy to the server at target; it stops,
// closing its connections, when tb ends.
func newPrepareRefuser(tb testing.TB, target string) *prepareRefuser {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &prepareRefuser{addr: ln.Addr().String()}
	all := refuseAll
	p.refuse.Store(&all)
	var (
		mu     sync.Mutex
		open   []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_, _ = client.Close(), server.Close()
				return
			}
			open = append(open, client, server)
			wg.Add(2)
			mu.Unlock()
			go func() {
				defer wg.Done()
				p.serve(client, server)
			}()
			go func() {
				defer wg.Done()
				relay(client, server)
			}()
		}
	}()
	return p
}

// relay copies the server's bytes to the client, under the client's write
// lock (see serve), until either side closes.
func relay(client, server net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if _, werr := lockedWrite(client, buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// writeLocks serializes the writes to each client connection: the relay's
// and serve's refusals.
var writeLocks sync.Map // net.Conn -> *sync.Mutex

func lockedWrite(c net.Conn, b []byte) (int, error) {
	mu, _ := writeLocks.LoadOrStore(c, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	return c.Write(b)
}

// serve relays the client's packets to the server, one by one: a command
// (sequence number 0) that is COM_STMT_PREPARE (0x16) of a refused
// statement gets the error reply instead of being forwarded. The protocol
// is request and response, so the server has nothing in flight to the
// client then.
func (p *prepareRefuser) serve(client, server net.Conn) {
	defer server.Close()
	defer writeLocks.Delete(client)
	for {
		var header [4]byte
		if _, err := io.ReadFull(client, header[:]); err != nil {
			return
		}
		n := int(header[0]) | int(header[1])<<8 | int(header[2])<<16
		payload := make([]byte, n)
		if _, err := io.ReadFull(client, payload); err != nil {
			return
		}
		if refuse := p.refuse.Load(); header[3] == 0 && n > 0 && payload[0] == 0x16 && refuse != nil && (*refuse)(payload[1:]) {
			p.refused.Add(1)
			if _, err := lockedWrite(client, errPacket(1461, "Can't create more than max_prepared_stmt_count statements (current value: 16382)")); err != nil {
				return
			}
			continue
		}
		if _, err := server.Write(append(header[:], payload...)); err != nil {
			return
		}
	}
}

// errPacket is a MySQL ERR packet, sequence number 1.
func errPacket(code uint16, msg string) []byte {
	body := []byte{0xff, 0, 0, '#', 'H', 'Y', '0', '0', '0'}
	binary.LittleEndian.PutUint16(body[1:3], code)
	body = append(body, msg...)
	n := len(body)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 1}, body...)
}

// refusedHarness runs the suite through a prepareRefuser, with
// interpolateParams=true (without it the driver prepares every statement
// with arguments, the application's too, which such a server refuses).
// refused counts the refusals, opens the environments.
func refusedHarness() (h storetest.Harness[*sql.Tx], refused, opens *atomic.Int64) {
	refused, opens = new(atomic.Int64), new(atomic.Int64)
	return mysqlHarnessVia("interpolateParams=true", func(tb testing.TB, addr string) string {
		opens.Add(1)
		proxy := newPrepareRefuser(tb, addr)
		tb.Cleanup(func() { refused.Add(proxy.refused.Load()) })
		return proxy.addr
	}), refused, opens
}

// TestMySQLStorePreparesRefused: where the server refuses to prepare the
// claim statements, the store sends them as text and passes the whole
// suite. (That it stops trying after the first refusal is
// TestMySQLPrepareRefused's: here claims that start together each try
// once.)
func TestMySQLStorePreparesRefused(t *testing.T) {
	h, refused, opens := refusedHarness()
	t.Run("suite", func(t *testing.T) { storetest.Run(t, h) })
	t.Logf("%d prepares refused in %d environments", refused.Load(), opens.Load())
	if opens.Load() == 0 && !t.Failed() { // every test of the suite skipped: no MySQL
		t.Skip("MySQL unavailable: the suite's tests skipped")
	}
	if refused.Load() == 0 && !t.Failed() {
		t.Fatal("no prepare was refused: the proxy did not see the store prepare")
	}
}

// TestMySQLPrepareRefused: where the server refuses to prepare a claim
// statement, the claim is sent as text (in the same transaction when the
// refusal came inside it) and the driver stops preparing, with one
// warning. interpolateParams=true, as without it the driver prepares every
// statement with arguments itself.
func TestMySQLPrepareRefused(t *testing.T) {
	t.Parallel()
	lookup := func(q []byte) bool { return strings.Contains(string(q), "SELECT fingerprint") }
	for _, tc := range []struct {
		name string
		// refusedAtStart: refuse every prepare from the start; else the
		// statements are prepared on one connection first, and then
		// refuse decides on another one.
		refusedAtStart bool
		refuse         func([]byte) bool
		wantRefused    int64 // 0: at least one
	}{
		{name: "from the first prepare", refusedAtStart: true, wantRefused: 1},
		{name: "on another connection", refuse: refuseAll},
		{name: "the duplicate's lookup on another connection", refuse: lookup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg, err := gomysql.ParseDSN(withParam(t, mysqlenv.Database(t), "interpolateParams=true"))
			if err != nil {
				t.Fatal(err)
			}
			proxy := newPrepareRefuser(t, cfg.Addr)
			if !tc.refusedAtStart {
				proxy.refuse.Store(nil)
			}
			cfg.Addr = proxy.addr
			db, err := mysql.Open(cfg.FormatDSN(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var logs strings.Builder
			var logMu sync.Mutex
			ib := mysqlInbox(t, db, sqlstore.Config{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))}, inbox.Config{Consumer: "refused"}, true)
			write := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES (?)", m.ID)
				return err
			}
			process := func(id string, want inbox.Status) {
				t.Helper()
				out, err := ib.Process(ctx, inbox.Message{ID: id}, write)
				if err != nil || out.Status != want {
					t.Fatalf("%s: %v %v, want %v", id, out.Status, err, want)
				}
			}
			process("a", inbox.Processed) // prepares the claim statements on a connection, unless refused
			if !tc.refusedAtStart {
				// Keep that connection busy, so that the next transaction
				// gets a new one, where preparing is refused.
				busy, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer busy.Close()
				proxy.refuse.Store(&tc.refuse)
			}
			process("a", inbox.Duplicate)
			process("b", inbox.Processed)
			process("b", inbox.Duplicate)
			refused := proxy.refused.Load()
			if tc.wantRefused != 0 && refused != tc.wantRefused || refused == 0 {
				t.Fatalf("%d prepares refused, want %d (0: at least one)", refused, tc.wantRefused)
			}
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM ledger WHERE k IN ('a', 'b')").Scan(&n); err != nil || n != 2 {
				t.Fatalf("%d effects (%v), want 2", n, err)
			}
			logMu.Lock()
			defer logMu.Unlock()
			if got := strings.Count(logs.String(), "refused to prepare"); got != 1 {
				t.Fatalf("%d warnings about the refusal, want 1; log:\n%s", got, logs.String())
			}
		})
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The proxy's refusal is what go-sql-driver reports for the server's own.
func TestPrepareRefuserReplies(t *testing.T) {
	t.Parallel()
	cfg, err := gomysql.ParseDSN(mysqlenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = newPrepareRefuser(t, cfg.Addr).addr
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("text query through the proxy: %d %v", one, err)
	}
	_, err = db.Prepare("SELECT ?")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1461 {
		t.Fatalf("prepare through the proxy: %v, want MySQL error 1461", err)
	}
}
