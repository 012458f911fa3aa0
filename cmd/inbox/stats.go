package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/inboxkit/inbox/store"
)

var statsCommand = command{
	name:     "stats",
	synopsis: "inbox stats " + storeSynopsis + "\n    [-consumer C] [-top N] [-error-chars N] [-json]",
	description: `Counts, per consumer: the inbox rows (and how many are marked dead), the
oldest and newest claim (received_at, by the database's clock), the dead
letters and when the first and last failed, the messages with failed
attempts recorded (kept until pruned, also after a later success) and the
most frequent last errors of those, truncated to -error-chars characters
so that errors differing only in an ID count as one.

It reads every row of the three tables (of one consumer with -consumer):
an operator's query, not one to run every second on a large inbox.`,
	examples: `inbox stats -sqlite inbox.db
inbox stats -postgres postgres://app@db/app -consumer billing -json`,
}

// statsJSON is one consumer in stats' JSON output.
type statsJSON struct {
	Consumer          string           `json:"consumer"`
	ConsumerBase64    string           `json:"consumer_base64,omitempty"`
	InboxRows         int64            `json:"inbox_rows"`
	DeadRows          int64            `json:"dead_rows"`
	OldestClaim       string           `json:"oldest_claim,omitempty"`
	NewestClaim       string           `json:"newest_claim,omitempty"`
	DeadLetters       int64            `json:"dead_letters"`
	OldestDeadLetter  string           `json:"oldest_dead_letter,omitempty"`
	NewestDeadLetter  string           `json:"newest_dead_letter,omitempty"`
	FailedMessages    int64            `json:"failed_messages"`
	FailedAttempts    int64            `json:"failed_attempts"`
	TransientFailures int64            `json:"transient_failures"`
	TopErrors         []errorCountJSON `json:"top_errors"`
}

type errorCountJSON struct {
	Error    string `json:"error"`
	Messages int64  `json:"messages"`
}

func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := statsCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	consumer := fs.String("consumer", "", "only this consumer")
	top := fs.Int("top", 3, "how many of the most frequent errors to show per consumer (0: none)")
	chars := fs.Int("error-chars", 80, "characters of each error kept before counting")
	asJSON := fs.Bool("json", false, "write JSON (an array, one object per consumer)")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *top < 0 || *chars < 1 {
		fmt.Fprintln(stderr, "inbox stats: -top must be at least 0 and -error-chars at least 1")
		return errUsage
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	stats, err := d.inspect.Stats(ctx, &store.StatsParams{Consumer: []byte(*consumer), TopErrors: *top, ErrorChars: *chars})
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]statsJSON, 0, len(stats))
		for _, s := range stats {
			j := statsJSON{InboxRows: s.InboxRows, DeadRows: s.DeadRows, OldestClaim: timeJSON(s.OldestClaim), NewestClaim: timeJSON(s.NewestClaim),
				DeadLetters: s.DeadLetters, OldestDeadLetter: timeJSON(s.OldestDeadLetter), NewestDeadLetter: timeJSON(s.NewestDeadLetter),
				FailedMessages: s.FailedMessages, FailedAttempts: s.FailedAttempts, TransientFailures: s.TransientFailures,
				TopErrors: []errorCountJSON{}}
			j.Consumer, j.ConsumerBase64 = jsonBytes(s.Consumer)
			for _, e := range s.TopErrors {
				j.TopErrors = append(j.TopErrors, errorCountJSON{Error: e.Error, Messages: e.Count})
			}
			out = append(out, j)
		}
		return writeJSON(stdout, out)
	}
	if len(stats) == 0 {
		fmt.Fprintln(stdout, "no rows")
		return nil
	}
	for i, s := range stats {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "consumer:\t%s\n", text(s.Consumer))
		fmt.Fprintf(tw, "inbox rows:\t%d (%d dead)\n", s.InboxRows, s.DeadRows)
		if s.InboxRows > 0 {
			fmt.Fprintf(tw, "claims:\t%s .. %s\n", timeJSON(s.OldestClaim), timeJSON(s.NewestClaim))
		}
		fmt.Fprintf(tw, "dead letters:\t%d\n", s.DeadLetters)
		if s.DeadLetters > 0 {
			fmt.Fprintf(tw, "failed:\t%s .. %s\n", timeJSON(s.OldestDeadLetter), timeJSON(s.NewestDeadLetter))
		}
		fmt.Fprintf(tw, "failed messages:\t%d (%s, %s)\n", s.FailedMessages, plural(s.FailedAttempts, "attempt"), plural(s.TransientFailures, "transient failure"))
		for _, e := range s.TopErrors {
			fmt.Fprintf(tw, "  %d×\t%s\n", e.Count, text([]byte(e.Error)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
