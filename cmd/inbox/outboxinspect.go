package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/inbox/store"
)

// outboxFilterSynopsis is the outbox filters in a synopsis.
const outboxFilterSynopsis = "[-destination D] [-type T] [-message-id ID | -message-id-base64 B]\n    [-error TEXT] [-since TIME] [-until TIME]"

// outboxFilters select outbox rows: list's filters, and those of unpark
// and discard -all.
type outboxFilters struct {
	destination, typ, messageID, messageIDBase64, errorText, since, until string
}

func (f *outboxFilters) register(fs *flag.FlagSet) {
	fs.StringVar(&f.destination, "destination", "", "only rows of this destination (exactly)")
	fs.StringVar(&f.typ, "type", "", "only rows of this message type (exactly)")
	fs.StringVar(&f.messageID, "message-id", "", "only the row of this message ID (exactly)")
	fs.StringVar(&f.messageIDBase64, "message-id-base64", "", "only the row of this message ID, in base64 (for an ID that is not text: message_id_base64 in -json)")
	fs.StringVar(&f.errorText, "error", "", "only rows whose last error contains this text (case-sensitive)")
	fs.StringVar(&f.since, "since", "", "only rows written at or after this time: RFC 3339, a date, or a duration before now (24h)")
	fs.StringVar(&f.until, "until", "", "only rows written before this time (as -since)")
}

// set reports whether a filter was given.
func (f *outboxFilters) set() bool {
	return f.destination != "" || f.typ != "" || f.messageID != "" || f.messageIDBase64 != "" || f.errorText != "" ||
		f.since != "" || f.until != ""
}

// params are the filters as search parameters, checked: an error is the
// command line's.
func (f *outboxFilters) params(now time.Time) (*store.OutboxSearchParams, error) {
	since, err := parseTime(f.since, now)
	if err != nil {
		return nil, fmt.Errorf("-since: %w", err)
	}
	until, err := parseTime(f.until, now)
	if err != nil {
		return nil, fmt.Errorf("-until: %w", err)
	}
	p := &store.OutboxSearchParams{Destination: f.destination, Type: f.typ, ErrorContains: f.errorText, Since: since, Until: until}
	switch {
	case f.messageID != "" && f.messageIDBase64 != "":
		return nil, errors.New("give -message-id or -message-id-base64, not both")
	case f.messageID != "":
		p.MessageID = []byte(f.messageID)
	case f.messageIDBase64 != "":
		if p.MessageID, err = base64.StdEncoding.DecodeString(f.messageIDBase64); err != nil || len(p.MessageID) == 0 {
			return nil, fmt.Errorf("-message-id-base64 %q: not a message ID in standard base64", f.messageIDBase64)
		}
	}
	for _, s := range []struct{ flag, v string }{{"-destination", f.destination}, {"-type", f.typ}, {"-error", f.errorText}} {
		if !utf8.ValidString(s.v) {
			// No row holds it: the tables keep these as valid UTF-8.
			return nil, fmt.Errorf("%s %s: not valid UTF-8", s.flag, text([]byte(s.v)))
		}
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// outboxInspector returns the opened store's store.OutboxInspector.
func (d *opened) outboxInspector() (store.OutboxInspector, error) {
	in, ok := d.driver.(store.OutboxInspector)
	if !ok {
		return nil, fmt.Errorf("the %T store cannot inspect its outbox", d.driver)
	}
	return in, nil
}

// migrated returns errNotMigrated for err when no migration is applied,
// as the dead letters' commands do.
func (d *opened) migrated(ctx context.Context, err error) error {
	return migratedInspection{applied: d.applied}.check(ctx, err)
}

// outboxRowJSON is an outbox row in the JSON outputs. IDs and keys that
// are not valid UTF-8 come in base64 (the _base64 field) instead.
type outboxRowJSON struct {
	Seq             int64  `json:"seq"`
	State           string `json:"state"`
	MessageID       string `json:"message_id"`
	MessageIDBase64 string `json:"message_id_base64,omitempty"`
	Destination     string `json:"destination"`
	Key             string `json:"key,omitempty"`
	KeyBase64       string `json:"key_base64,omitempty"`
	Type            string `json:"type,omitempty"`
	Attempts        int    `json:"attempts"`
	Error           string `json:"error,omitempty"`
	CreatedAt       string `json:"created_at"`
	// AvailableAt is when a pending row is due: after its backoff, or the
	// end of a relay's lease.
	AvailableAt string `json:"available_at,omitempty"`
	ParkedAt    string `json:"parked_at,omitempty"`
	PublishedAt string `json:"published_at,omitempty"`
	PayloadSize int64  `json:"payload_size"`
	headersJSON
}

func newOutboxRowJSON(r *store.OutboxInfo) outboxRowJSON {
	j := outboxRowJSON{Seq: r.Seq, State: r.State(), Destination: r.Destination, Type: r.Type, Attempts: r.Attempts,
		Error: r.LastError, CreatedAt: timeJSON(r.CreatedAt), ParkedAt: timeJSON(r.ParkedAt),
		PublishedAt: timeJSON(r.PublishedAt), PayloadSize: r.PayloadSize}
	if r.State() == string(store.OutboxStatePending) {
		j.AvailableAt = timeJSON(r.AvailableAt)
	}
	j.MessageID, j.MessageIDBase64 = jsonBytes(r.ID)
	j.Key, j.KeyBase64 = jsonBytes(r.Key)
	j.headersJSON = newHeadersJSON(r.Headers)
	return j
}

var outboxListCommand = command{
	name:     "outbox list",
	synopsis: "inbox outbox list " + storeSynopsis + "\n    [-pending | -parked] " + outboxFilterSynopsis + "\n    [-after SEQ] [-limit N] [-json]",
	description: `Lists the outbox rows not yet published, in sequence order (SEQ), without
their payloads (inbox outbox show SEQ prints one). -pending lists the rows
a relay will publish, -parked those it gave up on; both by default.
Published rows that the relay keeps (KeepPublished) are not listed.

The filters match exactly and byte for byte, but -error, a substring of the
last error, and -since and -until, on the time the row was written. The
store walks the table in SEQ order from -after until it found -limit rows:
a filter that few rows match reads the rest of the table. -message-id reads
one row through its index.

Paging: pass the last SEQ of a full page as -after for the next. The text
output ends with the -after of the next page when the page is full; the
JSON output is an object with the rows and next_after (0 when the page is
not full).`,
	examples: `inbox outbox list -postgres $DSN
inbox outbox list -sqlite inbox.db -parked -destination payments-api -json
inbox outbox list -mysql $DSN -pending -since 1h -after 1200 -limit 50`,
}

func outboxList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := outboxListCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	pending := fs.Bool("pending", false, "only the rows not parked: those a relay will publish")
	parked := fs.Bool("parked", false, "only the parked rows")
	var ff outboxFilters
	ff.register(fs)
	after := fs.Int64("after", 0, "list rows whose SEQ is greater (the last SEQ of the page before)")
	limit := fs.Int("limit", 100, "the most listed")
	asJSON := fs.Bool("json", false, "write JSON")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	switch {
	case *pending && *parked:
		return usageError(fs, stderr, "give -pending or -parked, not both (neither lists both)")
	case *limit < 1 || *after < 0:
		return usageError(fs, stderr, "-limit must be at least 1 and -after at least 0")
	}
	p, err := ff.params(time.Now())
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	switch {
	case *pending:
		p.State = store.OutboxStatePending
	case *parked:
		p.State = store.OutboxStateParked
	}
	p.AfterSeq, p.Limit = *after, *limit
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	in, err := d.outboxInspector()
	if err != nil {
		return err
	}
	found, err := in.OutboxSearch(ctx, p)
	if err != nil {
		return d.migrated(ctx, err)
	}
	var next int64 // the -after of the next page, 0 for none
	if len(found) == *limit {
		next = found[len(found)-1].Seq
	}
	if *asJSON {
		out := struct {
			Rows      []outboxRowJSON `json:"rows"`
			NextAfter int64           `json:"next_after"`
		}{Rows: []outboxRowJSON{}, NextAfter: next}
		for _, r := range found {
			out.Rows = append(out.Rows, newOutboxRowJSON(r))
		}
		return writeJSON(stdout, out)
	}
	if len(found) == 0 {
		fmt.Fprintln(stdout, "no outbox rows")
		return nil
	}
	if err := writeOutboxRows(stdout, found); err != nil {
		return err
	}
	if next != 0 {
		fmt.Fprintf(stdout, "more may follow: -after %d\n", next)
	}
	return nil
}

// writeOutboxRows writes rows as list's table.
func writeOutboxRows(w io.Writer, rows []*store.OutboxInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTATE\tMESSAGE ID\tDESTINATION\tKEY\tTYPE\tCREATED AT\tATTEMPTS\tBYTES\tERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Seq, r.State(), text(r.ID), text([]byte(r.Destination)),
			orDash(r.Key), orDash([]byte(r.Type)), timeJSON(r.CreatedAt), r.Attempts, r.PayloadSize, orDash([]byte(shorten(r.LastError, 60))))
	}
	return tw.Flush()
}

// orDash is b as text, or "-" when empty.
func orDash(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return text(b)
}

var outboxShowCommand = command{
	name: "outbox show",
	synopsis: "inbox outbox show " + storeSynopsis + " [-json | -raw] SEQ\n" +
		"inbox outbox show " + storeSynopsis + " [-json | -raw]\n    (-message-id ID | -message-id-base64 B)",
	description: `Prints one outbox row: its state, message ID, destination, key and type,
its attempts and last error, its times, its headers and its payload. A row
is found by its SEQ in any state, published and kept rows included. By
-message-id it is found among the rows not yet published.

The payload is printed as inbox dead-letters show prints one: as text when
it is valid UTF-8, else in base64. In the text, each line of the payload
begins with "| ", and the characters that would act on a terminal or
reorder what is read are escaped as in Go (\x1b, \r, \u202e). The other
fields are Go-quoted when they hold any. With -json, payload_base64 always
holds it, and payload_text too when it is valid UTF-8. -raw writes the
payload alone, byte for byte, to a file or a pipe; it is refused when
stdout is a terminal. A row that does not exist exits 4.`,
	examples: `inbox outbox show -sqlite inbox.db 42
inbox outbox show -postgres $DSN -message-id order-2/charge
inbox outbox show -postgres $DSN -json 42 | jq -r .payload_base64 | base64 -d`,
}

// outboxDetailJSON is show's JSON output.
type outboxDetailJSON struct {
	outboxRowJSON
	PayloadText   *string `json:"payload_text,omitempty"`
	PayloadBase64 string  `json:"payload_base64"`
}

func outboxShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := outboxShowCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	var ff outboxFilters
	fs.StringVar(&ff.messageID, "message-id", "", "show the unpublished row of this message ID instead of a SEQ")
	fs.StringVar(&ff.messageIDBase64, "message-id-base64", "", "as -message-id, the ID in base64 (for an ID that is not text)")
	asJSON := fs.Bool("json", false, "write JSON")
	raw := fs.Bool("raw", false, "write the payload alone, byte for byte (to a file or a pipe: refused on a terminal)")
	seqs, err := parseIDs(fs, args, "a SEQ", stdout, stderr)
	if err != nil {
		return err
	}
	byID := ff.messageID != "" || ff.messageIDBase64 != ""
	switch {
	case byID && len(seqs) > 0:
		return usageError(fs, stderr, "give a SEQ or -message-id, not both")
	case !byID && len(seqs) != 1:
		return usageError(fs, stderr, "give one SEQ, or -message-id")
	case *raw && *asJSON:
		return usageError(fs, stderr, "give -json or -raw, not both")
	case *raw && isTerminal(stdout):
		return usageError(fs, stderr, "-raw writes the payload's control characters as they are, which a terminal would obey: redirect stdout to a file or a pipe")
	}
	p, err := ff.params(time.Now())
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	in, err := d.outboxInspector()
	if err != nil {
		return err
	}
	var seq int64
	if byID {
		p.Limit = 1
		found, err := in.OutboxSearch(ctx, p)
		if err != nil {
			return d.migrated(ctx, err)
		}
		if len(found) == 0 {
			return withCode(exitNotFound, fmt.Errorf("no unpublished outbox row has message ID %s", text(p.MessageID)))
		}
		seq = found[0].Seq
	} else {
		seq = seqs[0]
	}
	r, err := in.OutboxGet(ctx, seq)
	if errors.Is(err, store.ErrNotFound) {
		return withCode(exitNotFound, fmt.Errorf("no outbox row %d", seq))
	}
	if err != nil {
		return d.migrated(ctx, err)
	}
	j := outboxDetailJSON{outboxRowJSON: newOutboxRowJSON(r), PayloadBase64: base64.StdEncoding.EncodeToString(r.Payload)}
	if utf8.Valid(r.Payload) {
		s := string(r.Payload)
		j.PayloadText = &s
	}
	switch {
	case *asJSON:
		return writeJSON(stdout, j)
	case *raw:
		_, err := stdout.Write(r.Payload)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "outbox row:\t%d\n", r.Seq)
	fmt.Fprintf(tw, "state:\t%s\n", outboxStateText(r))
	fmt.Fprintf(tw, "message id:\t%s\n", text(r.ID))
	fmt.Fprintf(tw, "destination:\t%s\n", text([]byte(r.Destination)))
	fmt.Fprintf(tw, "key:\t%s\n", orDash(r.Key))
	fmt.Fprintf(tw, "type:\t%s\n", orDash([]byte(r.Type)))
	fmt.Fprintf(tw, "created at:\t%s\n", j.CreatedAt)
	fmt.Fprintf(tw, "attempts:\t%d\n", r.Attempts)
	if r.LastError != "" {
		fmt.Fprintf(tw, "last error:\t%s\n", text([]byte(r.LastError)))
	}
	return writeBody(tw, stdout, j.headersJSON, len(r.Payload), j.PayloadText, j.PayloadBase64)
}

// outboxStateText is show's line on a row's state and its time.
func outboxStateText(r *store.OutboxInfo) string {
	switch r.State() {
	case "published":
		return "published at " + timeJSON(r.PublishedAt) + ", kept"
	case string(store.OutboxStateParked):
		return "parked at " + timeJSON(r.ParkedAt) + ": not published until unparked"
	}
	return "pending, due at " + timeJSON(r.AvailableAt)
}

var outboxStatsCommand = command{
	name:     "outbox stats",
	synopsis: "inbox outbox stats " + storeSynopsis + " [-json]",
	description: `Counts the outbox's rows: pending (not published, not parked) and how many
of them are due now, the age of the oldest pending row, the parked rows and
the age of the oldest, and the published rows the relay keeps
(KeepPublished). Ages are by the database's clock, from when the row was
written, or parked.

A pending row that is not due waits for its backoff after a failed
publication, or is leased by a relay that is publishing it. A growing
oldest pending age means that the relays do not keep up, or do not run.
It reads every row of the table once.`,
	examples: `inbox outbox stats -postgres $DSN
inbox outbox stats -sqlite inbox.db -json`,
}

// outboxStatsJSON is stats' JSON output. The ages are in seconds, absent
// with no row to take them from.
type outboxStatsJSON struct {
	DatabaseTime     string   `json:"database_time"`
	Pending          int64    `json:"pending"`
	Due              int64    `json:"due"`
	OldestPending    string   `json:"oldest_pending,omitempty"`
	OldestPendingAge *float64 `json:"oldest_pending_age_seconds,omitempty"`
	Parked           int64    `json:"parked"`
	OldestParked     string   `json:"oldest_parked,omitempty"`
	OldestParkedAge  *float64 `json:"oldest_parked_age_seconds,omitempty"`
	PublishedKept    int64    `json:"published_kept"`
}

func outboxStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := outboxStatsCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	asJSON := fs.Bool("json", false, "write JSON")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	in, err := d.outboxInspector()
	if err != nil {
		return err
	}
	s, err := in.OutboxStats(ctx)
	if err != nil {
		return d.migrated(ctx, err)
	}
	age := func(t time.Time) *float64 {
		if t.IsZero() {
			return nil
		}
		secs := float64(s.Now.Sub(t).Milliseconds()) / 1000 // 8.399, not 8.399000000000001
		return &secs
	}
	j := outboxStatsJSON{DatabaseTime: timeJSON(s.Now), Pending: s.Pending, Due: s.Due, OldestPending: timeJSON(s.OldestPending),
		OldestPendingAge: age(s.OldestPending), Parked: s.Parked, OldestParked: timeJSON(s.OldestParked),
		OldestParkedAge: age(s.OldestParked), PublishedKept: s.Published}
	if *asJSON {
		return writeJSON(stdout, j)
	}
	oldest := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%s, %s ago", timeJSON(t), roundAge(s.Now.Sub(t)))
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "pending:\t%d, %d due now\n", s.Pending, s.Due)
	fmt.Fprintf(tw, "oldest pending:\t%s\n", oldest(s.OldestPending))
	fmt.Fprintf(tw, "parked:\t%d\n", s.Parked)
	fmt.Fprintf(tw, "oldest parked:\t%s\n", oldest(s.OldestParked))
	fmt.Fprintf(tw, "published, kept:\t%d\n", s.Published)
	return tw.Flush()
}

// roundAge rounds an age for a person: to the millisecond under a second,
// then to the second.
func roundAge(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}
