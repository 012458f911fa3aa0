package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/bench/internal/ledger"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// childEnv names the environment variable that makes the command a
// consumer process: it holds the child's spec as JSON.
const childEnv = "SCALEOUT_CHILD"

// spec is what a consumer process runs.
type spec struct {
	Mode     string   `json:"mode"`
	Broker   string   `json:"broker,omitempty"` // "" for the baselines
	DB       string   `json:"db"`
	Schema   string   `json:"schema"`
	Workers  int      `json:"workers"`
	Batch    int      `json:"batch"`
	Prefetch int      `json:"prefetch"`
	Kafka    []string `json:"kafka,omitempty"`
	Topic    string   `json:"topic,omitempty"`
	NATS     string   `json:"nats,omitempty"`
	Stream   string   `json:"stream,omitempty"`
	// MaxAckPending is the NATS consumer's, the same in every process.
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// The baselines regenerate the workload and take their share of it:
	// the messages i with i % Procs == Index.
	Prefix   string `json:"prefix,omitempty"`
	Messages int    `json:"messages,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	Index    int    `json:"index,omitempty"`
	Procs    int    `json:"procs,omitempty"`
	Verbose  bool   `json:"verbose,omitempty"`
	// CPUProfile is where the process writes its CPU profile, if set.
	CPUProfile string `json:"cpu_profile,omitempty"`
}

// The NATS durable and the Kafka group that all processes share, and the
// timings that bound a SIGKILLed process's cost: its partitions move on
// after kafkaSession rather than franz-go's default 45 s, and its NATS
// deliveries return after natsAckWait rather than 30 s. Consume extends
// a delivery's lease every AckWait/3, so handlers may take longer.
const (
	durable          = "scaleout"
	kafkaGroup       = "scaleout"
	kafkaSession     = time.Second
	kafkaHeartbeat   = 100 * time.Millisecond
	kafkaRebalance   = 3 * time.Second
	natsAckWait      = 2 * time.Second
	reportInterval   = 100 * time.Millisecond
	childPoolExtra   = 2
	baselineAttempts = 20
)

// childStats is what a child reports on its stdout: its outcomes so far.
type childStats struct {
	Processed, Duplicates, Retries, DeadLettered int64
}

func (s childStats) String() string {
	return fmt.Sprintf("stat %d %d %d %d", s.Processed, s.Duplicates, s.Retries, s.DeadLettered)
}

func parseStats(line string) (childStats, bool) {
	var s childStats
	_, err := fmt.Sscanf(line, "stat %d %d %d %d", &s.Processed, &s.Duplicates, &s.Retries, &s.DeadLettered)
	return s, err == nil
}

// childMain runs a consumer process from its spec and returns its exit
// status. It prints "ready" once it consumes (a baseline then waits for
// "go" on stdin), its stats every reportInterval, and "exit" last.
func childMain(specJSON string) int {
	var s spec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		fmt.Fprintln(os.Stderr, "scaleout child:", err)
		return 2
	}
	// The handler stays to the end: a SIGTERM that comes as the process
	// exits on its own must not kill it.
	ctx, _ := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	if s.CPUProfile != "" {
		f, err := os.Create(s.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "scaleout child: cpu profile:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if err := runChild(ctx, &s, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "scaleout child %s %s %d: %v\n", s.Broker, s.Mode, s.Index, err)
		return 1
	}
	return 0
}

// reporter prints a child's lines, one writer at a time.
type reporter struct {
	mu  sync.Mutex
	out *os.File
}

func (r *reporter) line(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(r.out, s)
}

// every prints stats() every reportInterval until stop is closed, then
// once more.
func (r *reporter) every(stop <-chan struct{}, stats func() childStats) {
	t := time.NewTicker(reportInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.line(stats().String())
		case <-stop:
			r.line(stats().String())
			return
		}
	}
}

func runChild(ctx context.Context, s *spec, out *os.File) error {
	cfg, err := pgxpool.ParseConfig(s.DB)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(s.Workers + childPoolExtra)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	level := slog.LevelWarn
	if s.Verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	r := &reporter{out: out}
	var err2 error
	if isBaseline(s.Mode) {
		err2 = runBaseline(ctx, s, pool, r)
	} else {
		err2 = runInbox(ctx, s, pool, r, logger)
	}
	r.line("exit")
	if ctx.Err() != nil {
		return nil // stopped, perhaps while it started: the run is over
	}
	return err2
}

// runInbox consumes the broker with the inbox, as a user's consumer
// process does, until ctx is done.
func runInbox(ctx context.Context, s *spec, pool *pgxpool.Pool, r *reporter, logger *slog.Logger) error {
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: s.Schema}})
	if err != nil {
		return err
	}
	counts := &inbox.Counts{}
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "scaleout", Logger: logger, Hooks: []inbox.Hook{counts}})
	if err != nil {
		return err
	}
	src, closeSrc, err := openSource(ctx, s, logger)
	if err != nil {
		return err
	}
	defer closeSrc()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.every(stop, func() childStats {
			return childStats{counts.Processed.Load(), counts.Duplicates.Load(), counts.Retries.Load(), counts.DeadLettered.Load()}
		})
	}()
	r.line("ready")
	err = consume(ctx, s, ib, src, logger)
	close(stop)
	<-done
	return err
}

// consume runs s.Mode's consumer on src until ctx is done.
func consume(ctx context.Context, s *spec, ib *inbox.Inbox[pgx.Tx], src broker.Source, logger *slog.Logger) error {
	pg := ledger.NewPG(s.Schema)
	handler := func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		e, err := ledger.ParseEntry(msg.ID, msg.Payload)
		if err != nil {
			return inbox.Permanent(err)
		}
		return pg.Record(ctx, tx, e)
	}
	cc := &inbox.ConsumerConfig{Workers: s.Workers, Logger: logger}
	switch s.Mode {
	case "batch":
		cc.BatchSize = s.Batch
		return inbox.Consume(ctx, ib, src, handler, cc)
	case "consumebatch":
		cc.BatchSize = s.Batch
		return inbox.ConsumeBatch(ctx, ib, src, func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
			es := make([]ledger.Entry, len(msgs))
			for i, msg := range msgs {
				e, err := ledger.ParseEntry(msg.ID, msg.Payload)
				if err != nil {
					return inbox.Permanent(err)
				}
				es[i] = e
			}
			return pg.RecordBatch(ctx, tx, es)
		}, cc)
	case "consume":
		return inbox.Consume(ctx, ib, src, handler, cc)
	case "queued":
		return inbox.ConsumeQueued(ctx, ib, src, func(_ context.Context, q *inbox.Queue, msg *inbox.Message) error {
			e, err := ledger.ParseEntry(msg.ID, msg.Payload)
			if err != nil {
				return inbox.Permanent(err)
			}
			pg.Queue(q, e)
			return nil
		}, cc)
	}
	return fmt.Errorf("unknown mode %q", s.Mode)
}

// openSource opens the process's consumer on the shared group or durable.
func openSource(ctx context.Context, s *spec, logger *slog.Logger) (broker.Source, func(), error) {
	switch s.Broker {
	case "kafka":
		src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: s.Kafka, Topic: s.Topic, Group: kafkaGroup, Logger: logger,
			Options: []kgo.Opt{kgo.SessionTimeout(kafkaSession), kgo.HeartbeatInterval(kafkaHeartbeat),
				kgo.RebalanceTimeout(kafkaRebalance)}})
		if err != nil {
			return nil, nil, err
		}
		return src, func() { _ = src.Close() }, nil
	case "nats":
		nc, err := nats.Connect(s.NATS, nats.Timeout(2*time.Second), nats.Name("scaleout"))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: s.Stream, Durable: durable, PullBatch: s.Prefetch,
			AckWait: natsAckWait, MaxAckPending: s.MaxAckPending, Logger: logger})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return src, func() { _ = src.Close(); nc.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown broker %q", s.Broker)
}

// runBaseline writes the process's share of the workload without inbox
// or broker, -workers transactions at a time, once "go" arrives on stdin.
func runBaseline(ctx context.Context, s *spec, pool *pgxpool.Pool, r *reporter) error {
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	w := ledger.New(s.Prefix, s.Messages, s.Rows)
	var mine []int
	for i := s.Index; i < s.Messages; i += s.Procs {
		mine = append(mine, i)
	}
	size := s.Batch
	if s.Mode == "plain" {
		size = 1
	}
	pg := ledger.NewPG(s.Schema)
	write := map[string]func(context.Context, pgx.Tx, []ledger.Entry) error{
		"plain": pg.RecordEach, "plaineach": pg.RecordEach, "plainbatch": pg.RecordBatch}[s.Mode]
	r.line("ready")
	if err := waitGo(ctx); err != nil {
		return err
	}
	var processed, retries atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.every(stop, func() childStats { return childStats{Processed: processed.Load(), Retries: retries.Load()} })
	}()
	err := baselineWorkers(ctx, s.Workers, len(mine), size, func(ctx context.Context, from, to int) error {
		es := make([]ledger.Entry, 0, to-from)
		for _, i := range mine[from:to] {
			es = append(es, w.Entry(i))
		}
		for attempt := 1; ; attempt++ {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return write(ctx, tx, es) })
			if err == nil {
				processed.Add(int64(len(es)))
				return nil
			}
			if ctx.Err() != nil || attempt == baselineAttempts {
				return err
			}
			retries.Add(int64(len(es))) // a deadlock or a serialization failure on hot rows
		}
	})
	close(stop)
	<-done
	return err
}

// baselineWorkers runs n goroutines that take chunks of size of [0, total)
// in turn and hand them to fn; the first error stops them.
func baselineWorkers(ctx context.Context, n, total, size int, fn func(ctx context.Context, from, to int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for g := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				from := int(next.Add(int64(size))) - size
				if from >= total {
					return
				}
				if err := fn(ctx, from, min(from+size, total)); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitGo waits for the line "go" on stdin, or for ctx.
func waitGo(ctx context.Context) error {
	got := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "go" {
			err = fmt.Errorf("stdin: %q, want go", line)
		}
		got <- err
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
