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
// order: after id, consumer, type, error substring, since and until in
// unix milliseconds, limit. A filter not set is nil (NULL).
func SearchArgs(p *store.DeadLetterSearchParams) []any {
	args := []any{p.AfterID, nil, nil, nil, nil, nil, max(p.Limit, 1)}
	if len(p.Consumer) > 0 {
		args[1] = p.Consumer
	}
	if p.Type != "" {
		args[2] = p.Type
	}
	if p.ErrorContains != "" {
		args[3] = p.ErrorContains
	}
	if !p.Since.IsZero() {
		args[4] = p.Since.UnixMilli()
	}
	if !p.Until.IsZero() {
		args[5] = p.Until.UnixMilli()
	}
	return args
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

// Stats gathers the rows of the statistics' statements by consumer.
type Stats struct {
	by map[string]*store.ConsumerStats
}

// NewStats returns an empty Stats.
func NewStats() *Stats { return &Stats{by: map[string]*store.ConsumerStats{}} }

func (s *Stats) of(c []byte) *store.ConsumerStats {
	cs, ok := s.by[string(c)]
	if !ok {
		cs = &store.ConsumerStats{Consumer: bytes.Clone(c)}
		s.by[string(c)] = cs
	}
	return cs
}

// Inbox records a row of StatsInbox.
func (s *Stats) Inbox(c []byte, rows, dead, oldest, newest int64) {
	cs := s.of(c)
	cs.InboxRows, cs.DeadRows, cs.OldestClaim, cs.NewestClaim = rows, dead, UnixMilli(oldest), UnixMilli(newest)
}

// DeadLetters records a row of StatsDeadLetters.
func (s *Stats) DeadLetters(c []byte, n, oldest, newest int64) {
	cs := s.of(c)
	cs.DeadLetters, cs.OldestDeadLetter, cs.NewestDeadLetter = n, UnixMilli(oldest), UnixMilli(newest)
}

// Attempts records a row of StatsAttempts.
func (s *Stats) Attempts(c []byte, messages, attempts, transient int64) {
	cs := s.of(c)
	cs.FailedMessages, cs.FailedAttempts, cs.TransientFailures = messages, attempts, transient
}

// Error records a row of StatsErrors; they come most frequent first.
func (s *Stats) Error(c []byte, text string, n int64) {
	cs := s.of(c)
	cs.TopErrors = append(cs.TopErrors, store.ErrorCount{Error: text, Count: n})
}

// Result returns the statistics in byte order of the consumer.
func (s *Stats) Result() []*store.ConsumerStats {
	out := make([]*store.ConsumerStats, 0, len(s.by))
	for _, cs := range s.by {
		slices.SortStableFunc(cs.TopErrors, func(a, b store.ErrorCount) int { return cmp.Compare(b.Count, a.Count) })
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b *store.ConsumerStats) int { return bytes.Compare(a.Consumer, b.Consumer) })
	return out
}
