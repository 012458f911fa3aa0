package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/inboxkit/inbox/store"
)

var outboxCommand = command{
	name: "outbox",
	synopsis: "inbox outbox parked " + storeSynopsis + "\n    [-after SEQ] [-limit N] [-json]\n" +
		"inbox outbox unpark " + storeSynopsis + " [-json] SEQ...\n" +
		"inbox outbox discard " + storeSynopsis + " [-json] SEQ...",
	description: `Parked outbox rows: the messages the relay gave up on, after MaxAttempts
failed publications or a failure that no retry fixes. They are kept and not
published; with RelayConfig.Ordered each holds back its key's later rows.

parked lists them in sequence order (SEQ), with their last error, without
their payloads (-json has them in base64). Paging: pass the last SEQ of a
full page as -after for the next.

unpark makes the rows given by SEQ due again, with their attempts reset:
the relay publishes them as they were written.

discard deletes them for good: they are never published, and their key's
later rows go out. A parked row keeps its ID, so a Write with that ID is
skipped while it is parked; after discard the ID may be written again (a
corrected message).

Each SEQ is done in a transaction of its own, printed as it commits. A SEQ
that is not a parked row is reported (not_found in -json) and makes the
exit status 4, after the others were done. Any other failure stops the
command, and its error names the SEQs not tried; when some SEQs were done,
the exit status is 5 (partly done), and -json holds the error too.`,
	examples: `inbox outbox parked -postgres $DSN -schema app
inbox outbox discard -sqlite inbox.db 41 42
inbox outbox unpark -postgres $DSN -json 17`,
}

// outboxActions are outbox's subcommands and the past tense of each.
var outboxActions = map[string]string{"parked": "", "unpark": "unparked", "discard": "discarded"}

func outboxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := outboxCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	after := fs.Int64("after", 0, "parked: list rows whose SEQ is greater (the last SEQ of the page before)")
	limit := fs.Int("limit", 100, "parked: the most listed")
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
		return usageError(fs, stderr, "give parked, unpark or discard first")
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
	case action != "parked" && len(seqs) == 0:
		return usageError(fs, stderr, "give the SEQ of each parked row to %s", action)
	case action != "parked" && (seen["after"] || seen["limit"]):
		return usageError(fs, stderr, "-after and -limit are parked's")
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
	if action == "parked" {
		recs, err := rs.OutboxParked(ctx, &store.OutboxListParams{AfterSeq: *after, Limit: *limit})
		if err != nil {
			return err
		}
		var next int64 // the -after of the next page, 0 for none
		if len(recs) == *limit {
			next = recs[len(recs)-1].Seq
		}
		if *asJSON {
			return writeParkedJSON(stdout, recs, next)
		}
		return writeParked(stdout, recs, next)
	}
	act := rs.OutboxUnpark
	if action == "discard" {
		act = rs.OutboxDiscard
	}
	past := outboxActions[action]
	done, missing := []int64{}, []int64{}
	var cause error // a failure other than not found, which stops the run
	for i, seq := range seqs {
		err := act(ctx, seq)
		if errors.Is(err, store.ErrNotFound) {
			missing = append(missing, seq)
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
			fmt.Fprintf(stdout, "%s outbox row %d\n", past, seq)
		}
	}
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
		out := map[string]any{past: done, "not_found": missing}
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

// writeParkedJSON writes parked rows as JSON; next is the -after of the
// next page.
func writeParkedJSON(w io.Writer, recs []*store.OutboxRecord, next int64) error {
	out := struct {
		Parked    []parkedJSON `json:"parked"`
		NextAfter int64        `json:"next_after"`
	}{Parked: []parkedJSON{}, NextAfter: next}
	for _, r := range recs {
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
func writeParked(w io.Writer, recs []*store.OutboxRecord, next int64) error {
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
