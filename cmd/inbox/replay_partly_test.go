package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store"
)

// TestReplayPartly: a replay of several dead letters, one of which fails
// after (or before) another was replayed, exits 5 (partly done) and says
// which were replayed (stdout, or each one's status with -json); a dead
// letter not found while the others were replayed exits 4. The failure
// is real: the dead letter's row locked past -lock-timeout, or its ID
// published within NATS's duplicate window.
func TestReplayPartly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dialect string
		// block makes the replay of dead letter id (of message msgID) fail.
		block      func(t *testing.T, e *dbEnv, s *replayStream, id int64, msgID string)
		status     string // the blocked one's JSON status
		code       int    // the blocked one's exit status, alone
		stderrWant string
	}{
		{name: "postgres row locked", dialect: "postgres", block: lockBlock, status: "failed", code: exitFailure, stderrWant: "lock timeout"},
		{name: "mysql row locked", dialect: "mysql", block: lockBlock, status: "failed", code: exitFailure, stderrWant: "Lock wait timeout"},
		{name: "sqlite duplicate window", dialect: "sqlite", block: dupBlock, status: "duplicate_window", code: exitTempFail, stderrWant: "duplicate window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, js, name := natsStream(t, "CMDPART_", jetstream.StreamConfig{Duplicates: time.Minute})
			s := &replayStream{js: js, name: name, subject: name + ".msgs", flags: []string{"-nats", testenv.NATSURL(), "-subject", name + ".msgs"}}
			e := openDB(t, tc.dialect)
			ib := e.inbox(t, inbox.Config{Consumer: "p"})
			dl := func(id string) int64 {
				return deadLetterOf(t, e, ib, inbox.Message{ID: id, Type: "t", Payload: []byte("pay " + id)})
			}
			args := func(more ...string) []string {
				a := append(append([]string{"dead-letters", "replay", "-consumer", "p", "-lock-timeout", "300ms"}, s.flags...), e.flags...)
				return append(a, more...)
			}
			gone := func(id int64) bool {
				_, err := e.driver.DeadLetterGet(ctx, id)
				return errors.Is(err, store.ErrNotFound)
			}
			dl1, dl2 := dl("m-1"), dl("m-2")
			tc.block(t, e, s, dl2, "m-2")

			// IDs: the first replayed, the second fails.
			code, stdout, stderr := runCmd(t, args(fmt.Sprint(dl1), fmt.Sprint(dl2))...)
			if code != exitPartial || !strings.Contains(stdout, fmt.Sprintf("replayed dead letter %d:", dl1)) ||
				strings.Contains(stdout, fmt.Sprintf("dead letter %d:", dl2)) || !strings.Contains(stderr, fmt.Sprintf("dead letter %d: ", dl2)) ||
				!strings.Contains(stderr, tc.stderrWant) || !strings.Contains(stderr, "partly done: replayed or removed 1 of 2 dead letters") {
				t.Fatalf("replay %d %d, the second blocked: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, the first replayed on stdout, the second's failure and a summary on stderr",
					dl1, dl2, code, stdout, stderr, exitPartial)
			}
			if !gone(dl1) {
				t.Fatalf("dead letter %d is still there after its replay", dl1)
			}
			wantDeadRow(t, e, dl2, "after its failed replay")

			// -all -json: the failure first, then one replayed.
			dl3 := dl("m-3")
			var out []replayJSON
			cmdJSON(t, &out, exitPartial, args("-all", "-json")...)
			if len(out) != 2 || out[0].ID != dl2 || out[0].Status != tc.status || out[0].Error == "" || out[1].ID != dl3 || out[1].Status != "replayed" {
				raw, _ := json.Marshal(out)
				t.Fatalf("replay -all -json: %s; want %d %s with its error, then %d replayed", raw, dl2, tc.status, dl3)
			}
			wantDeadRow(t, e, dl2, "after its failed replay -all")

			// Not found, the other replayed: 4, which stdout tells apart.
			dl4 := dl("m-4")
			code, stdout, stderr = runCmd(t, args(fmt.Sprint(dl4), "999999")...)
			if code != exitNotFound || !strings.Contains(stdout, fmt.Sprintf("replayed dead letter %d:", dl4)) || !strings.Contains(stderr, "dead letter 999999: no such dead letter") {
				t.Fatalf("replay %d 999999: exit %d\nstdout: %s\nstderr: %s\nwant %d, %d replayed", dl4, code, stdout, stderr, exitNotFound, dl4)
			}
			// Not found and failed, nothing done: the failure's status, not
			// 4, which a script may take for "done already".
			if code, stdout, stderr = runCmd(t, args("999999", fmt.Sprint(dl2))...); code != tc.code {
				t.Fatalf("replay 999999 %d, the second blocked: exit %d\nstdout: %s\nstderr: %s\nwant %d, the blocked one's", dl2, code, stdout, stderr, tc.code)
			}
			wantDeadRow(t, e, dl2, "after its failed replay")
			// With another consumer's dead letter (refused, exit 1): 1, which
			// no later run fixes, over 75.
			other := deadLetterOf(t, e, e.inbox(t, inbox.Config{Consumer: "q"}), inbox.Message{ID: "q-1", Type: "t", Payload: []byte("q")})
			if code, stdout, stderr = runCmd(t, args(fmt.Sprint(dl2), fmt.Sprint(other))...); code != exitFailure {
				t.Fatalf("replay %d %d, the first blocked, the second refused: exit %d\nstdout: %s\nstderr: %s\nwant 1", dl2, other, code, stdout, stderr)
			}
			var ids []string
			for _, m := range s.published(t) {
				ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
			}
			if got := strings.Join(ids, " "); got != "m-1 m-3 m-4" && got != "m-2 m-1 m-3 m-4" {
				t.Fatalf("published %q, want m-1, m-3 and m-4 (and m-2 only as the test's own publish)", got)
			}
		})
	}
}

// cancelAfterRelease is an inspection that cancels the replay's context
// after its first release committed: an interrupt (SIGINT) between two
// dead letters.
type cancelAfterRelease struct {
	inspection
	cancel context.CancelFunc
}

func (c cancelAfterRelease) release(ctx context.Context, id int64, lt time.Duration, fn func(*store.DeadLetter, bool) error) error {
	err := c.inspection.release(ctx, id, lt, fn)
	c.cancel()
	return err
}

// TestReplayInterrupted: a replay interrupted after a dead letter was
// replayed exits 5 (partly done), not 1.
func TestReplayInterrupted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newReplayStream(t)
	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "i"})
	dl1 := deadLetterOf(t, e, ib, inbox.Message{ID: "i-1", Type: "t", Payload: []byte("p")})
	dl2 := deadLetterOf(t, e, ib, inbox.Message{ID: "i-2", Type: "t", Payload: []byte("p")})
	dest, err := (&brokerFlags{nats: testenv.NATSURL(), subject: s.subject, timeout: 4 * time.Second}).publisher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dest.close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rp := &replayer{in: cancelAfterRelease{newInspection(e.driver), cancel}, dest: dest, consumer: []byte("i"),
		lockTimeout: time.Second, timeout: 4 * time.Second}
	var stdout, stderr strings.Builder
	err = rp.run(rctx, []int64{dl1, dl2}, false, nil, false, &stdout, &stderr)
	var coded *codedError
	if !errors.As(err, &coded) || coded.code != exitPartial || !strings.Contains(err.Error(), "then stopped: context canceled") ||
		!strings.Contains(stdout.String(), fmt.Sprintf("replayed dead letter %d:", dl1)) {
		t.Fatalf("replay interrupted after the first: %v\nstdout: %s\nstderr: %s\nwant exit %d, the first on stdout", err, stdout.String(), stderr.String(), exitPartial)
	}
	wantDeadRow(t, e, dl2, "not tried")
}

// lockBlock holds dead letter id's row lock until the test ends.
func lockBlock(t *testing.T, e *dbEnv, _ *replayStream, id int64, _ string) { e.lockDeadLetter(t, id) }

// dupBlock publishes msgID to s, so that a replay of it within the
// stream's duplicate window is dropped (exit 75).
func dupBlock(t *testing.T, _ *dbEnv, s *replayStream, _ int64, msgID string) {
	t.Helper()
	pub, err := natsjs.NewPublisher(s.js, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), &broker.Message{ID: msgID, Subject: s.subject, Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
}
