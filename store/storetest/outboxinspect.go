package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
)

// outboxInspector returns e's driver as a store.OutboxInspector, failing
// t when it is not one: every store of this repository implements it.
func outboxInspector[TTx any](t *testing.T, e *outboxEnv[TTx]) store.OutboxInspector {
	t.Helper()
	in, ok := any(e.Driver).(store.OutboxInspector)
	if !ok {
		t.Fatalf("%T does not implement store.OutboxInspector", e.Driver)
	}
	return in
}

// binaryPayload has NUL bytes, invalid UTF-8, a terminal escape and a
// newline: it must come back byte for byte.
var binaryPayload = []byte{0, 'a', 0, 0xff, 0xfe, '\n', 0x1b, '[', '2', 'J', 0xc3, 0x28, 0}

// outboxFixture are the seven rows of outboxInspectFixture, in seq
// order, with what each was left as.
type outboxFixture struct {
	seq [7]int64
	msg [7]*outbox.Message
}

// outboxInspectFixture writes seven rows, each in a transaction of its
// own, 3 ms apart so that each has its own created_at, and leaves them,
// through the relay's own store calls, as:
//
//	0 pub-1     orders   A   published, kept
//	1 park-1    orders   B   parked, error "card declined: 42"
//	2 park-2    billing  A   parked, error "Card Declined"
//	3 lease-1   orders   A   pending, leased for an hour: not due
//	4 retry-1   orders   A   pending, due, 1 attempt, error "timeout"
//	5 due-1     "orders " A  pending, due (a destination with a trailing space)
//	6 binary ID billing  ""  pending, due, a binary payload and key
func outboxInspectFixture[TTx any](t *testing.T, e *outboxEnv[TTx]) *outboxFixture {
	t.Helper()
	ctx := context.Background()
	f := &outboxFixture{}
	specs := []struct{ id, dest, typ string }{
		{"pub-1", "orders", "A"}, {"park-1", "orders", "B"}, {"park-2", "billing", "A"}, {"lease-1", "orders", "A"},
		{"retry-1", "orders", "A"}, {"due-1", "orders ", "A"}, {"due-2\x00\xff", "billing", ""},
	}
	// claim claims the n due rows i-n+1..i, oldest available first.
	claim := func(i, n int, lease time.Duration, token string) {
		t.Helper()
		recs, err := e.rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: n + 1, Lease: lease, Token: []byte(token)})
		if err != nil || len(recs) != n {
			t.Fatalf("fixture: claim of %d rows up to %q: %d rows, %v", n, f.msg[i].ID, len(recs), err)
		}
		for k, r := range recs {
			if j := i - n + 1 + k; string(r.ID) != f.msg[j].ID {
				t.Fatalf("fixture: claimed %q, want %q", r.ID, f.msg[j].ID)
			} else {
				f.seq[j] = r.Seq
			}
		}
	}
	fail := func(token string, fl store.OutboxFailure) {
		t.Helper()
		if err := e.rs.OutboxFail(ctx, []byte(token), []store.OutboxFailure{fl}); err != nil {
			t.Fatalf("fixture: OutboxFail: %v", err)
		}
	}
	for i, s := range specs {
		time.Sleep(3 * time.Millisecond)
		m := &outbox.Message{ID: s.id, Destination: s.dest, Type: s.typ, Payload: []byte("payload of " + s.id),
			Headers: map[string]string{"trace": "t-" + s.id, "bin\xff": "\x00\xff"}}
		if i == 6 {
			m.Payload, m.Key = binaryPayload, "k\x00\xff"
		}
		f.msg[i] = m
		e.write(t, true, m)
		tok := fmt.Sprintf("tok-%d", i)
		switch i {
		case 0:
			claim(i, 1, time.Minute, tok)
			if n, err := e.rs.OutboxMarkPublished(ctx, []byte(tok), []int64{f.seq[i]}); err != nil || n != 1 {
				t.Fatalf("fixture: mark published: %d, %v", n, err)
			}
		case 1, 2:
			claim(i, 1, time.Minute, tok)
			fail(tok, store.OutboxFailure{Seq: f.seq[i], Park: true, Error: map[int]string{1: "card declined: 42", 2: "Card Declined"}[i]})
		case 3:
			claim(i, 1, time.Hour, tok)
		case 4:
			claim(i, 1, time.Minute, tok) // failed below, once the later rows are written
		case 6: // rows 5 and 6, given back at once: due, no attempt counted
			claim(i, 2, time.Minute, tok)
			fail(tok, store.OutboxFailure{Seq: f.seq[5], Released: true})
			fail(tok, store.OutboxFailure{Seq: f.seq[6], Released: true})
		}
	}
	fail("tok-4", store.OutboxFailure{Seq: f.seq[4], Error: "timeout"})
	return f
}

// OutboxStats counts each state and takes the oldest times from the
// right rows; an empty table counts nothing.
func testOutboxInspectStats[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	e := openOutbox(t, h)
	in := outboxInspector(t, e)
	before := time.Now().Add(-time.Minute) // the database's clock may differ a little
	empty, err := in.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Now.Before(before) || empty.Now.After(time.Now().Add(time.Minute)) {
		t.Errorf("stats of an empty table: Now %v, want about %v", empty.Now, time.Now())
	}
	if z := (store.OutboxStats{Now: empty.Now}); *empty != z {
		t.Fatalf("stats of an empty table: %+v, want zeros", empty)
	}
	f := outboxInspectFixture(t, e)
	s, err := in.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type counts struct{ pending, due, parked, published int64 }
	if got, want := (counts{s.Pending, s.Due, s.Parked, s.Published}), (counts{4, 3, 2, 1}); got != want {
		t.Errorf("stats %+v, want %+v (pending, due, parked, published kept)", got, want)
	}
	leased, err := in.OutboxGet(ctx, f.seq[3])
	if err != nil {
		t.Fatal(err)
	}
	parked, err := in.OutboxGet(ctx, f.seq[1])
	if err != nil {
		t.Fatal(err)
	}
	// The oldest pending row is the leased one: older rows are published
	// or parked, and do not count.
	if !s.OldestPending.Equal(leased.CreatedAt) {
		t.Errorf("oldest pending %v, want %v: lease-1's created_at", s.OldestPending, leased.CreatedAt)
	}
	if !s.OldestParked.Equal(parked.ParkedAt) || parked.ParkedAt.IsZero() {
		t.Errorf("oldest parked %v, want %v: park-1's parked_at", s.OldestParked, parked.ParkedAt)
	}
	if s.Now.Before(s.OldestPending) || s.Now.Before(s.OldestParked) || s.Now.Before(before) {
		t.Errorf("stats' Now %v before the times it counts: %+v", s.Now, s)
	}
}

// OutboxSearch filters by state, destination, type, message ID, error
// text and creation time, alone and combined, byte for byte; it pages in
// sequence order and never lists published rows.
func testOutboxInspectSearch[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	e := openOutbox(t, h)
	in := outboxInspector(t, e)
	f := outboxInspectFixture(t, e)
	get := func(i int) *store.OutboxInfo {
		t.Helper()
		info, err := in.OutboxGet(ctx, f.seq[i])
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	created4, created6 := get(3).CreatedAt, get(5).CreatedAt
	all := []int{1, 2, 3, 4, 5, 6}
	for _, tc := range []struct {
		name string
		p    store.OutboxSearchParams
		want []int // indexes into f.seq
	}{
		{"all unpublished", store.OutboxSearchParams{}, all},
		{"pending", store.OutboxSearchParams{State: store.OutboxStatePending}, []int{3, 4, 5, 6}},
		{"parked", store.OutboxSearchParams{State: store.OutboxStateParked}, []int{1, 2}},
		{"destination", store.OutboxSearchParams{Destination: "orders"}, []int{1, 3, 4}},
		{"destination with a trailing space", store.OutboxSearchParams{Destination: "orders "}, []int{5}},
		{"destination of no row", store.OutboxSearchParams{Destination: "Orders"}, nil},
		{"hostile destination", store.OutboxSearchParams{Destination: "'; DROP TABLE x; --"}, nil},
		{"type", store.OutboxSearchParams{Type: "A"}, []int{2, 3, 4, 5}},
		{"type, case", store.OutboxSearchParams{Type: "a"}, nil},
		{"message ID, binary", store.OutboxSearchParams{MessageID: []byte("due-2\x00\xff")}, []int{6}},
		{"message ID, a prefix", store.OutboxSearchParams{MessageID: []byte("due-2")}, nil},
		{"message ID, case", store.OutboxSearchParams{MessageID: []byte("PARK-1")}, nil},
		{"message ID, published", store.OutboxSearchParams{MessageID: []byte("pub-1")}, nil},
		{"message ID, parked", store.OutboxSearchParams{MessageID: []byte("park-1"), State: store.OutboxStateParked}, []int{1}},
		{"message ID, not pending", store.OutboxSearchParams{MessageID: []byte("park-1"), State: store.OutboxStatePending}, nil},
		{"message ID, other destination", store.OutboxSearchParams{MessageID: []byte("park-1"), Destination: "billing"}, nil},
		{"message ID before AfterSeq", store.OutboxSearchParams{MessageID: []byte("park-1"), AfterSeq: f.seq[1]}, nil},
		{"error", store.OutboxSearchParams{ErrorContains: "declined"}, []int{1}},
		{"error, case", store.OutboxSearchParams{ErrorContains: "Declined"}, []int{2}},
		{"error of a pending row", store.OutboxSearchParams{ErrorContains: "time"}, []int{4}},
		{"error with a LIKE wildcard", store.OutboxSearchParams{ErrorContains: "card%"}, nil},
		{"since", store.OutboxSearchParams{Since: created4}, []int{3, 4, 5, 6}},
		{"until", store.OutboxSearchParams{Until: created4}, []int{1, 2}},
		{"since and until", store.OutboxSearchParams{Since: created4, Until: created6}, []int{3, 4}},
		{"parked in billing", store.OutboxSearchParams{State: store.OutboxStateParked, Destination: "billing"}, []int{2}},
		{"pending orders of type A", store.OutboxSearchParams{State: store.OutboxStatePending, Destination: "orders", Type: "A"}, []int{3, 4}},
		{"pending with an error", store.OutboxSearchParams{State: store.OutboxStatePending, ErrorContains: "declined"}, nil},
		{"type and until", store.OutboxSearchParams{Type: "A", Until: created6}, []int{2, 3, 4}},
		{"page 1", store.OutboxSearchParams{Limit: 2}, []int{1, 2}},
		{"page 2", store.OutboxSearchParams{Limit: 2, AfterSeq: f.seq[2]}, []int{3, 4}},
		{"page 3", store.OutboxSearchParams{Limit: 2, AfterSeq: f.seq[4]}, []int{5, 6}},
		{"past the end", store.OutboxSearchParams{Limit: 2, AfterSeq: f.seq[6]}, nil},
		{"page of pending", store.OutboxSearchParams{Limit: 1, AfterSeq: f.seq[1], State: store.OutboxStatePending}, []int{3}},
		{"limit 0 is 1", store.OutboxSearchParams{Limit: 0}, []int{1}},
	} {
		p := tc.p
		if p.Limit == 0 && tc.name != "limit 0 is 1" {
			p.Limit = 100
		}
		found, err := in.OutboxSearch(ctx, &p)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got, want []int64
		for _, r := range found {
			got = append(got, r.Seq)
		}
		for _, i := range tc.want {
			want = append(want, f.seq[i])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: found seqs %v, want %v (fixture seqs %v)", tc.name, got, want, f.seq)
		}
	}

	// What a search returns of each row: no payload, its size, the rest.
	found, err := in.OutboxSearch(ctx, &store.OutboxSearchParams{Limit: 100})
	if err != nil || len(found) != 6 {
		t.Fatalf("search of all: %d, %v", len(found), err)
	}
	by := map[string]*store.OutboxInfo{}
	for _, r := range found {
		by[string(r.ID)] = r
		if r.Payload != nil {
			t.Errorf("search returned %q's payload %q, want none", r.ID, r.Payload)
		}
	}
	bin, retry, lease, park := by["due-2\x00\xff"], by["retry-1"], by["lease-1"], by["park-1"]
	if bin == nil || bin.PayloadSize != int64(len(binaryPayload)) || string(bin.Key) != "k\x00\xff" || bin.Destination != "billing" ||
		bin.Type != "" || bin.State() != "pending" {
		t.Errorf("binary row: %+v, want its payload size %d, key, destination, pending", bin, len(binaryPayload))
	}
	if retry == nil || retry.Attempts != 1 || retry.LastError != "timeout" || retry.State() != "pending" ||
		retry.PayloadSize != int64(len("payload of retry-1")) {
		t.Errorf("retry-1: %+v, want 1 attempt, error timeout, pending", retry)
	}
	now, err := in.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lease == nil || !lease.AvailableAt.After(now.Now.Add(50*time.Minute)) || !lease.ParkedAt.IsZero() {
		t.Errorf("lease-1: available at %v, want about an hour after %v (its lease)", lease.AvailableAt, now.Now)
	}
	if park == nil || park.State() != "parked" || park.LastError != "card declined: 42" || park.Attempts != 1 || park.ParkedAt.IsZero() {
		t.Errorf("park-1: %+v, want parked with its error and 1 attempt", park)
	}
}

// OutboxGet returns a row of any state with its payload byte for byte
// and its headers; a sequence number of no row is store.ErrNotFound; a
// search no row could match is refused with ErrInvalidSearch.
func testOutboxInspectGet[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	e := openOutbox(t, h)
	in := outboxInspector(t, e)
	f := outboxInspectFixture(t, e)
	for i, m := range f.msg {
		got, err := in.OutboxGet(ctx, f.seq[i])
		if err != nil {
			t.Fatalf("OutboxGet(%d): %v", f.seq[i], err)
		}
		if string(got.ID) != m.ID || got.Seq != f.seq[i] || got.Destination != m.Destination || got.Type != m.Type ||
			string(got.Key) != m.Key || string(got.Payload) != string(m.Payload) || got.PayloadSize != int64(len(m.Payload)) {
			t.Errorf("OutboxGet(%d) = %+v, want %+v", f.seq[i], got, m)
		}
		h, err := headers.Decode(got.Headers)
		if err != nil || !maps.Equal(h, m.Headers) {
			t.Errorf("OutboxGet(%d): headers %q (%v), want %q", f.seq[i], h, err, m.Headers)
		}
	}
	bin, err := in.OutboxGet(ctx, f.seq[6])
	if err != nil || !slices.Equal(bin.Payload, binaryPayload) {
		t.Fatalf("binary payload %q (%v), want %q", bin.Payload, err, binaryPayload)
	}
	pub, err := in.OutboxGet(ctx, f.seq[0])
	if err != nil || pub.State() != "published" || pub.PublishedAt.IsZero() {
		t.Fatalf("published row: %+v (%v), want published", pub, err)
	}
	for _, seq := range []int64{f.seq[6] + 1000, 0, -1} {
		if got, err := in.OutboxGet(ctx, seq); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("OutboxGet(%d) = %+v, %v; want store.ErrNotFound", seq, got, err)
		}
	}
	for _, p := range []store.OutboxSearchParams{
		{State: "published"}, {State: "PENDING"}, {Destination: "a\x00b"}, {Type: "\xff"}, {ErrorContains: "x\xc3\x28"},
		{AfterSeq: -1},
	} {
		if got, err := in.OutboxSearch(ctx, &p); !errors.Is(err, store.ErrInvalidSearch) {
			t.Errorf("OutboxSearch(%+v) = %d rows, %v; want store.ErrInvalidSearch", p, len(got), err)
		}
	}
}
