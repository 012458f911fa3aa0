package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inbox/bench/internal/cli"
)

// The modes. An inbox mode runs on every broker; a baseline runs once
// per N, with no broker.
var (
	inboxModes    = []string{"batch", "consumebatch", "consume", "queued"}
	baselineModes = []string{"plaineach", "plainbatch", "plain"}
	allModes      = append(slices.Clone(baselineModes), inboxModes...)
	allBrokers    = []string{"kafka", "nats"}
)

func isBaseline(mode string) bool { return slices.Contains(baselineModes, mode) }

// baselineOf is the baseline an inbox mode is compared with: the same
// writes in the same transactions, without inbox or broker.
func baselineOf(mode string) string {
	switch mode {
	case "batch":
		return "plaineach"
	case "consumebatch":
		return "plainbatch"
	}
	return "plain"
}

// options are the command's flags.
type options struct {
	brokers, modes []string
	procs          []int
	messages       int
	workers        int
	batch          int
	prefetch       int
	partitions     int
	rows           int
	rounds         int
	stagger        time.Duration
	kill           bool
	maxTime        time.Duration
	jsonFile       string
	cpuProfile     string
	childProfile   string
	verbose        bool

	pgURL, natsURL string
	logger         *slog.Logger
	// self is the command that starts a consumer process: this program,
	// with childEnv set.
	self []string
	// childStderr receives the children's stderr.
	childStderr io.Writer
}

// prefetchFor is mode's NATS PullBatch: -prefetch, else as docs/brokers.md
// advises, Workers × BatchSize for batches and near Workers otherwise.
// Prefetched messages wait in the client with their AckWait running: a
// larger one makes redeliveries when N processes share the durable.
func (o *options) prefetchFor(mode string) int {
	switch {
	case o.prefetch > 0:
		return o.prefetch
	case mode == "batch", mode == "consumebatch":
		return o.workers * o.batch
	}
	return 2 * o.workers
}

// maxProcs is the largest N.
func (o *options) maxProcs() int { return slices.Max(o.procs) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("scaleout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{childStderr: stderr}
	brokers := fs.String("brokers", "kafka,nats", "brokers: kafka, nats")
	modes := fs.String("modes", strings.Join(allModes, ","), "modes: "+strings.Join(allModes, ", "))
	procs := fs.String("procs", "1,2,4,8", "numbers of consumer processes")
	fs.IntVar(&o.messages, "messages", 10000, "messages per measurement")
	fs.IntVar(&o.workers, "workers", 4, "workers of each process")
	fs.IntVar(&o.batch, "batch", 50, "BatchSize of batch and consumebatch; messages per transaction of plaineach and plainbatch")
	fs.IntVar(&o.prefetch, "prefetch", 0, "NATS PullBatch of each process; 0: -workers × -batch for batch, 2 × -workers otherwise")
	fs.IntVar(&o.partitions, "partitions", 32, "partitions of the Kafka topic")
	fs.IntVar(&o.rows, "rows", 0, "hot account rows; 0: one row per message")
	fs.IntVar(&o.rounds, "rounds", 2, "measurements of each mode and N, interleaved")
	fs.DurationVar(&o.stagger, "stagger", 250*time.Millisecond, "delay between the starts of the inbox modes' processes")
	fs.BoolVar(&o.kill, "kill", true, "SIGKILL a process mid-run and start a replacement, when N >= 2")
	maxSeconds := fs.Float64("max-seconds", 120, "cap of one measurement, in seconds")
	fs.StringVar(&o.jsonFile, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the parent's CPU profile to this file")
	fs.StringVar(&o.childProfile, "child-cpuprofile", "", "write each consumer process's CPU profile into this folder")
	fs.StringVar(&o.pgURL, "pg", envOr("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	fs.StringVar(&o.natsURL, "nats", envOr("INBOX_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL")
	fs.BoolVar(&o.verbose, "v", false, "log the inbox's INFO lines too")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	o.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o.maxTime = time.Duration(*maxSeconds * float64(time.Second))
	var err error
	if o.brokers, err = cli.List(*brokers, allBrokers); err != nil {
		return nil, fmt.Errorf("-brokers: %w", err)
	}
	if o.modes, err = cli.List(*modes, allModes); err != nil {
		return nil, fmt.Errorf("-modes: %w", err)
	}
	for _, s := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-procs: %q is not a number of processes", s)
		}
		o.procs = append(o.procs, n)
	}
	if o.messages < 1 || o.workers < 1 || o.batch < 1 || o.prefetch < 0 || o.partitions < 1 || o.rounds < 1 ||
		o.rows < 0 || o.maxTime <= 0 {
		return nil, errors.New("-messages, -workers, -batch, -prefetch, -partitions, -rounds and -max-seconds must be positive")
	}
	return o, nil
}

func main() {
	if s := os.Getenv(childEnv); s != "" {
		os.Exit(childMain(s))
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		os.Exit(2)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		os.Exit(2)
	}
	o.self = []string{exe}
	os.Exit(runMain(o))
}

// runMain runs the measurements, prints the tables and returns the exit
// status: 1 when a check failed.
func runMain(o *options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var profile *os.File
	if o.cpuProfile != "" {
		var err error
		if profile, err = os.Create(o.cpuProfile); err == nil {
			err = pprof.StartCPUProfile(profile)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "scaleout: -cpuprofile:", err)
			return 2
		}
	}
	start := time.Now()
	results, err := run(ctx, o, os.Stderr)
	if profile != nil {
		pprof.StopCPUProfile()
		_ = profile.Close()
	}
	cells := summarize(results)
	printTables(os.Stdout, cells, o)
	fmt.Fprintf(os.Stdout, "\nrun took %s\n", time.Since(start).Round(time.Second))
	if o.jsonFile != "" {
		if err := writeJSON(o.jsonFile, o, results, cells); err != nil {
			fmt.Fprintln(os.Stderr, "scaleout:", err)
		}
	}
	failed := printFailures(os.Stdout, results, o.rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}
