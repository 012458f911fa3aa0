package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// A dead letter larger than the server's max_allowed_packet cannot be
// stored: it is kept without its payload and headers, and says why, once.
// Before, every redelivery ran the handler and failed to write the dead
// letter, counting nothing, for ever.
func TestMySQLDeadLetterTooLarge(t *testing.T) {
	t.Parallel()
	db := openMySQL(t, "")
	var limit int
	if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&limit); err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context, *sql.Tx, *inbox.Message) error { return errors.New("boom") }
	for _, tc := range []struct {
		name    string
		dsn     string // extra DSN parameter
		payload []byte
		id      string
		tx      bool // ProcessTx
		want    string
	}{
		// Refused before it is sent (sqlstore.ErrTooLarge).
		{name: "Process", payload: bytes.Repeat([]byte("x"), limit+1), id: "big", want: "max_allowed_packet"},
		{name: "ProcessTx", payload: bytes.Repeat([]byte("x"), limit+1), id: "big", tx: true, want: "max_allowed_packet"},
		{name: "invalid", payload: bytes.Repeat([]byte("x"), limit+1), want: "empty ID"},
		// Three quarters of the limit, but every byte escaped into the
		// statement's text doubles it.
		{name: "escaped", dsn: "interpolateParams=true", payload: bytes.Repeat([]byte{0}, limit*3/4), id: "big", want: "max_allowed_packet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openMySQL(t, tc.dsn)
			ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "big", MaxAttempts: 1}, false)
			m := inbox.Message{ID: tc.id, Type: "t", Payload: tc.payload, Headers: map[string]string{"h": "v"}}
			process := func() (inbox.Outcome, error) {
				if !tc.tx {
					return ib.Process(ctx, m, fail)
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				out, err := ib.ProcessTx(ctx, tx, m, fail)
				if out.Commit() {
					t.Fatalf("ProcessTx: Commit() true for %v, want false: it ended the transaction", out.Status)
				}
				_ = tx.Rollback() // harmless
				return out, err
			}
			out, err := process()
			if out.Status != inbox.DeadLettered || err != nil {
				t.Fatalf("first delivery: %v (%v), want DeadLettered", out.Status, err)
			}
			if out, err := process(); out.Status != inbox.Duplicate || err != nil {
				t.Fatalf("redelivery: %v (%v), want Duplicate", out.Status, err)
			}
			dls, err := ib.DeadLetters(ctx, nil)
			if err != nil || len(dls) != 1 {
				t.Fatalf("dead letters: %d (%v), want 1", len(dls), err)
			}
			dl := dls[0]
			if !dl.PayloadLost || dl.Message.Payload != nil || dl.Message.Headers != nil {
				t.Fatalf("dead letter: PayloadLost %v, %d bytes, headers %v; want lost, none", dl.PayloadLost, len(dl.Message.Payload), dl.Message.Headers)
			}
			if !strings.Contains(dl.Error, tc.want) || !strings.Contains(dl.Error, "payload") {
				t.Fatalf("dead letter error %q, want it to name the payload and %q", dl.Error, tc.want)
			}
			if _, err := ib.Replay(ctx, dl.ID, fail); !errors.Is(err, inbox.ErrPayloadLost) {
				t.Fatalf("Replay: %v, want ErrPayloadLost", err)
			}
			if err := ib.Discard(ctx, dl.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
