package storeinspect

import "github.com/inboxkit/inbox/store"

// OutboxSearchArgs are the arguments of every dialect's outbox search, in
// order: after seq, parked (true: parked rows, false: pending ones), destination,
// type, message ID, error substring, since and until in unix milliseconds,
// limit. A filter not set is nil (NULL). Check p first.
func OutboxSearchArgs(p *store.OutboxSearchParams) []any {
	args := []any{p.AfterSeq, nil, nil, nil, nil, nil, nil, nil, max(p.Limit, 1)}
	switch p.State {
	case store.OutboxStatePending:
		args[1] = false
	case store.OutboxStateParked:
		args[1] = true
	}
	if p.Destination != "" {
		args[2] = p.Destination
	}
	if p.Type != "" {
		args[3] = p.Type
	}
	if len(p.MessageID) > 0 {
		args[4] = p.MessageID
	}
	if p.ErrorContains != "" {
		args[5] = p.ErrorContains
	}
	if !p.Since.IsZero() {
		args[6] = p.Since.UnixMilli()
	}
	if !p.Until.IsZero() {
		args[7] = p.Until.UnixMilli()
	}
	return args
}

// ScanOutboxInfo scans a row of the dialects' outbox search and get:
// seq, message_id, destination, msg_key, message_type, headers, payload,
// attempts, last_error, then created_at, parked_at, available_at and
// published_at in unix milliseconds (parked_at and published_at null
// when not set), then the payload's size.
func ScanOutboxInfo(scan func(dest ...any) error) (*store.OutboxInfo, error) {
	info := &store.OutboxInfo{}
	r := &info.OutboxRecord
	var created, available int64
	var parked, published *int64
	err := scan(&r.Seq, &r.ID, &r.Destination, &r.Key, &r.Type, &r.Headers, &r.Payload, &r.Attempts, &r.LastError,
		&created, &parked, &available, &published, &info.PayloadSize)
	if err != nil {
		return nil, err
	}
	r.CreatedAt, info.AvailableAt = UnixMilli(created), UnixMilli(available)
	r.ParkedAt, info.PublishedAt = unixMilliOrZero(parked), unixMilliOrZero(published)
	return info, nil
}

// ScanOutboxStats scans the row of the dialects' outbox stats: the
// database's clock, pending rows, due rows, the oldest pending created_at,
// parked rows, the oldest parked_at, published rows; times in unix
// milliseconds, null when there is no row.
func ScanOutboxStats(scan func(dest ...any) error) (*store.OutboxStats, error) {
	s := &store.OutboxStats{}
	var now int64
	var pending, parked *int64
	if err := scan(&now, &s.Pending, &s.Due, &pending, &s.Parked, &parked, &s.Published); err != nil {
		return nil, err
	}
	s.Now, s.OldestPending, s.OldestParked = UnixMilli(now), unixMilliOrZero(pending), unixMilliOrZero(parked)
	return s, nil
}
