// Package storeinspect holds what the stores' implementations of
// store.Inspector share: the order of the search's arguments, the scan of
// a dead letter's detail, and the gathering of the statistics of several
// statements per consumer.
package storeinspect

import (
	"bytes"
	"cmp"
	"slices"
	"time"

	"github.com/inboxkit/inbox/store"
)

// SearchArgs are the arguments of every dialect's DeadLetterSearch, in
// order: after id, the filter (see filterArgs), error group, limit. A
// filter not set is nil (NULL).
func SearchArgs(p *store.DeadLetterSearchParams) []any {
	args := append([]any{p.AfterID}, filterArgs(p)...)
	var group any
	if p.Group != "" {
		group = p.Group
	}
	return append(args, group, max(p.Limit, 1))
}

// GroupArgs are the arguments of every dialect's DeadLetterGroups, in
// order: the filter (see filterArgs), limit. AfterID and Group do not
// apply.
func GroupArgs(p *store.DeadLetterSearchParams) []any {
	return append(filterArgs(p), max(p.Limit, 1))
}

// filterArgs are the filter's arguments in the dialects' order: consumer,
// type, error substring, since and until in unix milliseconds, message ID.
// A filter not set is nil (NULL).
func filterArgs(p *store.DeadLetterSearchParams) []any {
	args := make([]any, 6)
	if len(p.Consumer) > 0 {
		args[0] = p.Consumer
	}
	if p.Type != "" {
		args[1] = p.Type
	}
	if p.ErrorContains != "" {
		args[2] = p.ErrorContains
	}
	if !p.Since.IsZero() {
		args[3] = p.Since.UnixMilli()
	}
	if !p.Until.IsZero() {
		args[4] = p.Until.UnixMilli()
	}
	if p.MessageID != nil {
		args[5] = p.MessageID
	}
	return args
}

// ScanGroup scans a row of the dialects' DeadLetterGroups.
func ScanGroup(scan func(dest ...any) error) (*store.DeadLetterGroup, error) {
	g := &store.DeadLetterGroup{}
	var first, last int64
	if err := scan(&g.Group, &g.Count, &first, &last); err != nil {
		return nil, err
	}
	g.FirstFailedAt, g.LastFailedAt = UnixMilli(first), UnixMilli(last)
	return g, nil
}

// UnixMilli is a time read from the database as unix milliseconds, in UTC.
func UnixMilli(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func unixMilliOrZero(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return UnixMilli(*ms)
}

// ScanDetail scans a row of the dialects' DeadLetterDetail: the dead
// letter's columns, failed_at in unix milliseconds, then the inbox row's
// state and received_at, the attempts' counts, first and last failure and
// last error.
func ScanDetail(scan func(dest ...any) error) (*store.DeadLetterDetail, error) {
	det := &store.DeadLetterDetail{}
	dl := &det.DeadLetter
	var failedAt int64
	var received, first, last *int64
	err := scan(&dl.ID, &dl.Key.Consumer, &dl.Key.MessageID, &dl.Type, &dl.Payload, &dl.Headers, &dl.Error, &dl.Attempts, &failedAt,
		&det.RowState, &received, &det.Counted, &det.Transient, &first, &last, &det.LastError)
	if err != nil {
		return nil, err
	}
	dl.FailedAt = UnixMilli(failedAt)
	det.ReceivedAt, det.FirstFailedAt, det.LastFailedAt = unixMilliOrZero(received), unixMilliOrZero(first), unixMilliOrZero(last)
	return det, nil
}

// InOrder returns the IDs of ids that are in deleted, in the order of ids.
func InOrder(ids, deleted []int64) []int64 {
	out := make([]int64, 0, len(deleted))
	for _, id := range ids {
		if slices.Contains(deleted, id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// StatsStatements are a store's statements of Inspector.Stats: each
// takes the consumer (nil: all); Errors also the characters kept and the
// errors per consumer. Rows: see sqldialect.InspectQueries.
type StatsStatements struct{ Inbox, DeadLetters, Attempts, Errors string }

// Each runs query with args and calls fn with the Scan of each row.
type Each func(query string, args []any, fn func(scan func(dest ...any) error) error) error

// Stats runs the statements q through each and gathers their rows by
// consumer, in byte order of the consumer.
func Stats(p *store.StatsParams, q StatsStatements, each Each) ([]*store.ConsumerStats, error) {
	by := map[string]*store.ConsumerStats{}
	of := func(c []byte) *store.ConsumerStats {
		cs, ok := by[string(c)]
		if !ok {
			cs = &store.ConsumerStats{Consumer: bytes.Clone(c)}
			by[string(c)] = cs
		}
		return cs
	}
	var consumer any
	if len(p.Consumer) > 0 {
		consumer = p.Consumer
	}
	var c []byte
	var n, a, b, d int64
	var e string
	steps := []struct {
		query string
		args  []any
		dest  []any
		keep  func(cs *store.ConsumerStats)
	}{
		{q.Inbox, []any{consumer}, []any{&c, &n, &a, &b, &d}, func(cs *store.ConsumerStats) {
			cs.InboxRows, cs.DeadRows, cs.OldestClaim, cs.NewestClaim = n, a, UnixMilli(b), UnixMilli(d)
		}},
		{q.DeadLetters, []any{consumer}, []any{&c, &n, &a, &b}, func(cs *store.ConsumerStats) {
			cs.DeadLetters, cs.OldestDeadLetter, cs.NewestDeadLetter = n, UnixMilli(a), UnixMilli(b)
		}},
		{q.Attempts, []any{consumer}, []any{&c, &n, &a, &b}, func(cs *store.ConsumerStats) {
			cs.FailedMessages, cs.FailedAttempts, cs.TransientFailures = n, a, b
		}},
		{q.Errors, []any{consumer, max(p.ErrorChars, 1), p.TopErrors}, []any{&c, &e, &n}, func(cs *store.ConsumerStats) {
			cs.TopErrors = append(cs.TopErrors, store.ErrorCount{Error: e, Count: n})
		}},
	}
	if p.TopErrors <= 0 {
		steps = steps[:3]
	}
	for _, st := range steps {
		err := each(st.query, st.args, func(scan func(...any) error) error {
			if err := scan(st.dest...); err != nil {
				return err
			}
			st.keep(of(c))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]*store.ConsumerStats, 0, len(by))
	for _, cs := range by {
		slices.SortStableFunc(cs.TopErrors, func(a, b store.ErrorCount) int { return cmp.Compare(b.Count, a.Count) })
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b *store.ConsumerStats) int { return bytes.Compare(a.Consumer, b.Consumer) })
	return out, nil
}

// ScanInfo scans a row of the dialects' DeadLetterSearch.
func ScanInfo(scan func(dest ...any) error) (*store.DeadLetterInfo, error) {
	info := &store.DeadLetterInfo{}
	dl := &info.DeadLetter
	var failedAt int64
	if err := scan(&dl.ID, &dl.Key.Consumer, &dl.Key.MessageID, &dl.Type, &dl.Payload, &dl.Headers,
		&dl.Error, &dl.Attempts, &failedAt, &info.PayloadSize); err != nil {
		return nil, err
	}
	dl.FailedAt = UnixMilli(failedAt)
	return info, nil
}

// consumerArg is a consumer filter as an argument: nil (NULL) for none.
func consumerArg(c []byte) any {
	if len(c) == 0 {
		return nil
	}
	return c
}

// ThroughputArgs are the arguments of every dialect's Throughput:
// consumer, since in unix milliseconds.
func ThroughputArgs(p *store.ThroughputParams) []any {
	return []any{consumerArg(p.Consumer), p.Since.UnixMilli()}
}

// RetryingArgs are the arguments of every dialect's Retrying: consumer.
func RetryingArgs(consumer []byte) []any { return []any{consumerArg(consumer)} }

// RetryingListArgs are the arguments of every dialect's RetryingList:
// consumer, after consumer, after message ID, limit. The zero key is
// two empty strings: every key follows it.
func RetryingListArgs(p *store.RetryingListParams) []any {
	return []any{consumerArg(p.Consumer), append([]byte{}, p.After.Consumer...), append([]byte{}, p.After.MessageID...), max(p.Limit, 1)}
}

// ScanRetryingMessage scans a row of the dialects' RetryingList.
func ScanRetryingMessage(scan func(dest ...any) error) (*store.RetryingMessage, error) {
	m := &store.RetryingMessage{}
	var first, last int64
	if err := scan(&m.Key.Consumer, &m.Key.MessageID, &m.Attempts, &m.TransientFailures, &first, &last, &m.LastError); err != nil {
		return nil, err
	}
	m.FirstFailedAt, m.LastFailedAt = UnixMilli(first), UnixMilli(last)
	return m, nil
}

// ScanBucket scans a row of the dialects' Throughput.
func ScanBucket(scan func(dest ...any) error) (*store.ThroughputBucket, error) {
	b := &store.ThroughputBucket{}
	var minute int64
	if err := scan(&b.Consumer, &minute, &b.Count); err != nil {
		return nil, err
	}
	b.Minute = UnixMilli(minute)
	return b, nil
}

// ScanConsumerCount scans a row of the dialects' Consumers.
func ScanConsumerCount(scan func(dest ...any) error) (*store.ConsumerCount, error) {
	c := &store.ConsumerCount{}
	if err := scan(&c.Consumer, &c.DeadLetters); err != nil {
		return nil, err
	}
	return c, nil
}

// ScanRetrying scans a row of the dialects' Retrying.
func ScanRetrying(scan func(dest ...any) error) (*store.RetryingStats, error) {
	r := &store.RetryingStats{}
	var oldest int64
	if err := scan(&r.Consumer, &r.Messages, &r.Attempts, &oldest); err != nil {
		return nil, err
	}
	r.OldestFailedAt = UnixMilli(oldest)
	return r, nil
}
