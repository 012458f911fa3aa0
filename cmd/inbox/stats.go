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
letters, when the first and last failed, and their largest error groups;
the messages with failed attempts recorded (kept until pruned, also after
a later success) and the largest groups of their last errors.

An error group is the error with what changes from message to message
replaced: IDs, numbers, UUIDs and hex. "charge poison-00000: card
declined" and "charge poison-00001: card declined" are one group,
"charge poison-<n>: card declined". inbox dead-letters list -group
lists a group's dead letters. -error-chars truncates the groups of the
failed attempts before they are counted.

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
	DeadLetterGroups  []groupJSON      `json:"dead_letter_groups"`
}

// groupJSON is an error group of dead letters in JSON.
type groupJSON struct {
	Group         string `json:"group"`
	DeadLetters   int64  `json:"dead_letters"`
	FirstFailedAt string `json:"first_failed_at"`
	LastFailedAt  string `json:"last_failed_at"`
}

func groupsJSON(groups []*store.DeadLetterGroup) []groupJSON {
	out := make([]groupJSON, 0, len(groups))
	for _, g := range groups {
		out = append(out, groupJSON{Group: g.Group, DeadLetters: g.Count, FirstFailedAt: timeJSON(g.FirstFailedAt), LastFailedAt: timeJSON(g.LastFailedAt)})
	}
	return out
}

// groupText is an error group for the terminal: escaped, and the group
// of dead letters written before groups were recorded named for what it
// is.
func groupText(g string) string {
	if g == "" {
		return "(not grouped yet: written before inbox migrate recorded groups; run inbox migrate)"
	}
	return text([]byte(g))
}

// deadLetterGroups returns the top largest error groups of each
// consumer's dead letters, in the order of stats.
func deadLetterGroups(ctx context.Context, in inspection, stats []*store.ConsumerStats, top int) ([][]*store.DeadLetterGroup, error) {
	out := make([][]*store.DeadLetterGroup, len(stats))
	for i, s := range stats {
		if top == 0 || s.DeadLetters == 0 {
			continue
		}
		groups, err := in.DeadLetterGroups(ctx, &store.DeadLetterSearchParams{Consumer: s.Consumer, Limit: top})
		if err != nil {
			return nil, err
		}
		out[i] = groups
	}
	return out, nil
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
	top := fs.Int("top", 3, "how many of the largest error groups to show per consumer, of dead letters and of failed attempts (0: none)")
	chars := fs.Int("error-chars", 80, "characters of each failed attempt's error group kept before counting")
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
	groups, err := deadLetterGroups(ctx, d.inspect, stats, *top)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]statsJSON, 0, len(stats))
		for i, s := range stats {
			j := statsJSON{InboxRows: s.InboxRows, DeadRows: s.DeadRows, OldestClaim: timeJSON(s.OldestClaim), NewestClaim: timeJSON(s.NewestClaim),
				DeadLetters: s.DeadLetters, OldestDeadLetter: timeJSON(s.OldestDeadLetter), NewestDeadLetter: timeJSON(s.NewestDeadLetter),
				FailedMessages: s.FailedMessages, FailedAttempts: s.FailedAttempts, TransientFailures: s.TransientFailures,
				TopErrors: []errorCountJSON{}}
			j.Consumer, j.ConsumerBase64 = jsonBytes(s.Consumer)
			for _, e := range s.TopErrors {
				j.TopErrors = append(j.TopErrors, errorCountJSON{Error: e.Error, Messages: e.Count})
			}
			j.DeadLetterGroups = groupsJSON(groups[i])
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
		for _, g := range groups[i] {
			fmt.Fprintf(tw, "  %d×\t%s\n", g.Count, groupText(g.Group))
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
