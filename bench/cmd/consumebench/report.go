package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// cell is one mode's measurements on one broker, store and -rows.
type cell struct {
	Broker     string  `json:"broker"`
	Store      string  `json:"store"`
	Rows       int     `json:"rows"`
	Mode       string  `json:"mode"`
	Rounds     int     `json:"rounds"`
	Mean       float64 `json:"msgs_per_s_mean"`
	Min        float64 `json:"msgs_per_s_min"`
	Max        float64 `json:"msgs_per_s_max"`
	VsConsume  float64 `json:"vs_consume,omitempty"`
	VsAck      float64 `json:"vs_ack,omitempty"`
	VsAckBatch float64 `json:"vs_ackbatch,omitempty"`
	// VsPlain is the ratio to the mode that does the same writes without
	// the inbox (plainOf).
	VsPlain   float64 `json:"vs_plain,omitempty"`
	PlainMode string  `json:"plain_mode,omitempty"`
	// TripsPerMsg are the round trips to PostgreSQL per message, over
	// the rounds; 0 where they are not counted.
	TripsPerMsg float64 `json:"round_trips_per_msg,omitempty"`
	Deadlocks   int64   `json:"deadlocks"`
	Retries     int64   `json:"retries"`
	Duplicates  int64   `json:"duplicates"`
	Left        int64   `json:"left"`
	// TimedOut lists the messages processed by the measurements that hit
	// -max-seconds.
	TimedOut []int64 `json:"timed_out,omitempty"`
	Failed   int     `json:"failed_checks,omitempty"`
}

// plainOf maps an inbox mode to the mode that does the same writes, in
// transactions of the same size, without the inbox: its database's own
// limit.
var plainOf = map[string]string{
	"consume":      "plain",
	"queued":       "plain",
	"watermill":    "plain",
	"batch":        "plaineach",
	"fixed":        "plaineach",
	"consumebatch": "plainbatch",
}

type groupKey struct {
	broker, store string
	rows          int
}

// summarize folds the measurements into cells, in the order they ran.
func summarize(results []*result) []*cell {
	var cells []*cell
	index := map[string]*cell{}
	tripSum, atStop := map[*cell]int64{}, map[*cell]int64{}
	for _, r := range results {
		k := fmt.Sprintf("%s/%s/%d/%s", r.Broker, r.Store, r.Rows, r.Mode)
		c := index[k]
		if c == nil {
			c = &cell{Broker: r.Broker, Store: r.Store, Rows: r.Rows, Mode: r.Mode, Min: r.Rate, Max: r.Rate}
			index[k] = c
			cells = append(cells, c)
		}
		c.Rounds++
		c.Mean += r.Rate
		c.Min, c.Max = min(c.Min, r.Rate), max(c.Max, r.Rate)
		c.Deadlocks += r.Deadlocks
		c.Retries += r.Retries
		c.Duplicates += r.Duplicates
		c.Left += r.Left
		if r.TimedOut {
			c.TimedOut = append(c.TimedOut, r.Processed)
		}
		if r.Traffic != nil {
			tripSum[c] += r.Traffic.Trips
			atStop[c] += r.AtStop
		}
		if len(r.Problems) > 0 {
			c.Failed++
		}
	}
	for _, c := range cells {
		c.Mean /= float64(c.Rounds)
		if atStop[c] > 0 {
			c.TripsPerMsg = float64(tripSum[c]) / float64(atStop[c])
		}
	}
	for _, c := range cells {
		for _, other := range cells {
			if other.Broker != c.Broker || other.Store != c.Store || other.Rows != c.Rows || other.Mean == 0 {
				continue
			}
			switch other.Mode {
			case "consume":
				c.VsConsume = c.Mean / other.Mean
			case "ack":
				c.VsAck = c.Mean / other.Mean
			case "ackbatch":
				c.VsAckBatch = c.Mean / other.Mean
			}
			if other.Mode == plainOf[c.Mode] {
				c.VsPlain, c.PlainMode = c.Mean/other.Mean, other.Mode
			}
		}
	}
	return cells
}

// printTables writes a table per broker, store and -rows.
func printTables(w io.Writer, cells []*cell, o *options) {
	var keys []groupKey
	groups := map[groupKey][]*cell{}
	for _, c := range cells {
		k := groupKey{c.Broker, c.Store, c.Rows}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], c)
	}
	for _, k := range keys {
		rows := fmt.Sprintf("%d hot account rows", k.rows)
		if k.rows == 0 {
			rows = "an account row per message"
		}
		fmt.Fprintf(w, "\n%s + %s, %s: %d messages, %d workers, batch %d, prefetch %d; deadlocks, retries and left summed over the rounds\n",
			k.broker, k.store, rows, o.messages, o.workers, o.batch, o.prefetch)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tmsgs/s mean\t(min–max)\t× consume\t× ack\t× ackbatch\t× no inbox\ttrips/msg\tdeadlocks\tretries\tleft\t")
		for _, c := range groups[k] {
			fmt.Fprintf(tw, "%s\t%.0f\t(%.0f–%.0f)\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t %s\n", c.Mode, c.Mean, c.Min, c.Max,
				ratio(c.VsConsume), ratio(c.VsAck), ratio(c.VsAckBatch), vsPlain(c), trips(c), deadlocks(c), c.Retries, c.Left, note(c))
		}
		_ = tw.Flush()
		fmt.Fprintln(w, "× no inbox: to the same writes without the inbox (consume, queued, watermill: plain; batch, fixed: plaineach; consumebatch: plainbatch)")
	}
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func vsPlain(c *cell) string {
	if c.PlainMode == "" {
		return "-"
	}
	return ratio(c.VsPlain) + " " + c.PlainMode
}

func trips(c *cell) string {
	if c.TripsPerMsg == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.TripsPerMsg)
}

func deadlocks(c *cell) string {
	if c.Mode == "ack" || c.Mode == "ackbatch" {
		return "-"
	}
	return fmt.Sprint(c.Deadlocks)
}

func note(c *cell) string {
	var parts []string
	for _, n := range c.TimedOut {
		parts = append(parts, fmt.Sprintf("timed out after %d messages", n))
	}
	if c.Failed > 0 {
		parts = append(parts, fmt.Sprintf("CHECK FAILED in %d of %d rounds", c.Failed, c.Rounds))
	}
	return strings.Join(parts, "; ")
}

// printFailures lists every failed check, and reports whether there was
// one.
func printFailures(w io.Writer, results []*result) bool {
	failed := false
	for _, r := range results {
		for _, p := range r.Problems {
			if !failed {
				fmt.Fprintln(w, "\n!!!!!!!! CHECKS FAILED !!!!!!!!")
				failed = true
			}
			fmt.Fprintf(w, "!!! %s %s rows=%d %s round %d: %s\n", r.Broker, r.Store, r.Rows, r.Mode, r.Round, p)
		}
	}
	return failed
}

func writeJSON(path string, o *options, results []*result, cells []*cell) error {
	out := struct {
		Messages     int       `json:"messages"`
		Workers      int       `json:"workers"`
		Batch        int       `json:"batch"`
		Prefetch     int       `json:"prefetch"`
		MaxSeconds   float64   `json:"max_seconds"`
		Summary      []*cell   `json:"summary"`
		Measurements []*result `json:"measurements"`
	}{o.messages, o.workers, o.batch, o.prefetch, o.maxTime.Seconds(), cells, results}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
