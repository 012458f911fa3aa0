package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// cell is a mode on a broker at one N, over the rounds.
type cell struct {
	Broker     string  `json:"broker,omitempty"`
	Mode       string  `json:"mode"`
	Procs      int     `json:"procs"`
	Mean       float64 `json:"msgs_per_s"`
	Min        float64 `json:"min"`
	Max        float64 `json:"max"`
	Rounds     int     `json:"rounds"`
	Baseline   string  `json:"baseline,omitempty"`
	VsBaseline float64 `json:"vs_baseline,omitempty"` // Mean / the baseline's Mean at the same N
	// Steady is the mean of the rounds' steady msgs/s (those not 0), and
	// VsSteady its ratio to the baseline's Mean at the same N.
	Steady    float64 `json:"steady_msgs_per_s"`
	VsSteady  float64 `json:"steady_vs_baseline,omitempty"`
	steadyN   int
	Kills     int                `json:"kills"`
	Redeliv   int64              `json:"redeliveries"`
	Retries   int64              `json:"retries"`
	Failed    int                `json:"failed"`
	CPU       map[string]float64 `json:"cpu"`   // mean shares of all cores
	Waits     map[string]float64 `json:"waits"` // mean backends per sample
	PG        pgStats            `json:"pg"`    // summed over the rounds
	Seconds   float64            `json:"seconds"`
	Processed int64              `json:"processed"`
}

func (c *cell) name() string {
	if c.Broker == "" {
		return "db/" + c.Mode
	}
	return c.Broker + "/" + c.Mode
}

type cellKey struct {
	broker, mode string
	procs        int
}

// summarize groups the results by broker, mode and N, and compares each
// inbox mode with its baseline at the same N.
func summarize(results []*result) []*cell {
	byKey := map[cellKey]*cell{}
	var cells []*cell
	for _, r := range results {
		k := cellKey{r.Broker, r.Mode, r.Procs}
		c, ok := byKey[k]
		if !ok {
			c = &cell{Broker: r.Broker, Mode: r.Mode, Procs: r.Procs, Min: math.Inf(1), CPU: map[string]float64{},
				Waits: map[string]float64{}}
			byKey[k] = c
			cells = append(cells, c)
		}
		c.add(r)
	}
	for _, c := range cells {
		c.finish()
	}
	for _, c := range cells {
		if isBaseline(c.Mode) {
			continue
		}
		c.Baseline = baselineOf(c.Mode)
		if b := byKey[cellKey{"", c.Baseline, c.Procs}]; b != nil && b.Mean > 0 {
			c.VsBaseline = c.Mean / b.Mean
			c.VsSteady = c.Steady / b.Mean
		}
	}
	return cells
}

func (c *cell) add(r *result) {
	if len(r.Problems) > 0 || r.TimedOut {
		c.Failed++
	}
	c.Rounds++
	c.Mean += r.Rate
	if r.Steady > 0 {
		c.Steady += r.Steady
		c.steadyN++
	}
	c.Min = min(c.Min, r.Rate)
	c.Max = max(c.Max, r.Rate)
	c.Kills += r.Kills
	c.Redeliv += r.Duplicates
	c.Retries += r.Retries
	c.Seconds += r.Seconds
	c.Processed += r.Processed
	c.PG = c.PG.add(r.PG)
	if r.Sample != nil {
		for k, v := range r.Sample.CPU {
			c.CPU[k] += v
		}
		for k, v := range r.Sample.Waits {
			c.Waits[k] += v
		}
	}
}

// finish turns the sums of add into means.
func (c *cell) finish() {
	n := float64(c.Rounds)
	c.Mean /= n
	if c.steadyN > 0 {
		c.Steady /= float64(c.steadyN)
	}
	for k := range c.CPU {
		c.CPU[k] /= n
	}
	for k := range c.Waits {
		c.Waits[k] /= n
	}
}

func (s pgStats) add(t pgStats) pgStats {
	return pgStats{s.WALRecords + t.WALRecords, s.WALBytes + t.WALBytes, s.WALWrites + t.WALWrites, s.WALSyncs + t.WALSyncs,
		s.Commits + t.Commits, s.Rollbacks + t.Rollbacks, s.Deadlocks + t.Deadlocks}
}

// find returns the cell of broker, mode and N, or nil.
func find(cells []*cell, broker, mode string, procs int) *cell {
	for _, c := range cells {
		if c.Broker == broker && c.Mode == mode && c.Procs == procs {
			return c
		}
	}
	return nil
}

// best returns the cell of broker and mode with the highest mean, or nil.
func best(cells []*cell, broker, mode string) *cell {
	var b *cell
	for _, c := range cells {
		if c.Broker == broker && c.Mode == mode && (b == nil || c.Mean > b.Mean) {
			b = c
		}
	}
	return b
}

// bestSteady returns the cell of broker and mode with the highest steady
// rate, or nil.
func bestSteady(cells []*cell, broker, mode string) *cell {
	var b *cell
	for _, c := range cells {
		if c.Broker == broker && c.Mode == mode && c.Steady > 0 && (b == nil || c.Steady > b.Steady) {
			b = c
		}
	}
	return b
}

// printTables prints the curve, the goal's ratios and the evidence.
func printTables(w io.Writer, cells []*cell, o *options) {
	if len(cells) == 0 {
		return
	}
	fmt.Fprintf(w, "\nscaleout %s: %d messages per measurement, -workers %d per process, -batch %d, -rows %d, %d round(s), PostgreSQL\n",
		time.Now().UTC().Format("2006-01-02"), o.messages, o.workers, o.batch, o.rows, o.rounds)
	printCurve(w, cells, o)
	printGoal(w, cells, o)
	printEvidence(w, cells)
}

// printCurve prints msgs/s per N: the baselines, then each broker's inbox
// modes with their ratio to the baseline at the same N.
func printCurve(w io.Writer, cells []*cell, o *options) {
	fmt.Fprintln(w, "\nmsgs/s, mean (min-max) over the rounds; an inbox mode's × is to its baseline at the same N")
	fmt.Fprintln(w, "(batch to db/plaineach, consumebatch to db/plainbatch, consume and queued to db/plain; the inbox modes under rebalances and a kill at N >= 2)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "mode"
	for _, n := range o.procs {
		head += fmt.Sprintf("\tN=%d", n)
	}
	fmt.Fprintln(tw, head+"\t")
	for _, b := range append([]string{""}, o.brokers...) {
		for _, m := range o.modes {
			if (b == "") != isBaseline(m) {
				continue
			}
			line := b + "/" + m
			if b == "" {
				line = "db/" + m
			}
			for _, n := range o.procs {
				c := find(cells, b, m, n)
				line += "\t" + rateText(c)
			}
			fmt.Fprintln(tw, line+"\t")
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nsteady msgs/s: the inbox modes from all N processes ready to the kill (or the end), × to the baseline at the same N")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, head+"\t")
	for _, b := range o.brokers {
		for _, m := range o.modes {
			if isBaseline(m) {
				continue
			}
			line := b + "/" + m
			for _, n := range o.procs {
				line += "\t" + steadyText(find(cells, b, m, n))
			}
			fmt.Fprintln(tw, line+"\t")
		}
	}
	_ = tw.Flush()
}

func steadyText(c *cell) string {
	if c == nil || c.Steady == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f %.2f×", c.Steady, c.VsSteady)
}

func rateText(c *cell) string {
	if c == nil {
		return "-"
	}
	s := fmt.Sprintf("%.0f (%.0f-%.0f)", c.Mean, c.Min, c.Max)
	if c.VsBaseline > 0 {
		s += fmt.Sprintf(" %.2f×", c.VsBaseline)
	}
	if c.Failed > 0 {
		s += fmt.Sprintf(" FAILED %d", c.Failed)
	}
	return s
}

// printGoal prints each inbox mode's best N against its baseline's best
// N: the goal is 0.8× or more, with 0 doubles.
func printGoal(w io.Writer, cells []*cell, o *options) {
	fmt.Fprintln(w, "\nthe best N of each inbox mode against the best N of its baseline (goal: >= 0.80×, 0 doubles)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tbest N\tmsgs/s\tbaseline\tits best N\tmsgs/s\t×\tvs db/plainbatch's best\tsteady: best N\tmsgs/s\t×\tkills\tredeliveries\tfailed checks\t")
	for _, b := range o.brokers {
		for _, m := range o.modes {
			if isBaseline(m) {
				continue
			}
			c, base, pb := best(cells, b, m), best(cells, "", baselineOf(m)), best(cells, "", "plainbatch")
			if c == nil {
				continue
			}
			kills, redeliv, failed := 0, int64(0), 0
			for _, x := range cells {
				if x.Broker == b && x.Mode == m {
					kills, redeliv, failed = kills+x.Kills, redeliv+x.Redeliv, failed+x.Failed
				}
			}
			line := fmt.Sprintf("%s/%s\t%d\t%.0f", b, m, c.Procs, c.Mean)
			if base != nil {
				line += fmt.Sprintf("\tdb/%s\t%d\t%.0f\t%.2f×", base.Mode, base.Procs, base.Mean, c.Mean/base.Mean)
			} else {
				line += "\t-\t-\t-\t-"
			}
			if pb != nil {
				line += fmt.Sprintf("\t%.2f×", c.Mean/pb.Mean)
			} else {
				line += "\t-"
			}
			if st := bestSteady(cells, b, m); st != nil && base != nil {
				line += fmt.Sprintf("\t%d\t%.0f\t%.2f×", st.Procs, st.Steady, st.Steady/base.Mean)
			} else {
				line += "\t-\t-\t-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", line, kills, redeliv, failed)
		}
	}
	_ = tw.Flush()
}

// printEvidence prints, per mode and N, where the time went: CPU shares
// of the 2 cores, the backends' states, commits and WAL syncs.
func printEvidence(w io.Writer, cells []*cell) {
	fmt.Fprintln(w, "\nwhere the time goes, per mode and N (means over the rounds)")
	fmt.Fprintln(w, "CPU: % of all cores (children = the consumer processes, pg = every postgres process, parent = this process with kfake,")
	fmt.Fprintln(w, "  nats = nats-server, busy and iowait = the whole machine's); backends: the children's PostgreSQL backends, mean number")
	fmt.Fprintln(w, "  per 100 ms sample, by state: cpu = active, no wait event; client = in a transaction, waiting for the client's next")
	fmt.Fprintln(w, "  statement; lock = Lock:*; lwlock = LWLock:* but WALWrite; wal = IO:WALSync, IO:WALWrite, LWLock:WALWrite;")
	fmt.Fprintln(w, "  commits/sync = the run database's commits per WAL fsync of the cluster (pg_stat_wal counts other databases too);")
	fmt.Fprintln(w, "  µs/msg: CPU time per message of the children, of PostgreSQL, of the broker (parent and nats) and of all three")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tN\tmsgs/s\tchildren\tpg\tparent\tnats\tbusy\tiowait\t| µs/msg: children\tpg\tbroker\tall\t| cpu\tclient\tlock\tlwlock\twal\tio\tother\tidle\t| commits/s\tsyncs/s\tcommits/sync\tWAL B/msg\t| kills\tredeliv\tretries\ttop waits\t")
	sorted := slices.Clone(cells)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].name() != sorted[j].name() {
			return order(sorted[i]) < order(sorted[j])
		}
		return sorted[i].Procs < sorted[j].Procs
	})
	for _, c := range sorted {
		g := groupWaits(c.Waits)
		secs := c.Seconds
		us := func(share float64) float64 { return cpuPerMessage(share, secs, c.Processed) }
		children, pg, brk := us(c.CPU["children"]), us(c.CPU["postgres"]), us(c.CPU["parent"]+c.CPU["nats"])
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t| %.0f\t%.0f\t%.0f\t%.0f\t| %.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t| %.0f\t%.0f\t%s\t%s\t| %d\t%d\t%d\t%s\t\n",
			c.name(), c.Procs, c.Mean, pct(c.CPU["children"]), pct(c.CPU["postgres"]), pct(c.CPU["parent"]), pct(c.CPU["nats"]),
			pct(c.CPU["machine"]), pct(c.CPU["iowait"]), children, pg, brk, children+pg+brk,
			g["cpu"], g["client"], g["lock"], g["lwlock"], g["wal"], g["io"], g["other"], g["idle"],
			perSec(c.PG.Commits, secs), perSec(c.PG.WALSyncs, secs), ratioText(c.PG.Commits, c.PG.WALSyncs),
			ratioText(c.PG.WALBytes, c.Processed), c.Kills, c.Redeliv, c.Retries, topWaits(c.Waits, 3))
	}
	_ = tw.Flush()
}

// order sorts the baselines first, then the brokers' modes.
func order(c *cell) string {
	if c.Broker == "" {
		return "0" + strings.Repeat(" ", 10) + fmt.Sprint(slices.Index(allModes, c.Mode))
	}
	return "1" + c.Broker + fmt.Sprint(slices.Index(allModes, c.Mode))
}

// cpuPerMessage is the CPU time, in µs, that a share of all cores for
// secs costs each of n messages.
func cpuPerMessage(share, secs float64, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return share * float64(runtime.NumCPU()) * secs * 1e6 / float64(n)
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

func perSec(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

func ratioText(a, b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(a)/float64(b))
}

// groupWaits sums the backends' states into the evidence's columns.
func groupWaits(waits map[string]float64) map[string]float64 {
	g := map[string]float64{}
	for k, v := range waits {
		switch {
		case k == "CPU":
			g["cpu"] += v
		case k == "idle":
			g["idle"] += v
		case k == "in tx (client)" || strings.HasPrefix(k, "Client:"):
			g["client"] += v
		case k == "IO:WALSync" || k == "IO:WALWrite" || k == "LWLock:WALWrite":
			g["wal"] += v
		case strings.HasPrefix(k, "Lock:"):
			g["lock"] += v
		case strings.HasPrefix(k, "LWLock:"):
			g["lwlock"] += v
		case strings.HasPrefix(k, "IO:"):
			g["io"] += v
		default:
			g["other"] += v
		}
	}
	return g
}

// topWaits names the n commonest wait events, idle and CPU left out.
func topWaits(waits map[string]float64, n int) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range waits {
		if k != "idle" && k != "CPU" && v >= 0.05 {
			all = append(all, kv{k, v})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var parts []string
	for _, x := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", x.k, x.v))
	}
	return strings.Join(parts, ", ")
}

// printFailures prints every failed check; it reports whether any did.
func printFailures(w io.Writer, results []*result, rounds int) bool {
	failed := false
	for _, r := range results {
		if len(r.Problems) > 0 || r.TimedOut {
			if !failed {
				fmt.Fprintln(w, "\nFAILED:")
			}
			failed = true
			fmt.Fprintln(w, "  "+r.line(rounds))
		}
	}
	return failed
}

func writeJSON(path string, o *options, results []*result, cells []*cell) error {
	out := map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "messages": o.messages, "workers": o.workers, "batch": o.batch,
		"rows": o.rows, "rounds": o.rounds, "procs": o.procs, "results": results, "cells": cells,
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
