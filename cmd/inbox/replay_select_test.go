package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/idscope"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store"
)

// replayStream is a JetStream stream that replays go to, without a
// consumer: a test reads what was published from the stream itself.
type replayStream struct {
	js      jetstream.JetStream
	name    string
	subject string
	flags   []string // the command's broker flags
}

// natsStream connects to NATS (skipping t without it) and creates a
// stream named prefix and a random suffix, with subjects name.>, deleted
// when t ends.
func natsStream(t *testing.T, prefix string, cfg jetstream.StreamConfig) (*nats.Conn, jetstream.JetStream, string) {
	t.Helper()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS at "+testenv.NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = testenv.Name(prefix)
	cfg.Subjects = []string{cfg.Name + ".>"}
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
	return nc, js, cfg.Name
}

func newReplayStream(t *testing.T) *replayStream {
	t.Helper()
	_, js, name := natsStream(t, "CMDSEL_", jetstream.StreamConfig{Duplicates: natsDupWindow})
	return &replayStream{js: js, name: name, subject: name + ".msgs", flags: []string{"-nats", testenv.NATSURL(), "-subject", name + ".msgs"}}
}

// consume runs ib's consumer (durable) on the stream with h until stop,
// which fails t if Consume failed.
func (s *replayStream) consume(t *testing.T, ib *inbox.Inbox[*sql.Tx], durable string, h inbox.Handler[*sql.Tx]) (stop func()) {
	t.Helper()
	src, err := natsjs.NewSource(context.Background(), s.js, &natsjs.Config{Stream: s.name, Durable: durable, AckWait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(ctx, ib, src, h, nil) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	}
}

// published returns the messages in the stream, in order.
func (s *replayStream) published(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	info := st.CachedInfo()
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// deadLetterOf processes msg in ib with a handler that fails for good and
// returns the dead letter's ID.
func deadLetterOf(t *testing.T, e *dbEnv, ib *inbox.Inbox[*sql.Tx], msg inbox.Message) int64 {
	t.Helper()
	ctx := context.Background()
	out, err := ib.Process(ctx, msg, func(context.Context, *sql.Tx, *inbox.Message) error {
		return inbox.Permanent(errors.New("broken"))
	})
	if out.Status != inbox.DeadLettered {
		t.Fatalf("%q: %v, %v; want DeadLettered", msg.ID, out.Status, err)
	}
	found, err := e.driver.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if strings.HasSuffix(string(f.Key.MessageID), msg.ID) && f.Type == msg.Type {
			return f.ID
		}
	}
	t.Fatalf("no dead letter of %q", msg.ID)
	return 0
}

// wantDeadRow fails unless dead letter id is there with its dead row.
func wantDeadRow(t *testing.T, e *dbEnv, id int64, why string) {
	t.Helper()
	det, err := e.driver.DeadLetterGet(context.Background(), id)
	if err != nil || det.RowState != store.RowDead {
		t.Fatalf("%s: dead letter %d: %+v, %v; want it kept with its dead row", why, id, det, err)
	}
}

// TestReplayOneConsumer: replay needs -consumer, and refuses (publishes
// nothing, changes nothing) a dead letter of another consumer, since the
// destination reaches one consumer; without that, consumer a's dead
// letter would be deleted and its row released while b got the copy.
func TestReplayOneConsumer(t *testing.T) {
	t.Parallel()
	s := newReplayStream(t)
	e := openDB(t, "sqlite")
	a, b := e.inbox(t, inbox.Config{Consumer: "a"}), e.inbox(t, inbox.Config{Consumer: "b"})
	idA := deadLetterOf(t, e, a, inbox.Message{ID: "a-1", Type: "t", Payload: []byte("pa")})
	idB := deadLetterOf(t, e, b, inbox.Message{ID: "b-1", Type: "t", Payload: []byte("pb")})
	args := func(more ...string) []string {
		return append(append(append([]string{"dead-letters", "replay"}, s.flags...), e.flags...), more...)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"-all without -consumer", args("-all")},
		{"IDs without -consumer", args(fmt.Sprint(idA), fmt.Sprint(idB))},
		{"-all, filters but no -consumer", args("-all", "-type", "t")},
	} {
		if code, stdout, stderr := runCmd(t, tc.args...); code != exitUsage || !strings.Contains(stderr, "-consumer") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and a word on -consumer", tc.name, code, stdout, stderr)
		}
	}
	if got := s.published(t); len(got) != 0 {
		t.Fatalf("%d messages published by refused replays, want none", len(got))
	}
	wantDeadRow(t, e, idA, "after the refused replays")
	wantDeadRow(t, e, idB, "after the refused replays")

	var out []replayJSON
	cmdJSON(t, &out, exitPartial, args("-json", "-consumer", "a", fmt.Sprint(idB), fmt.Sprint(idA))...)
	if len(out) != 2 || out[0].ID != idB || out[0].Status != "refused" || !strings.Contains(out[0].Error, `consumer "b"`) ||
		out[1].ID != idA || out[1].Status != "replayed" {
		t.Fatalf("replay -consumer a of b's and a's dead letters: %+v; want b's refused (naming consumer b), a's replayed", out)
	}
	got := s.published(t)
	if len(got) != 1 || got[0].Header.Get(jetstream.MsgIDHeader) != "a-1" || string(got[0].Data) != "pa" {
		t.Fatalf("published %d messages (%+v), want a-1 alone", len(got), got)
	}
	wantDeadRow(t, e, idB, "after a replay of a's dead letters")
	if _, err := e.driver.DeadLetterGet(context.Background(), idA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a's replayed dead letter: %v, want it gone", err)
	}
}

// TestReplayScopedByType: a consumer with inbox.Config.ScopeIDByType
// stores type+ID as the key. Replay refuses such a key without
// -scope-id-by-type (publishing it as the ID would be scoped again, and
// the copy claimed under a new key); with the flag it publishes the
// message's own ID and type, so that the consumer claims the copy under
// the dead letter's key. The flag refuses a key that is not scoped.
func TestReplayScopedByType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newReplayStream(t)
	e := openDB(t, "sqlite")
	scoped := e.inbox(t, inbox.Config{Consumer: "s", ScopeIDByType: true})
	plain := e.inbox(t, inbox.Config{Consumer: "u"})
	msg := inbox.Message{ID: "m-1", Type: "payment", Payload: []byte("pay"), Headers: map[string]string{"Trace": "t1"}}
	idS := deadLetterOf(t, e, scoped, msg)
	idU := deadLetterOf(t, e, plain, inbox.Message{ID: "m-2", Type: "payment", Payload: []byte("pay 2")})
	args := func(more ...string) []string {
		return append(append(append([]string{"dead-letters", "replay"}, s.flags...), e.flags...), more...)
	}
	for _, tc := range []struct {
		name, consumer, flag, want string
		id                         int64
	}{
		{"a scoped key without the flag", "s", "", "-scope-id-by-type", idS},
		{"an unscoped key with the flag", "u", "-scope-id-by-type", "not scoped", idU},
	} {
		a := args("-consumer", tc.consumer, fmt.Sprint(tc.id))
		if tc.flag != "" {
			a = append(a, tc.flag)
		}
		code, stdout, stderr := runCmd(t, a...)
		if code != exitFailure || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and an error naming %q", tc.name, code, stdout, stderr, tc.want)
		}
		wantDeadRow(t, e, tc.id, tc.name)
	}
	if got := s.published(t); len(got) != 0 {
		t.Fatalf("%d messages published by refused replays, want none", len(got))
	}

	var out []replayJSON
	cmdJSON(t, &out, 0, args("-json", "-consumer", "s", "-scope-id-by-type", fmt.Sprint(idS))...)
	if len(out) != 1 || out[0].Status != "replayed" {
		t.Fatalf("replay -scope-id-by-type: %+v, want replayed", out)
	}
	got := s.published(t)
	if len(got) != 1 || got[0].Header.Get(jetstream.MsgIDHeader) != "m-1" || got[0].Header.Get(broker.DefaultTypeHeader) != "payment" ||
		got[0].Header.Get("Trace") != "t1" || string(got[0].Data) != "pay" {
		t.Fatalf("published %+v; want one message with ID m-1, type payment, its header and payload", got)
	}

	// The consumer, scoping by type, claims the copy under the dead
	// letter's key: processed once, and the original again is a duplicate.
	var effects atomic.Int64
	stop := s.consume(t, scoped, "s", func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if m.ID != "m-1" || m.Type != "payment" {
			return inbox.Permanent(fmt.Errorf("delivered ID %q type %q, want m-1 payment", m.ID, m.Type))
		}
		effects.Add(1)
		return nil
	})
	for deadline := time.Now().Add(15 * time.Second); effects.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("waited 15 s for the consumer to process the replayed copy")
		}
	}
	stop()
	if o, err := scoped.Process(ctx, msg, func(context.Context, *sql.Tx, *inbox.Message) error { return nil }); o.Status != inbox.Duplicate {
		t.Fatalf("m-1 as payment after the replay: %v, %v; want Duplicate (the copy claimed under the dead letter's key %q)", o.Status, err, idscope.Key("payment", "m-1"))
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// searchGate is a store's inspection whose searches wait until the
// consumer has dead-lettered again every message released so far, so
// that a scan that reads past its start sees those new dead letters for
// sure; it gives up (cancels) after too many releases.
type searchGate struct {
	inspection
	deadLettered func() int64 // the consumer's dead letters since the test began
	released     atomic.Int64
	limit        int64
	cancel       context.CancelFunc
}

func (g *searchGate) DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error) {
	for deadline := time.Now().Add(10 * time.Second); g.deadLettered() < g.released.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, errors.New("searchGate: the consumer did not dead-letter the replayed messages again within 10 s")
		}
	}
	return g.inspection.DeadLetterSearch(ctx, p)
}

func (g *searchGate) release(ctx context.Context, id int64, lt time.Duration, fn func(*store.DeadLetter, bool) error) error {
	err := g.inspection.release(ctx, id, lt, fn)
	if err == nil && g.released.Add(1) >= g.limit {
		g.cancel()
	}
	return err
}

// TestReplayAllStopsAtItsSelection: replay -all whose consumer
// dead-letters each copy again replays each of the dead letters it
// selected once and stops; the new dead letters, written meanwhile, are
// not replayed (they would be, endlessly, by a scan that reads on past
// the dead letters there were when it began).
func TestReplayAllStopsAtItsSelection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newReplayStream(t)
	e := openDB(t, "sqlite")
	counts := &inbox.Counts{}
	ib := e.inbox(t, inbox.Config{Consumer: "loop", Hooks: []inbox.Hook{counts}})
	var want []int64
	for i := range 3 {
		want = append(want, deadLetterOf(t, e, ib, inbox.Message{ID: fmt.Sprintf("l-%d", i), Type: "t", Payload: []byte("p")}))
	}
	before := counts.DeadLettered.Load()
	t.Cleanup(s.consume(t, ib, "loop", func(context.Context, *sql.Tx, *inbox.Message) error {
		return inbox.Permanent(errors.New("still broken"))
	}))
	dest, err := (&brokerFlags{nats: testenv.NATSURL(), subject: s.subject, timeout: 4 * time.Second}).publisher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dest.close()

	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	g := &searchGate{inspection: newInspection(e.driver), deadLettered: func() int64 { return counts.DeadLettered.Load() - before },
		limit: 10, cancel: cancel}
	rp := &replayer{in: g, dest: dest, consumer: []byte("loop"), lockTimeout: 5 * time.Second, timeout: 4 * time.Second}
	var stdout, stderr bytes.Buffer
	err = rp.run(rctx, nil, true, &store.DeadLetterSearchParams{Consumer: []byte("loop")}, false, &stdout, &stderr)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err != nil || g.released.Load() != int64(len(want)) || len(lines) != len(want) || stderr.Len() > 0 {
		t.Fatalf("replay -all: %v after %d releases, want %d and nothing else tried (the dead letters there were at its start)\nstdout: %s\nstderr: %s",
			err, g.released.Load(), len(want), stdout.String(), stderr.String())
	}
	for _, id := range want {
		if n := strings.Count(stdout.String(), fmt.Sprintf("replayed dead letter %d:", id)); n != 1 {
			t.Errorf("dead letter %d replayed %d times, want once:\n%s", id, n, stdout.String())
		}
	}
}

// TestReplayLinesShowBytes: replay's lines show a consumer and an ID
// that are not UTF-8 as list and show do (Go-quoted), not in base64.
func TestReplayLinesShowBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newReplayStream(t)
	e := openDB(t, "sqlite")
	const consumer, id = "c\xff", "i\xfe"
	ib := e.inbox(t, inbox.Config{Consumer: consumer})
	dl := deadLetterOf(t, e, ib, inbox.Message{ID: id, Type: "t", Payload: []byte("p")})
	// Its dead row pruned, then a redelivery processed: the replay
	// publishes nothing and removes the dead letter.
	if _, err := e.db.Exec("DELETE FROM inbox WHERE consumer = ? AND message_id = ?", []byte(consumer), []byte(id)); err != nil {
		t.Fatal(err)
	}
	if o, err := ib.Process(ctx, inbox.Message{ID: id, Type: "t", Payload: []byte("p")}, e.effect); o.Status != inbox.Processed {
		t.Fatalf("redelivery: %v, %v; want Processed", o.Status, err)
	}
	code, stdout, stderr := runCmd(t, append(append(append([]string{"dead-letters", "replay"}, s.flags...), e.flags...),
		"-consumer", consumer, fmt.Sprint(dl))...)
	if code != 0 || !strings.Contains(stdout, `message "i\xfe" of "c\xff" was processed since`) {
		t.Fatalf("replay: exit %d, stdout %q, stderr %q; want 0 and the ID and consumer Go-quoted", code, stdout, stderr)
	}
}

// TestReplayManual: replay's manual says what the operator must ensure:
// -consumer, a destination that reaches only it, no custom
// ConsumerConfig.ID, the pruned-row case, SQLite's write lock, and a
// -timeout below the consumers' lock timeout.
func TestReplayManual(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCmd(t, "dead-letters", "replay", "-h")
	if code != 0 {
		t.Fatalf("replay -h: exit %d, want 0", code)
	}
	manual := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		"-consumer C", "must reach that consumer alone", "ConsumerConfig.ID is not supported", "-scope-id-by-type",
		"If the row was pruned, there is nothing to lock", "BEGIN IMMEDIATE", "(default 4s)",
	} {
		if !strings.Contains(manual, want) {
			t.Errorf("replay -h lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(manual, "Until the COMMIT, nothing is changed for anyone else") {
		t.Errorf("replay -h still says nothing changes for anyone else until the COMMIT, false when the dead row was pruned")
	}
	if DefaultPublishTimeout >= inbox.DefaultLockTimeout {
		t.Errorf("DefaultPublishTimeout %v, want it below inbox.DefaultLockTimeout %v", DefaultPublishTimeout, inbox.DefaultLockTimeout)
	}
}
