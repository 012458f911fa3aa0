package kafkacluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// The child's environment, set by the parent (see childEnv).
const (
	envChild    = "INBOX_KAFKAC_CHILD" // the child's name; set: this process is a consumer
	envBrokers  = "INBOX_KAFKAC_BROKERS"
	envTopic    = "INBOX_KAFKAC_TOPIC"
	envGroup    = "INBOX_KAFKAC_GROUP"
	envSchema   = "INBOX_KAFKAC_SCHEMA"
	envBalancer = "INBOX_KAFKAC_BALANCER"
	envInstance = "INBOX_KAFKAC_INSTANCE" // static membership's instance ID, or empty
)

// The consumers' settings: batches of a partition's records, two workers
// per process, and a session short enough that a killed member's
// partitions move within the test's time.
const (
	workers        = 2
	batchSize      = 16
	sessionTimeout = 1500 * time.Millisecond
	commitInterval = 200 * time.Millisecond
	// lockTimeout is short, so that a stalled child's claims make the
	// others' claims fail soon (see stall).
	lockTimeout = time.Second
)

// record is what the handler writes for each message, in its transaction.
// prev_ok tells whether the key's previous seq was committed (or written
// earlier in the same transaction) when this one was written: READ
// COMMITTED shows committed rows only. seq 0 has no previous one.
const record = `INSERT INTO ledger (id, part, key, seq, child, prev_ok)
VALUES ($1, $2, $3, $4, $5, $4 = 0 OR EXISTS (SELECT 1 FROM ledger WHERE key = $3 AND seq = $4 - 1))`

// upsertCounts stores a child's inbox.Counts, for the parent's report.
const upsertCounts = `INSERT INTO counts (child, processed, duplicates, retries, splits) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (child) DO UPDATE SET processed = $2, duplicates = $3, retries = $4, splits = $5`

// The lines a child prints: once it catches SIGUSR1 and SIGUSR2, and once
// its handler has run.
const (
	markReady    = "kafkac: ready"
	markHandling = "kafkac: handling"
)

// childMain runs a consumer until SIGTERM, which makes it leave the group
// cleanly. SIGUSR1 makes it kill itself with SIGKILL in its next handler
// call: in the middle of a batch, after the claim, before the COMMIT.
// SIGUSR2 makes it stop itself there with SIGSTOP.
func childMain(name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := consume(ctx, name)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // asked to leave while it was starting
	}
	return err
}

// consume consumes until ctx is done.
func consume(ctx context.Context, name string) error {
	// SIGUSR1: die in the next handler; SIGUSR2: stop there, until SIGCONT.
	var die, stall atomic.Bool
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				die.Store(true)
			} else {
				stall.Store(true)
			}
		}
	}()
	fmt.Println(markReady)
	var handling sync.Once
	// A bound, so that an orphan cannot outlive the test for long.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()

	cfg, err := pgxpool.ParseConfig(pgenv.DSN())
	if err != nil {
		return err
	}
	cfg.MaxConns = workers + 2
	cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv(envSchema)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: os.Getenv(envSchema)}})
	if err != nil {
		return err
	}
	counts := &inbox.Counts{}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", name)
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "kafkac", Hooks: []inbox.Hook{counts, retryLog{log}}, Logger: log, LockTimeout: lockTimeout})
	if err != nil {
		return err
	}
	src, err := kafka.NewSource(ctx, sourceConfig(log))
	if err != nil {
		return err
	}
	defer src.Close()
	go reportCounts(ctx, pool, name, counts)

	h := func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		handling.Do(func() { fmt.Println(markHandling) })
		if die.Load() {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		if stall.CompareAndSwap(true, false) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) // the transaction open, its claims held
		}
		var key string
		var part, seq int
		if _, err := fmt.Sscanf(string(m.Payload), "%s %d %d", &key, &part, &seq); err != nil {
			return inbox.Permanent(fmt.Errorf("payload %q: %w", m.Payload, err))
		}
		_, err := tx.Exec(ctx, record, m.ID, part, key, seq, name)
		return err
	}
	err = inbox.Consume(ctx, ib, src, h, &inbox.ConsumerConfig{Workers: workers, BatchSize: batchSize, Logger: log})
	// Leave the group, then report: the parent reads the counts after the
	// process exits.
	_ = src.Close()
	saveCounts(context.Background(), pool, name, counts)
	return err
}

// sourceConfig is the Source of the parent's cluster, topic and group,
// with the balancer and the membership it chose.
func sourceConfig(log *slog.Logger) *kafka.Config {
	opts := []kgo.Opt{
		kgo.SessionTimeout(sessionTimeout),
		kgo.HeartbeatInterval(sessionTimeout / 5),
		kgo.RebalanceTimeout(5 * time.Second),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.MetadataMinAge(100 * time.Millisecond), // moved leaders are found sooner
	}
	if os.Getenv(envBalancer) == "range" {
		opts = append(opts, kgo.Balancers(kgo.RangeBalancer())) // eager: every rebalance revokes everything
	}
	if id := os.Getenv(envInstance); id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	return &kafka.Config{Brokers: strings.Split(os.Getenv(envBrokers), ","), Topic: os.Getenv(envTopic),
		Group: os.Getenv(envGroup), CommitInterval: commitInterval, Options: opts, Logger: log}
}

// reportCounts saves counts every 250 ms, so that a killed child's counts
// are known up to its last quarter second.
func reportCounts(ctx context.Context, pool *pgxpool.Pool, name string, counts *inbox.Counts) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			saveCounts(ctx, pool, name, counts)
		}
	}
}

func saveCounts(ctx context.Context, pool *pgxpool.Pool, name string, c *inbox.Counts) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = pool.Exec(ctx, upsertCounts, name, c.Processed.Load(), c.Duplicates.Load(), c.Retries.Load(), c.BatchSplits.Load())
}

// childEnv is the environment of a child named name.
func childEnv(r *run, name, instance string) []string {
	return append(os.Environ(), envChild+"="+name, envBrokers+"="+strings.Join(r.brokers, ","), envTopic+"="+r.topic,
		envGroup+"="+r.group, envSchema+"="+r.schema, envBalancer+"="+r.balancer, envInstance+"="+instance,
		"GORACE=halt_on_error=1")
}

// childName numbers the children of a run.
func childName(n int) string { return "c" + strconv.Itoa(n) }

// retryLog logs each Retry outcome, which may reorder a partition.
type retryLog struct{ log *slog.Logger }

func (l retryLog) OnRetry(_ context.Context, e *inbox.Event) {
	l.log.Warn("retry", "id", e.Message.ID, "at", time.Now().Format("15:04:05.000"), "error", e.Outcome.Err)
}
