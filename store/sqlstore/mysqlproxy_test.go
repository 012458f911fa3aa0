package sqlstore_test

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

	"github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/storetest"
)

// prepareRefuser is a TCP proxy in front of the real MariaDB that answers
// every COM_STMT_PREPARE with the server's own error 1461, as the server
// does when max_prepared_stmt_count is reached (and as a proxy without
// server-side prepares does, with another number). Everything else passes
// through unchanged.
type prepareRefuser struct {
	addr    string
	refuse  atomic.Bool // refusing now; initially true
	refused atomic.Int64
}

// newPrepareRefuser starts the proxy to the server at target; it stops
// when tb ends.
func newPrepareRefuser(tb testing.TB, target string) *prepareRefuser {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &prepareRefuser{addr: ln.Addr().String()}
	p.refuse.Store(true)
	var conns sync.WaitGroup
	tb.Cleanup(func() {
		_ = ln.Close()
		conns.Wait()
	})
	go func() {
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
			conns.Add(1)
			go func() {
				defer conns.Done()
				p.serve(client, server)
			}()
		}
	}()
	return p
}

// serve relays one connection. The client's packets are read one by one:
// a command (sequence number 0) that is COM_STMT_PREPARE (0x16) gets the
// error reply instead of being forwarded. The protocol is request and
// response, so the server has nothing in flight to the client then.
func (p *prepareRefuser) serve(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	var wmu sync.Mutex // writes to client: the relay and the refusals
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				wmu.Lock()
				_, werr := client.Write(buf[:n])
				wmu.Unlock()
				if werr != nil {
					return
				}
			}
			if err != nil {
				_ = client.Close()
				return
			}
		}
	}()
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
		if header[3] == 0 && n > 0 && payload[0] == 0x16 && p.refuse.Load() {
			p.refused.Add(1)
			wmu.Lock()
			_, err := client.Write(errPacket(1461, "Can't create more than max_prepared_stmt_count statements (current value: 16382)"))
			wmu.Unlock()
			if err != nil {
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
// refused counts the refusals.
func refusedHarness() (h storetest.Harness[*sql.Tx], refused *atomic.Int64) {
	refused = new(atomic.Int64)
	return mysqlHarnessVia("interpolateParams=true", func(tb testing.TB, addr string) string {
		proxy := newPrepareRefuser(tb, addr)
		tb.Cleanup(func() { refused.Add(proxy.refused.Load()) })
		return proxy.addr
	}), refused
}

// TestMySQLStorePreparesRefused: where the server refuses to prepare the
// claim statements, the store sends them as text and passes the whole
// suite.
func TestMySQLStorePreparesRefused(t *testing.T) {
	h, refused := refusedHarness()
	t.Run("suite", func(t *testing.T) { storetest.Run(t, h) })
	if refused.Load() == 0 && !t.Failed() {
		t.Fatal("no statement was refused: the proxy did not see the store prepare")
	}
}

// TestMySQLPrepareRefusedOnAnotherConnection: the claim statements were
// prepared on one connection; a transaction on another connection, where
// the server refuses to prepare them, claims with text instead (in the
// same transaction), and the driver stops preparing. interpolateParams=true,
// as without it the driver prepares every statement with arguments itself.
func TestMySQLPrepareRefusedOnAnotherConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(withParam(t, testenv.MySQLDatabase(t), "interpolateParams=true"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newPrepareRefuser(t, cfg.Addr)
	proxy.refuse.Store(false)
	cfg.Addr = proxy.addr
	db, err := sqlstore.OpenMySQL(cfg.FormatDSN(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var logs strings.Builder
	var logMu sync.Mutex
	ib := mysqlInbox(t, db, sqlstore.Config{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))}, "refused", true)
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
	process("a", inbox.Processed) // prepares the claim statements on a connection
	// Keep that connection busy, so that the next transaction gets a new
	// one, where preparing is refused.
	busy, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	proxy.refuse.Store(true)
	process("b", inbox.Processed)
	process("b", inbox.Duplicate)
	if proxy.refused.Load() == 0 {
		t.Fatal("no prepare was refused: the transaction did not get a new connection")
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
	cfg, err := mysql.ParseDSN(testenv.MySQLDatabase(t))
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
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1461 {
		t.Fatalf("prepare through the proxy: %v, want MySQL error 1461", err)
	}
}
