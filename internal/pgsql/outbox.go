package pgsql

import (
	"time"

	"github.com/inboxkit/inbox/store"
)

// OutboxWriteArgs are OutboxWriteQuiet's arguments for rows ($1..$6); an
// empty key is null (no key).
func OutboxWriteArgs(rows []*store.OutboxRow) []any {
	ids, dests, keys, types := make([][]byte, len(rows)), make([]string, len(rows)), make([][]byte, len(rows)), make([]string, len(rows))
	headers, payloads := make([][]byte, len(rows)), make([][]byte, len(rows))
	for i, r := range rows {
		ids[i], dests[i], types[i], headers[i], payloads[i] = r.ID, r.Destination, r.Type, r.Headers, r.Payload
		if len(r.Key) > 0 {
			keys[i] = r.Key
		}
	}
	return []any{ids, dests, keys, types, headers, payloads}
}

// OutboxFailArgs are OutboxFail's arguments.
func OutboxFailArgs(token []byte, fails []store.OutboxFailure) []any {
	seqs, errs, delays := make([]int64, len(fails)), make([]string, len(fails)), make([]int64, len(fails))
	park, released := make([]bool, len(fails)), make([]bool, len(fails))
	for i, f := range fails {
		seqs[i], errs[i], delays[i], park[i], released[i] = f.Seq, f.Error, f.Delay.Milliseconds(), f.Park, f.Released
	}
	return []any{token, seqs, errs, delays, park, released}
}

// ScanOutbox reads a row of OutboxColumns with scan.
func ScanOutbox(scan func(dest ...any) error) (*store.OutboxRecord, error) {
	r := &store.OutboxRecord{}
	var created int64
	var parked *int64
	err := scan(&r.Seq, &r.ID, &r.Destination, &r.Key, &r.Type, &r.Headers, &r.Payload, &r.Attempts, &r.LastError, &created, &parked)
	r.CreatedAt = time.UnixMilli(created).UTC()
	if parked != nil {
		r.ParkedAt = time.UnixMilli(*parked).UTC()
	}
	return r, err
}
