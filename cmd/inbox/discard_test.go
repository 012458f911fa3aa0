package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// table is the qualified name of the inbox table name (inbox_dead_letters) in e.
func (e *dbEnv) table(name string) string {
	if e.flags[0] == "-postgres" {
		return e.flags[3] + "." + name
	}
	return name
}

// addDeadLetters writes n dead letters of consumer c and returns their
// IDs, in order.
func (e *dbEnv) addDeadLetters(t *testing.T, n int) []int64 {
	t.Helper()
	ph2 := "?"
	if e.ph == "$1" {
		ph2 = "$2"
	}
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var last int64
	_ = tx.QueryRow("SELECT COALESCE(MAX(id), 0) FROM " + e.table("inbox_dead_letters")).Scan(&last)
	for i := range n {
		if _, err := tx.Exec("INSERT INTO "+e.table("inbox_dead_letters")+" (consumer, message_id, error, attempts, failed_at) VALUES ("+
			e.ph+", "+ph2+", 'boom', 1, CURRENT_TIMESTAMP)", []byte("c"), fmt.Appendf(nil, "m-%d-%d", last, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ids := e.deadLetterIDs(t)
	return ids[len(ids)-n:]
}

// deadLetterIDs returns the IDs of the dead letters, in order.
func (e *dbEnv) deadLetterIDs(t *testing.T) []int64 {
	t.Helper()
	rows, err := e.db.Query("SELECT id FROM " + e.table("inbox_dead_letters") + " ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// discardedIDs are the IDs in discard's text output.
func discardedIDs(t *testing.T, stdout string) []int64 {
	t.Helper()
	var ids []int64
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var id int64
		if _, err := fmt.Sscanf(line, "discarded dead letter %d", &id); err != nil {
			t.Fatalf("discard's output: line %q is not 'discarded dead letter ID'", line)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestDiscardAllPartly: discard -all that fails after a first batch
// (a row lock held by another transaction, past the lock timeout) prints
// what it deleted (-json too) and exits 5 (partly done); one that waits for the lock
// discards only the dead letters there were when it started, not one
// made meanwhile.
func TestDiscardAllPartly(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := openDB(t, dialect)
			// The store's lock timeout on a session of the DSN's: short.
			short := slices.Clone(e.flags)
			param := "innodb_lock_wait_timeout=1"
			if dialect == "postgres" {
				param = "lock_timeout=300"
			}
			switch {
			case dialect == "postgres" && !strings.Contains(short[1], "://"): // key=value
				short[1] += " " + param
			case strings.Contains(short[1], "?"):
				short[1] += "&" + param
			default:
				short[1] += "?" + param
			}
			ids := e.addDeadLetters(t, discardPage+100)
			lock := func(id int64) func() { return e.lockDeadLetter(t, id) }

			unlock := lock(ids[discardPage+50])
			code, stdout, stderr := runCmd(t, append([]string{"dead-letters", "discard", "-all"}, short...)...)
			unlock()
			if code != exitPartial || stdout == "" || !slices.Equal(discardedIDs(t, stdout), ids[:discardPage]) {
				t.Fatalf("discard -all, a row locked in the second batch: exit %d, %d lines on stdout; want exit %d and the %d dead letters of the first batch\nstderr: %s",
					code, strings.Count(stdout, "\n"), exitPartial, discardPage, stderr)
			}
			if !strings.Contains(stderr, fmt.Sprintf("discarded %d dead letters, then failed: ", discardPage)) {
				t.Errorf("discard -all, partly done: stderr %q, want it to say how many were discarded before the failure", stderr)
			}
			if left := e.deadLetterIDs(t); !slices.Equal(left, ids[discardPage:]) {
				t.Fatalf("after the partial discard, %d dead letters left, want the %d of the second batch", len(left), len(ids)-discardPage)
			}

			// The run waits for a row lock; a dead letter made meanwhile
			// stays.
			unlock = lock(ids[discardPage+50])
			type result struct {
				code           int
				stdout, stderr string
			}
			done := make(chan result, 1)
			go func() {
				var r result
				r.code, r.stdout, r.stderr = runCmd(t, append([]string{"dead-letters", "discard", "-all"}, e.flags...)...)
				done <- r
			}()
			if !e.waitForLockWait(t) {
				unlock()
				r := <-done
				t.Fatalf("no session waited for the row lock within 10 s; discard -all: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			late := e.addDeadLetters(t, 1)
			unlock()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("discard -all did not end 30 s after the lock was released")
			}
			if r.code != 0 || !slices.Equal(discardedIDs(t, r.stdout), ids[discardPage:]) {
				t.Fatalf("discard -all: exit %d, discarded %v; want 0 and the %d dead letters there were at its start\nstderr: %s",
					r.code, discardedIDs(t, r.stdout), len(ids)-discardPage, r.stderr)
			}
			if left := e.deadLetterIDs(t); !slices.Equal(left, late) {
				t.Fatalf("after discard -all, dead letters %v left, want %v, made while it ran", left, late)
			}

			// -json, partly done: the object, with the error.
			all := append(late, e.addDeadLetters(t, discardPage)...)
			unlock = lock(all[len(all)-1])
			var out struct {
				Discarded []int64 `json:"discarded"`
				Error     string  `json:"error"`
			}
			cmdJSON(t, &out, exitPartial, append([]string{"dead-letters", "discard", "-all", "-json"}, short...)...)
			unlock()
			if !slices.Equal(out.Discarded, all[:discardPage]) || !strings.Contains(out.Error, "then failed: ") {
				t.Fatalf("discard -all -json, partly done: %d discarded, error %q; want the first %d and the error", len(out.Discarded), out.Error, discardPage)
			}
		})
	}
}

// lockDeadLetter holds dead letter id's row lock, in a transaction of
// its own, until the returned func (or t's end).
func (e *dbEnv) lockDeadLetter(t *testing.T, id int64) (unlock func()) {
	t.Helper()
	tx, err := e.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	if err := tx.QueryRow("SELECT id FROM "+e.table("inbox_dead_letters")+" WHERE id = "+e.ph+" FOR UPDATE", id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return func() { _ = tx.Rollback() }
}

// waitForLockWait waits until a session waits for a row lock on e's dead
// letters table (MySQL: runs a DELETE on it, which the lock then holds),
// at most 10 s, and reports whether one did.
func (e *dbEnv) waitForLockWait(t *testing.T) bool {
	t.Helper()
	q := `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`
	arg := any(e.flags[len(e.flags)-1]) // the schema, in the statement's quoted table name
	if e.ph == "?" {
		arg = "inbox_dead_letters"
		q = "SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() AND info LIKE CONCAT('DELETE FROM `', ?, '`%')"
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := e.db.QueryRow(q, arg).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return true
		}
	}
	return false
}
