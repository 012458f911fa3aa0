package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// OutboxInspector is implemented by drivers that let an operator look
// into the outbox's table: how many rows wait, how old the oldest is, and
// each row.
//
// The command inbox outbox uses it. It is apart from OutboxRelayer, and
// optional, so that the relay's seam does not grow. The same caveats as
// [Driver]'s apply: it is not stable, and not meant to be implemented
// outside this repository.
//
// Reads run outside any transaction, by the database's clock. The table
// holds the backlog: published rows are deleted, or kept marked for
// RelayConfig.KeepPublished. Each method's comment says what it reads.
type OutboxInspector interface {
	// OutboxStats counts the rows per state in one statement. It reads
	// every row of the table once.
	OutboxStats(ctx context.Context) (*OutboxStats, error)

	// OutboxSearch lists the unpublished rows that match p, in sequence
	// order after p.AfterSeq, without their payloads. It walks the primary
	// key from p.AfterSeq and stops at p.Limit rows found. With
	// p.MessageID it reads the row of that ID alone, through its unique
	// index. Published rows, kept, are never listed.
	OutboxSearch(ctx context.Context, p *OutboxSearchParams) ([]*OutboxInfo, error)

	// OutboxGet returns row seq, payload and headers included, in any
	// state, published included. It returns [ErrNotFound] when no row has
	// that sequence number.
	OutboxGet(ctx context.Context, seq int64) (*OutboxInfo, error)
}

// OutboxStats are the outbox's counts. Times are the database's clock,
// in UTC; each is zero when there is no row to take it from.
type OutboxStats struct {
	// Now is the database's clock when the counts were read. Ages are
	// measured from it.
	Now time.Time
	// Pending counts the rows neither published nor parked: those a relay
	// will publish. Due counts those of them whose available_at has
	// passed: the others wait for a backoff, or a relay holds their lease.
	Pending, Due int64
	// OldestPending is the least created_at of the pending rows.
	OldestPending time.Time
	// Parked counts the parked rows, OldestParked is their least
	// parked_at.
	Parked       int64
	OldestParked time.Time
	// Published counts the published rows still kept.
	Published int64
}

// OutboxState selects rows by state in [OutboxSearchParams]. The zero
// value selects both pending and parked rows.
type OutboxState string

// The values of OutboxState.
const (
	// OutboxStatePending: neither published nor parked.
	OutboxStatePending OutboxState = "pending"
	// OutboxStateParked: parked, no longer published until unparked.
	OutboxStateParked OutboxState = "parked"
)

// OutboxSearchParams select outbox rows. Zero fields do not filter.
type OutboxSearchParams struct {
	// State selects pending or parked rows; zero selects both.
	State OutboxState
	// Destination and Type match exactly, byte for byte.
	Destination, Type string
	// MessageID matches the message ID exactly, byte for byte.
	MessageID []byte
	// ErrorContains matches a substring of the last error, case-sensitively.
	ErrorContains string
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// AfterSeq lists rows whose Seq is greater.
	AfterSeq int64
	// Limit is the most returned, at least 1.
	Limit int
}

// ErrInvalidSearch is wrapped by the error of a search whose parameters
// no row could match: an unknown state, or text that is not valid UTF-8
// or holds a NUL byte. The tables hold neither.
var ErrInvalidSearch = errors.New("inbox store: invalid search")

// Check returns an error wrapping [ErrInvalidSearch] that names the first
// invalid parameter, or nil.
func (p *OutboxSearchParams) Check() error {
	switch p.State {
	case "", OutboxStatePending, OutboxStateParked:
	default:
		return fmt.Errorf("%w: state %q: want %q, %q or none", ErrInvalidSearch, p.State, OutboxStatePending, OutboxStateParked)
	}
	for _, f := range []struct{ name, v string }{
		{"destination", p.Destination}, {"type", p.Type}, {"error text", p.ErrorContains},
	} {
		if !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 {
			return fmt.Errorf("%w: %s %q: not valid UTF-8 without NUL bytes", ErrInvalidSearch, f.name, f.v)
		}
	}
	if p.AfterSeq < 0 {
		return fmt.Errorf("%w: after seq %d is negative", ErrInvalidSearch, p.AfterSeq)
	}
	return nil
}

// OutboxInfo is an outbox row with what the relay keeps of its state.
type OutboxInfo struct {
	// OutboxRecord has a nil Payload in OutboxSearch's results.
	OutboxRecord
	// PayloadSize is the payload's size in bytes.
	PayloadSize int64
	// AvailableAt is when a pending row is due: after its backoff, or its
	// lease's end while a relay holds it.
	AvailableAt time.Time
	// PublishedAt is when a kept row was published. It is zero if it was
	// not.
	PublishedAt time.Time
}

// State is the row's state: "published", "parked" or "pending".
func (i *OutboxInfo) State() string {
	switch {
	case !i.PublishedAt.IsZero():
		return "published"
	case !i.ParkedAt.IsZero():
		return string(OutboxStateParked)
	}
	return string(OutboxStatePending)
}
