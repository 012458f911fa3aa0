package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/failgroup"
	"github.com/inboxkit/inbox/internal/headers"
	"github.com/inboxkit/inbox/internal/replay"
	"github.com/inboxkit/inbox/store"
)

const deadLettersUsage = `NAME
  inbox dead-letters - list, show, discard and replay dead letters

SYNOPSIS
  inbox dead-letters list    [store] [filters] [-after ID] [-limit N] [-json]
  inbox dead-letters show    [store] [-json] ID
  inbox dead-letters discard [store] [-json] (ID... | -all [filters])
  inbox dead-letters replay  [store] [broker] -consumer C [-json] (ID... | -all [filters])

DESCRIPTION
  Dead letters of every consumer in one database: [store] is -postgres DSN,
  -mysql DSN or -sqlite FILE (with -schema and -prefix); [filters] are
  -consumer, -type, -error, -since, -until, -message-id and -group. Run
  'inbox dead-letters <subcommand> -h' for each one's flags.

` + exitStatus

// deadLetterCommands are dead-letters' subcommands, by name.
var deadLetterCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"list":    dlList,
	"show":    dlShow,
	"discard": dlDiscard,
	"replay":  dlReplay,
}

// deadLetters dispatches inbox dead-letters' subcommands.
func deadLetters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, deadLettersUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	if f, ok := deadLetterCommands[sub]; ok {
		return f(ctx, args, stdout, stderr)
	}
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, deadLettersUsage)
		return nil
	}
	fmt.Fprintf(stderr, "inbox dead-letters: unknown subcommand %q\n\n%s", sub, deadLettersUsage)
	return errUsage
}

// filterFlags select dead letters.
type filterFlags struct {
	consumer, typ, errorText, since, until, messageID, group string
	// oneConsumer: -consumer is required, with IDs too, and not a filter
	// (replay: its destination reaches one consumer).
	oneConsumer bool
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	if f.oneConsumer {
		fs.StringVar(&f.consumer, "consumer", "", "the consumer whose dead letters to replay (required): the one the destination reaches; a dead letter of another is refused")
	} else {
		fs.StringVar(&f.consumer, "consumer", "", "only this consumer's")
	}
	fs.StringVar(&f.typ, "type", "", "only of this message type (exactly)")
	fs.StringVar(&f.errorText, "error", "", "only those whose error contains this text (case-sensitive)")
	fs.StringVar(&f.since, "since", "", "only those that failed at or after this time: RFC 3339, a date, or a duration before now (24h)")
	fs.StringVar(&f.until, "until", "", "only those that failed before this time (as -since)")
	fs.StringVar(&f.messageID, "message-id", "", "only the dead letters of the message with this ID (exactly)")
	fs.StringVar(&f.group, "group", "", "only those of this error group (exactly, as inbox stats prints it: charge poison-<n>: card declined)")
}

// set reports whether a filter was given (-consumer counts only where
// it is one).
func (f *filterFlags) set() bool {
	return (f.consumer != "" && !f.oneConsumer) || f.typ != "" || f.errorText != "" || f.since != "" || f.until != "" ||
		f.messageID != "" || f.group != ""
}

// params are the filters as search parameters.
func (f *filterFlags) params(now time.Time) (*store.DeadLetterSearchParams, error) {
	since, err := parseTime(f.since, now)
	if err != nil {
		return nil, fmt.Errorf("-since: %w", err)
	}
	until, err := parseTime(f.until, now)
	if err != nil {
		return nil, fmt.Errorf("-until: %w", err)
	}
	p := &store.DeadLetterSearchParams{Consumer: []byte(f.consumer), Type: f.typ, ErrorContains: f.errorText,
		Since: since, Until: until, Group: f.group}
	if f.messageID != "" {
		p.MessageID = []byte(f.messageID)
	}
	return p, nil
}

// usageError writes msg about the command of fs (its flag set is named
// after it: "check", "dead-letters show") and returns errUsage.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) error {
	fmt.Fprintf(stderr, "inbox %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	return errUsage
}

// parseIDs parses a subcommand's flags and its arguments, positive
// integers (what names them in an error: "a dead letter ID", "a SEQ"),
// which may come between the flags.
func parseIDs(fs *flag.FlagSet, args []string, what string, stdout, stderr io.Writer) ([]int64, error) {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	var pos []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			_, _ = stdout.Write(buf.Bytes())
			return nil, err
		case err != nil:
			_, _ = stderr.Write(buf.Bytes())
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	var out []int64
	for _, a := range pos {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, usageError(fs, stderr, "%q is not %s (a positive integer)", a, what)
		}
		out = append(out, id)
	}
	return out, nil
}

// deadLetterJSON is a dead letter in the JSON outputs. IDs and consumers
// that are not valid UTF-8 come in base64 (the _base64 field) instead.
type deadLetterJSON struct {
	ID              int64  `json:"id"`
	Consumer        string `json:"consumer"`
	ConsumerBase64  string `json:"consumer_base64,omitempty"`
	MessageID       string `json:"message_id"`
	MessageIDBase64 string `json:"message_id_base64,omitempty"`
	Type            string `json:"type"`
	Error           string `json:"error"`
	ErrorGroup      string `json:"error_group"`
	Attempts        int    `json:"attempts"`
	FailedAt        string `json:"failed_at"`
	PayloadSize     int64  `json:"payload_size"`
	headersJSON
	// HeadersLost: the database refused the payload and headers; the
	// dead letter has neither.
	PayloadLost bool `json:"payload_lost,omitempty"`
}

func newDeadLetterJSON(dl *store.DeadLetter, size int64) deadLetterJSON {
	j := deadLetterJSON{ID: dl.ID, Type: dl.Type, Error: dl.Error, ErrorGroup: failgroup.Of(dl.Error), Attempts: dl.Attempts,
		FailedAt: timeJSON(dl.FailedAt), PayloadSize: size}
	j.Consumer, j.ConsumerBase64 = jsonBytes(dl.Key.Consumer)
	j.MessageID, j.MessageIDBase64 = jsonBytes(dl.Key.MessageID)
	if bytes.Equal(dl.Headers, headers.LostMarker) {
		j.PayloadLost = true
	} else {
		j.headersJSON = newHeadersJSON(dl.Headers)
	}
	return j
}

// marked begins each line of a payload's text with "| ", so that no line
// of it reads as one of show's own.
func marked(payload string) string {
	return "| " + strings.ReplaceAll(payload, "\n", "\n| ") + "\n"
}

// headersJSON holds stored headers for the JSON output.
type headersJSON struct {
	// Headers holds the headers whose name and value are valid UTF-8.
	Headers map[string]string `json:"headers,omitempty"`
	// HeadersBase64 holds the others, name to value, both in base64.
	HeadersBase64 map[string]string `json:"headers_base64,omitempty"`
	// HeadersError: the stored headers could not be read.
	HeadersError string `json:"headers_error,omitempty"`

	headers map[string]string // all of them, for the text output
}

// newHeadersJSON decodes headers stored by internal/headers.
func newHeadersJSON(b []byte) headersJSON {
	var j headersJSON
	h, err := headers.Decode(b)
	if err != nil {
		j.HeadersError = err.Error()
	}
	j.headers = h
	for k, v := range h {
		if utf8.ValidString(k) && utf8.ValidString(v) {
			j.Headers = withHeader(j.Headers, k, v)
		} else {
			enc := base64.StdEncoding.EncodeToString
			j.HeadersBase64 = withHeader(j.HeadersBase64, enc([]byte(k)), enc([]byte(v)))
		}
	}
	return j
}

func withHeader(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

var listCommand = command{
	name:     "dead-letters list",
	synopsis: "inbox dead-letters list " + storeSynopsis + "\n    [-consumer C] " + filterSynopsis + " [-after ID] [-limit N] [-json]",
	description: `Lists dead letters of every consumer, or those the filters select, in ID
order, without their payloads (inbox dead-letters show ID prints one).

Paging: a page holds at most -limit dead letters; pass the last ID of a
page as -after for the next. The text output ends with the -after of the
next page when the page is full; the JSON output is an object with the
dead letters and next_after (0 when the page is not full).`,
	examples: `inbox dead-letters list -sqlite inbox.db
inbox dead-letters list -postgres $DSN -consumer billing -error timeout -since 24h -json
inbox dead-letters list -postgres $DSN -after 1200 -limit 50`,
}

func dlList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := listCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	var ff filterFlags
	ff.register(fs)
	after := fs.Int64("after", 0, "list dead letters whose ID is greater (the last ID of the page before)")
	limit := fs.Int("limit", 100, "the most listed")
	asJSON := fs.Bool("json", false, "write JSON")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *limit < 1 || *after < 0 {
		return usageError(fs, stderr, "-limit must be at least 1 and -after at least 0")
	}
	p, err := ff.params(time.Now())
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	p.AfterID, p.Limit = *after, *limit
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	found, err := d.inspect.DeadLetterSearch(ctx, p)
	if err != nil {
		return err
	}
	var next int64
	if len(found) == *limit {
		next = found[len(found)-1].ID
	}
	if *asJSON {
		out := struct {
			DeadLetters []deadLetterJSON `json:"dead_letters"`
			NextAfter   int64            `json:"next_after"`
		}{DeadLetters: []deadLetterJSON{}, NextAfter: next}
		for _, f := range found {
			out.DeadLetters = append(out.DeadLetters, newDeadLetterJSON(&f.DeadLetter, f.PayloadSize))
		}
		return writeJSON(stdout, out)
	}
	if len(found) == 0 {
		fmt.Fprintln(stdout, "no dead letters")
		return nil
	}
	if err := writeDeadLetters(stdout, found); err != nil {
		return err
	}
	if next != 0 {
		fmt.Fprintf(stdout, "more may follow: -after %d\n", next)
	}
	return nil
}

// writeDeadLetters writes dead letters as list's table.
func writeDeadLetters(w io.Writer, found []*store.DeadLetterInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCONSUMER\tMESSAGE ID\tTYPE\tFAILED AT\tATTEMPTS\tBYTES\tERROR")
	for _, f := range found {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", f.ID, text(f.Key.Consumer), text(f.Key.MessageID), text([]byte(f.Type)),
			timeJSON(f.FailedAt), f.Attempts, f.PayloadSize, shorten(text([]byte(f.Error)), 60))
	}
	return tw.Flush()
}

// shorten cuts s to n runes.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

var showCommand = command{
	name:     "dead-letters show",
	synopsis: "inbox dead-letters show " + storeSynopsis + " [-json | -raw]\n    (ID | -message-id ID [-consumer C])",
	description: `Prints one dead letter: its consumer, message ID and type, error, attempts
and times, its headers and payload, and what the inbox holds of its
message: the inbox row (dead; live when the message was processed since;
none when pruned, or for an invalid message, whose row is keyed by its
content) and the failed attempts recorded.

The payload is printed as text when it is valid UTF-8, else in base64.
In the text, each line of the payload begins with "| ". The characters
that would act on a terminal or reorder what is read are escaped as in
Go (\x1b, \r, \u202e): C0 controls but newline and tab, DEL, C1
controls, U+2028 and U+2029, and bidirectional formatting characters.
The other fields are Go-quoted when they hold any. With -json,
payload_base64 always holds it, and payload_text too when it is valid
UTF-8; a header whose name or value is not valid UTF-8 is in
headers_base64 (name to value, both in base64) instead of headers. -raw
writes the payload alone, byte for byte, to a file or a pipe; it is
refused when stdout is a terminal.

-message-id finds the dead letter by its message's ID instead. When the
messages of several consumers, or several replays of one, left dead
letters with that ID, it lists their IDs and shows none: narrow it with
-consumer, or give the ID.`,
	examples: `inbox dead-letters show -sqlite inbox.db 42
inbox dead-letters show -sqlite inbox.db -message-id order-1187 -consumer billing
inbox dead-letters show -sqlite inbox.db -raw 42 > payload.bin
inbox dead-letters show -postgres $DSN -json 42 | jq -r .payload_base64 | base64 -d`,
}

// detailJSON is show's JSON output.
type detailJSON struct {
	deadLetterJSON
	PayloadText       *string `json:"payload_text,omitempty"`
	PayloadBase64     string  `json:"payload_base64"`
	InboxRow          string  `json:"inbox_row"`
	ReceivedAt        string  `json:"received_at,omitempty"`
	FailedAttempts    int     `json:"failed_attempts"`
	TransientFailures int     `json:"transient_failures"`
	FirstFailedAt     string  `json:"first_failed_at,omitempty"`
	LastFailedAt      string  `json:"last_failed_at,omitempty"`
	LastError         string  `json:"last_error,omitempty"`
}

func dlShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := showCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	asJSON := fs.Bool("json", false, "write JSON")
	raw := fs.Bool("raw", false, "write the payload alone, byte for byte (to a file or a pipe: refused on a terminal)")
	messageID := fs.String("message-id", "", "show the dead letter of the message with this ID (exactly)")
	consumer := fs.String("consumer", "", "with -message-id: the dead letter of this consumer's message")
	list, err := parseIDs(fs, args, "a dead letter ID", stdout, stderr)
	if err != nil {
		return err
	}
	switch {
	case *messageID != "" && len(list) > 0:
		return usageError(fs, stderr, "give a dead letter ID or -message-id, not both")
	case *consumer != "" && *messageID == "":
		return usageError(fs, stderr, "-consumer narrows -message-id; give -message-id too")
	case len(list) != 1 && *messageID == "":
		return usageError(fs, stderr, "give one dead letter ID, or -message-id")
	case *raw && *asJSON:
		return usageError(fs, stderr, "give -json or -raw, not both")
	case *raw && isTerminal(stdout):
		return usageError(fs, stderr, "-raw writes the payload's control characters as they are, which a terminal would obey: redirect stdout to a file or a pipe")
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	if *messageID != "" {
		id, err := deadLetterOfMessage(ctx, d.inspect, []byte(*messageID), []byte(*consumer))
		if err != nil {
			return err
		}
		list = []int64{id}
	}
	det, err := d.inspect.DeadLetterGet(ctx, list[0])
	if errors.Is(err, store.ErrNotFound) {
		return withCode(exitNotFound, fmt.Errorf("no dead letter %d", list[0]))
	}
	if err != nil {
		return err
	}
	j := detailJSON{deadLetterJSON: newDeadLetterJSON(&det.DeadLetter, int64(len(det.Payload))),
		PayloadBase64: base64.StdEncoding.EncodeToString(det.Payload), InboxRow: det.RowState, ReceivedAt: timeJSON(det.ReceivedAt),
		FailedAttempts: det.Counted, TransientFailures: det.Transient, FirstFailedAt: timeJSON(det.FirstFailedAt),
		LastFailedAt: timeJSON(det.LastFailedAt), LastError: det.LastError}
	if utf8.Valid(det.Payload) {
		s := string(det.Payload)
		j.PayloadText = &s
	}
	switch {
	case *asJSON:
		return writeJSON(stdout, j)
	case *raw && j.PayloadLost:
		return fmt.Errorf("dead letter %d: %w", det.ID, inbox.ErrPayloadLost)
	case *raw:
		_, err := stdout.Write(det.Payload)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "dead letter:\t%d\n", det.ID)
	fmt.Fprintf(tw, "consumer:\t%s\n", text(det.Key.Consumer))
	fmt.Fprintf(tw, "message id:\t%s\n", text(det.Key.MessageID))
	fmt.Fprintf(tw, "type:\t%s\n", text([]byte(det.Type)))
	fmt.Fprintf(tw, "failed at:\t%s, after %s\n", j.FailedAt, plural(det.Attempts, "attempt"))
	fmt.Fprintf(tw, "error:\t%s\n", text([]byte(det.Error)))
	fmt.Fprintf(tw, "inbox row:\t%s", det.RowState)
	if !det.ReceivedAt.IsZero() {
		fmt.Fprintf(tw, ", received at %s", j.ReceivedAt)
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "attempts:\t%s\n", attemptsText(det, j))
	if j.PayloadLost {
		fmt.Fprintf(tw, "payload:\tnot kept (the database refused it); the dead letter cannot be replayed\n")
		return tw.Flush()
	}
	return writeBody(tw, stdout, j.headersJSON, len(det.Payload), j.PayloadText, j.PayloadBase64)
}

// deadLetterOfMessage returns the ID of the one dead letter of the message with
// ID messageID (of consumer, if not empty). None is exit status 4;
// several is an error that lists them.
func deadLetterOfMessage(ctx context.Context, in inspection, messageID, consumer []byte) (int64, error) {
	found, err := in.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{MessageID: messageID, Consumer: consumer, Limit: 10})
	if err != nil {
		return 0, err
	}
	switch len(found) {
	case 0:
		return 0, withCode(exitNotFound, fmt.Errorf("no dead letter of message %s", text(messageID)))
	case 1:
		return found[0].ID, nil
	}
	var ids []string
	for _, f := range found {
		ids = append(ids, fmt.Sprintf("%d (consumer %s)", f.ID, text(f.Key.Consumer)))
	}
	more := ""
	if len(found) == 10 {
		more = ", and maybe more"
	}
	return 0, fmt.Errorf("the message %s has several dead letters: %s%s; give one's ID, or -consumer",
		text(messageID), strings.Join(ids, ", "), more)
}

// attemptsText is what show says of the failed attempts recorded: none
// means pruned only when the dead letter counted attempts, and an invalid
// message (an empty or oversized ID) is dead-lettered without running its
// handler, so it never has any. Otherwise no cause is told: a dead letter
// of transient failures alone counted none (their records were pruned), and
// so does an invalid message of a consumer that scopes IDs by type (its key
// holds the type).
func attemptsText(det *store.DeadLetterDetail, j detailJSON) string {
	switch n := len(det.Key.MessageID); {
	case det.Counted+det.Transient > 0:
		return fmt.Sprintf("%d failed, %d transient, from %s to %s", det.Counted, det.Transient, j.FirstFailedAt, j.LastFailedAt)
	case det.Attempts > 0:
		return "none recorded (pruned)"
	case n == 0 || n > inbox.MaxIDLen:
		return "none: an invalid message is dead-lettered without running its handler"
	}
	return "none recorded"
}

var discardCommand = command{
	name: "dead-letters discard",
	synopsis: "inbox dead-letters discard " + storeSynopsis + "\n    [-json] ID...\n" +
		"inbox dead-letters discard " + storeSynopsis + "\n    -all [-consumer C] " + filterSynopsis + " [-dry-run] [-json]",
	description: `Deletes dead letters for good: those given by ID, or with -all every one
that the filters select (all of them without a filter). The messages' inbox
rows stay marked dead, as inbox.Discard leaves them, so that a redelivery
of a discarded message is still a duplicate and is acked.

It prints the IDs it deleted. An ID given that does not exist is reported
and makes the exit status 4, after the others were deleted. IDs given are
deleted in one transaction: all or none. A dead letter that another
transaction holds locked (a replay of it; SQLite: the database's write
lock) is waited for 5 s at most (store.DefaultLockTimeout); then the
transaction fails and deletes nothing.

-all discards the dead letters selected when it starts (one made meanwhile
is left for the next run), 500 a transaction, and prints each batch as it
commits. A failure after a batch committed exits 5 (partly done): the
dead letters printed are deleted, the others are not; run it again for
them. With -json, the output then holds the error too. On a terminal,
stderr shows the progress: dead letters done, the rate, the time left
(not with -json). With -dry-run,
-all prints the dead letters it would discard, and their count, and
deletes nothing.`,
	examples: `inbox dead-letters discard -sqlite inbox.db 41 42
inbox dead-letters discard -postgres $DSN -all -consumer billing -error "unknown account" -until 2026-01-01 -dry-run
inbox dead-letters discard -postgres $DSN -all -consumer billing -error "unknown account" -until 2026-01-01`,
}

func dlDiscard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := discardCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	var ff filterFlags
	ff.register(fs)
	all := fs.Bool("all", false, "discard every dead letter the filters select (required to discard without IDs)")
	dryRun := fs.Bool("dry-run", false, "with -all: print the dead letters that would be discarded, and discard none")
	asJSON := fs.Bool("json", false, "write JSON")
	list, p, err := ff.selection(fs, args, all, stdout, stderr)
	if err != nil {
		return err
	}
	if *dryRun && !*all {
		return usageError(fs, stderr, "-dry-run goes with -all")
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	if *dryRun {
		return dryRunAll(ctx, d.inspect, p, "discard", "", *asJSON, stdout)
	}
	var deleted, missing []int64
	if *all {
		deleted, err = discardAll(ctx, d.inspect, p, *asJSON, stdout, stderr)
	} else {
		deleted, err = d.inspect.DeadLetterDiscard(ctx, list)
		for _, id := range list {
			if !slices.Contains(deleted, id) {
				missing = append(missing, id)
			}
		}
		if err == nil && !*asJSON {
			printDiscarded(stdout, deleted)
		}
	}
	if err != nil && len(deleted) > 0 {
		// Each batch committed on its own: those deleted stay deleted.
		err = withCode(exitPartial, fmt.Errorf("discarded %s, then failed: %w", plural(len(deleted), "dead letter"), err))
	}
	if *asJSON && (err == nil || len(deleted) > 0) {
		out := struct {
			Discarded []int64 `json:"discarded"`
			NotFound  []int64 `json:"not_found"`
			Error     string  `json:"error,omitempty"`
		}{Discarded: append([]int64{}, deleted...), NotFound: append([]int64{}, missing...)}
		if err != nil {
			out.Error = err.Error()
		}
		if werr := writeJSON(stdout, out); err == nil {
			err = werr
		}
	} else if err == nil && len(deleted) == 0 {
		fmt.Fprintln(stdout, "discarded no dead letters")
	}
	if err == nil && len(missing) > 0 {
		return withCode(exitNotFound, fmt.Errorf("no dead letters %v", missing))
	}
	return err
}

// discardAll discards the dead letters p selects when it starts (one
// made meanwhile is left), a batch of discardPage in a transaction at a
// time, and prints each batch as it commits unless asJSON. It returns
// those deleted, with the error that stopped it.
func discardAll(ctx context.Context, in inspection, p *store.DeadLetterSearchParams, asJSON bool, stdout, stderr io.Writer) ([]int64, error) {
	ids, err := replay.SelectIDs(ctx, in, p)
	if err != nil {
		return nil, err
	}
	prog := newProgress(stderr, asJSON, "discarded", "dead letter", len(ids))
	defer prog.finish()
	var deleted []int64
	for batch := range slices.Chunk(ids, discardPage) {
		got, err := in.DeadLetterDiscard(ctx, batch)
		deleted = append(deleted, got...)
		if !asJSON {
			prog.clear()
			printDiscarded(stdout, got)
		}
		prog.add(len(batch))
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// printDiscarded writes a line per dead letter discarded.
func printDiscarded(w io.Writer, ids []int64) {
	for _, id := range ids {
		fmt.Fprintf(w, "discarded dead letter %d\n", id)
	}
}

// selection parses the flags and the IDs of discard and replay, and
// checks them (checkSelection); p holds the filters.
func (f *filterFlags) selection(fs *flag.FlagSet, args []string, all *bool, stdout, stderr io.Writer) ([]int64, *store.DeadLetterSearchParams, error) {
	list, err := parseIDs(fs, args, "a dead letter ID", stdout, stderr)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSelection(fs, stderr, list, *all, f); err != nil {
		return nil, nil, err
	}
	p, err := f.params(time.Now())
	if err != nil {
		return nil, nil, usageError(fs, stderr, "%v", err)
	}
	return list, p, nil
}

// checkSelection checks that IDs or -all were given, not both, and
// filters only with -all.
func checkSelection(fs *flag.FlagSet, stderr io.Writer, list []int64, all bool, ff *filterFlags) error {
	switch {
	case all && len(list) > 0:
		return usageError(fs, stderr, "give IDs or -all, not both")
	case !all && len(list) == 0:
		return usageError(fs, stderr, "give dead letter IDs, or -all (with filters) for every one they select")
	case !all && ff.set():
		return usageError(fs, stderr, "the filters select dead letters only with -all")
	case ff.oneConsumer && ff.consumer == "":
		return usageError(fs, stderr, "give -consumer: the consumer whose dead letters to replay, the one the destination reaches")
	}
	return nil
}

// discardPage is how many dead letters discard -all deletes per
// transaction: a page of the selection.
const discardPage = replay.SelectPage

// dryRunAll prints the dead letters that discard or replay (action) -all
// would take now (to, when set, says where replay would publish them),
// their count, or JSON, and changes nothing.
func dryRunAll(ctx context.Context, in inspection, p *store.DeadLetterSearchParams, action, to string, asJSON bool, stdout io.Writer) error {
	var found []*store.DeadLetterInfo
	err := replay.Each(ctx, in, p, func(f *store.DeadLetterInfo) { found = append(found, f) })
	if err != nil {
		return err
	}
	if asJSON {
		list := []deadLetterJSON{}
		for _, f := range found {
			list = append(list, newDeadLetterJSON(&f.DeadLetter, f.PayloadSize))
		}
		return writeJSON(stdout, map[string]any{"dry_run": true, "count": len(found), "would_" + action: list})
	}
	if len(found) > 0 {
		if err := writeDeadLetters(stdout, found); err != nil {
			return err
		}
	}
	if to != "" {
		to = " to " + to
	}
	fmt.Fprintf(stdout, "dry run: would %s %s%s; nothing changed\n", action, plural(len(found), "dead letter"), to)
	return nil
}

// writeBody ends show's text output, of a dead letter or an outbox row:
// the headers, then the payload of size bytes, as text with its controls
// escaped and each line marked, or in base64 when it is not valid UTF-8
// (asText nil). It flushes tw before the payload.
func writeBody(tw *tabwriter.Writer, stdout io.Writer, h headersJSON, size int, asText *string, asBase64 string) error {
	for _, k := range slices.Sorted(maps.Keys(h.headers)) {
		fmt.Fprintf(tw, "header:\t%s: %s\n", text([]byte(k)), text([]byte(h.headers[k])))
	}
	if h.HeadersError != "" {
		fmt.Fprintf(tw, "headers:\tnot readable: %s\n", text([]byte(h.HeadersError)))
	}
	if asText != nil {
		payload, n := escapeControls(*asText)
		if n == 0 {
			fmt.Fprintf(tw, "payload:\t%s, text:\n", plural(size, "byte"))
		} else {
			fmt.Fprintf(tw, "payload:\t%s, text, %s escaped (as \\x1b, \\u202e):\n", plural(size, "byte"), plural(n, "control character"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := io.WriteString(stdout, marked(payload))
		return err
	}
	fmt.Fprintf(tw, "payload:\t%s, base64:\n", plural(size, "byte"))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, asBase64)
	return err
}
