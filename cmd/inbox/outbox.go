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

	"github.com/inboxkit/inbox/internal/selection"
	"github.com/inboxkit/inbox/store"
)

var outboxCommand = command{
	name: "outbox",
	synopsis: "inbox outbox list " + storeSynopsis + " [-pending | -parked] [filters] ...\n" +
		"inbox outbox show " + storeSynopsis + " [-json | -raw] (SEQ | -message-id ID)\n" +
		"inbox outbox stats " + storeSynopsis + " [-json]\n" +
		"inbox outbox unpark " + storeSynopsis + " [-json] [-dry-run]\n    (SEQ... | -all [filters])\n" +
		"inbox outbox discard " + storeSynopsis + " [-json] [-dry-run]\n    (SEQ... | -all [filters])\n" +
		"inbox outbox parked " + storeSynopsis + "\n    [filters] [-after SEQ] [-limit N] [-json]\n" +
		"[filters]: " + outboxFilterSynopsis,
	description: `The outbox's rows not yet published: pending ones, which a relay will
publish, and parked ones, which it gave up on after MaxAttempts failed
publications or a failure that no retry fixes. Parked rows are kept and not
published; with RelayConfig.Ordered each holds back its key's later rows.
[filters] are -destination, -type, -message-id (or -message-id-base64),
-error, -since and -until. list, show and stats have manuals of their own:
inbox outbox list -h.

list lists the rows, stats counts them and tells the oldest pending row's
age, show prints one with its payload.

parked is list -parked in the format of earlier versions: with -json each
row has its payload in base64. Paging: pass the last SEQ of a full page as
-after for the next.

unpark makes the parked rows given by SEQ due again, with their attempts
reset: the relay publishes them as they were written.

discard deletes parked rows for good: they are never published, and their
key's later rows go out. A parked row keeps its ID, so a Write with that ID
is skipped while it is parked; after discard the ID may be written again (a
corrected message).

With -all instead of SEQs, unpark and discard take every parked row the
filters select when they start (all of them without a filter); a row parked
meanwhile is left for the next run. -dry-run prints the rows it would
change, and changes nothing. On a terminal, stderr shows the progress of
-all: rows done, the rate, the time left (not with -json).

Each SEQ is done in a transaction of its own, printed as it commits. A SEQ
that is not a parked row is reported (not_found in -json) and makes the
exit status 4, after the others were done. Any other failure stops the
command, and its error names the SEQs not tried; when some SEQs were done,
the exit status is 5 (partly done), and -json holds the error too.`,
	examples: `inbox outbox stats -postgres $DSN -schema app
inbox outbox list -postgres $DSN -parked -destination payments-api
inbox outbox discard -sqlite inbox.db 41 42
inbox outbox unpark -postgres $DSN -all -error "no such stream" -dry-run
inbox outbox unpark -postgres $DSN -json 17`,
}

// outboxActions are outbox's subcommands that take SEQs, and the past
// tense of each.
var outboxActions = map[string]string{"parked": "", "unpark": "unparked", "discard": "discarded"}

// outboxReads are outbox's subcommands with flags of their own.
var outboxReads = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"list":  outboxList,
	"show":  outboxShow,
	"stats": outboxStats,
}

func outboxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if f, ok := outboxReads[args[0]]; ok {
			return f(ctx, args[1:], stdout, stderr)
		}
	}
	fs := outboxCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	var ff outboxFilters
	ff.register(fs)
	after := fs.Int64("after", 0, "parked: list rows whose SEQ is greater (the last SEQ of the page before)")
	limit := fs.Int("limit", 100, "parked: the most listed")
	all := fs.Bool("all", false, "unpark, discard: every parked row the filters select (required without SEQs)")
	dryRun := fs.Bool("dry-run", false, "unpark, discard: print the rows that would change, and change nothing")
	asJSON := fs.Bool("json", false, "write JSON")
	action := ""
	if len(args) > 0 {
		if _, ok := outboxActions[args[0]]; ok {
			action, args = args[0], args[1:]
		}
	}
	seqs, err := parseIDs(fs, args, "a SEQ", stdout, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case action == "":
		return usageError(fs, stderr, "give parked, unpark or discard first, or list, show or stats")
	case err != nil:
		return err
	}
	seen := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { seen[f.Name] = true })
	switch {
	case action == "parked" && len(seqs) > 0:
		return usageError(fs, stderr, "parked takes no SEQ (-after pages)")
	case action == "parked" && (*limit < 1 || *after < 0):
		return usageError(fs, stderr, "-limit must be at least 1 and -after at least 0")
	case action == "parked" && (*all || *dryRun):
		return usageError(fs, stderr, "-all and -dry-run are unpark's and discard's")
	case action != "parked" && (seen["after"] || seen["limit"]):
		return usageError(fs, stderr, "-after and -limit are parked's")
	case action != "parked" && *all && len(seqs) > 0:
		return usageError(fs, stderr, "give SEQs or -all, not both")
	case action != "parked" && !*all && len(seqs) == 0:
		return usageError(fs, stderr, "give the SEQ of each parked row to %s, or -all (with filters) for every one they select", action)
	case action != "parked" && !*all && ff.set():
		return usageError(fs, stderr, "the filters select parked rows only with -all")
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
	rs, ok := d.driver.(store.OutboxRelayer)
	if !ok {
		return fmt.Errorf("the %T store has no outbox", d.driver)
	}
	in, err := d.outboxInspector()
	if err != nil {
		return err
	}
	if action == "parked" {
		p.State, p.AfterSeq, p.Limit = store.OutboxStateParked, *after, *limit
		found, err := in.OutboxSearch(ctx, p)
		if err != nil {
			return d.migrated(ctx, err)
		}
		var next int64 // the -after of the next page, 0 for none
		if len(found) == *limit {
			next = found[len(found)-1].Seq
		}
		if *asJSON {
			return writeParkedJSON(ctx, stdout, in, found, next)
		}
		return writeParked(stdout, found, next)
	}
	past := outboxActions[action]
	var missing []int64
	if *all {
		found, err := selection.Parked(ctx, in, p)
		if err != nil {
			return d.migrated(ctx, err)
		}
		seqs = nil
		for _, r := range found {
			seqs = append(seqs, r.Seq)
		}
		if *dryRun {
			return outboxDryRun(stdout, action, found, nil, *asJSON)
		}
	} else if *dryRun {
		var found []*store.OutboxInfo
		for _, seq := range seqs {
			r, err := in.OutboxGet(ctx, seq)
			switch {
			case errors.Is(err, store.ErrNotFound) || err == nil && r.State() != string(store.OutboxStateParked):
				missing = append(missing, seq)
			case err != nil:
				return d.migrated(ctx, err)
			default:
				found = append(found, r)
			}
		}
		return outboxDryRun(stdout, action, found, missing, *asJSON)
	}
	act := rs.OutboxUnpark
	if action == "discard" {
		act = rs.OutboxDiscard
	}
	done := []int64{}
	var cause error // a failure other than not found, which stops the run
	prog := newProgress(stderr, *asJSON || !*all, past, "outbox row", len(seqs))
	for i, seq := range seqs {
		err := act(ctx, seq)
		if errors.Is(err, store.ErrNotFound) {
			if !*all { // with -all: changed meanwhile by another, not asked for
				missing = append(missing, seq)
			}
			prog.add(1)
			continue
		}
		if err != nil {
			cause = fmt.Errorf("%s %d: %w", action, seq, err)
			if rest := seqs[i+1:]; len(rest) > 0 {
				cause = fmt.Errorf("%w; not tried: %v", cause, rest)
			}
			break
		}
		done = append(done, seq)
		if !*asJSON {
			prog.clear()
			fmt.Fprintf(stdout, "%s outbox row %d\n", past, seq)
		}
		prog.add(1)
	}
	prog.finish()
	var failed error
	switch {
	case cause != nil && len(missing) > 0:
		cause = fmt.Errorf("%w; no parked outbox rows %v", cause, missing)
	case len(missing) > 0:
		failed = withCode(exitNotFound, fmt.Errorf("no parked outbox rows %v", missing))
	}
	switch {
	case cause != nil && len(done) > 0:
		// Each row is done in a transaction of its own: those done stay
		// done.
		failed = withCode(exitPartial, fmt.Errorf("partly done: %s %s, then %w", past, plural(len(done), "outbox row"), cause))
	case cause != nil:
		failed = cause
	}
	if *asJSON {
		out := map[string]any{past: done, "not_found": append([]int64{}, missing...)}
		if cause != nil {
			out["error"] = failed.Error()
		}
		if err := writeJSON(stdout, out); err != nil && failed == nil {
			failed = err
		}
	} else if len(done) == 0 {
		fmt.Fprintf(stdout, "%s no outbox rows\n", past)
	}
	return failed
}

// outboxDryRun prints the parked rows that unpark or discard (action)
// would change, and the SEQs given that are not parked rows: exit 4, as
// the run would.
func outboxDryRun(stdout io.Writer, action string, found []*store.OutboxInfo, missing []int64, asJSON bool) error {
	seqs := []int64{}
	for _, r := range found {
		seqs = append(seqs, r.Seq)
	}
	var failed error
	if len(missing) > 0 {
		failed = withCode(exitNotFound, fmt.Errorf("no parked outbox rows %v", missing))
	}
	if asJSON {
		out := map[string]any{"dry_run": true, "would_" + action: seqs, "not_found": append([]int64{}, missing...)}
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
		return failed
	}
	if len(found) > 0 {
		if err := writeOutboxRows(stdout, found); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "dry run: would %s %s; nothing changed\n", action, plural(len(found), "outbox row"))
	return failed
}

// parkedJSON is a parked row in parked's JSON output. IDs and keys that
// are not valid UTF-8 come in base64 (the _base64 field) instead.
type parkedJSON struct {
	Seq             int64  `json:"seq"`
	MessageID       string `json:"message_id"`
	MessageIDBase64 string `json:"message_id_base64,omitempty"`
	Destination     string `json:"destination"`
	Key             string `json:"key,omitempty"`
	KeyBase64       string `json:"key_base64,omitempty"`
	Type            string `json:"type,omitempty"`
	Attempts        int    `json:"attempts"`
	Error           string `json:"error"`
	CreatedAt       string `json:"created_at"`
	ParkedAt        string `json:"parked_at"`
	headersJSON
	PayloadBase64 string `json:"payload_base64"`
}

// writeParkedJSON writes parked rows as JSON, with their payloads read
// one by one (a row gone meanwhile is left out); next is the -after of
// the next page.
func writeParkedJSON(ctx context.Context, w io.Writer, in store.OutboxInspector, found []*store.OutboxInfo, next int64) error {
	out := struct {
		Parked    []parkedJSON `json:"parked"`
		NextAfter int64        `json:"next_after"`
	}{Parked: []parkedJSON{}, NextAfter: next}
	for _, f := range found {
		r, err := in.OutboxGet(ctx, f.Seq)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		j := parkedJSON{Seq: r.Seq, Destination: r.Destination, Type: r.Type, Attempts: r.Attempts, Error: r.LastError,
			CreatedAt: timeJSON(r.CreatedAt), ParkedAt: timeJSON(r.ParkedAt), PayloadBase64: base64.StdEncoding.EncodeToString(r.Payload)}
		j.MessageID, j.MessageIDBase64 = jsonBytes(r.ID)
		j.Key, j.KeyBase64 = jsonBytes(r.Key)
		j.headersJSON = newHeadersJSON(r.Headers)
		out.Parked = append(out.Parked, j)
	}
	return writeJSON(w, out)
}

// writeParked writes parked rows as a table; next is the -after of the
// next page.
func writeParked(w io.Writer, recs []*store.OutboxInfo, next int64) error {
	if len(recs) == 0 {
		fmt.Fprintln(w, "no parked outbox rows")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tMESSAGE ID\tDESTINATION\tKEY\tPARKED AT\tATTEMPTS\tERROR")
	for _, r := range recs {
		key := "-"
		if len(r.Key) > 0 {
			key = text(r.Key)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Seq, text(r.ID), text([]byte(r.Destination)), key,
			timeJSON(r.ParkedAt), r.Attempts, shorten(text([]byte(r.LastError)), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != 0 {
		fmt.Fprintf(w, "more may follow: -after %d\n", next)
	}
	return nil
}
