// Command consumebench measures the inbox's consumption modes side by side
// in one run, against the broker's own ceiling and against Watermill with
// its deduplicator.
//
// The workload: each message credits an account. In one transaction the
// handler inserts a ledger row (message ID, account, amount) and adds the
// amount to the account's row (UPDATE accounts SET balance = balance + $2
// WHERE id = $1). With -rows 16 there are 16 accounts, message → account
// fnv32a(ID) % 16: hot rows, contended. With -rows 0 each message has an
// account row of its own (created beforehand): nothing shared.
//
// The modes, each with -workers workers on the same kind of source:
//
//	ack           the broker's ceiling for one message at a time: a consumer
//	              that only acks, one delivery per worker at a time, no database
//	ackbatch      the ceiling for batches: each worker takes up to -batch
//	              deliveries (as the inbox gathers them) and acks them all at
//	              once (as the inbox settles a batch), no database; on NATS,
//	              whose acks wait for the server, it is well above ack
//	plain         the business transaction without the inbox: BEGIN, the two
//	              statements, COMMIT, then the ack (the database's own cost)
//	plainbatch    consumebatch without the inbox: batches taken as ackbatch
//	              takes them, written as consumebatch writes them, in one
//	              transaction each, then acked (the database's own limit
//	              for batches)
//	plaineach     batch without the inbox: batches taken as ackbatch takes
//	              them, then in one transaction each the two statements of
//	              every message, one at a time, as batch's per-message
//	              handler runs them, then acked (the database's own limit
//	              for batch)
//	consume       inbox.Consume, one message per transaction
//	queued        inbox.ConsumeQueued: the claim, the two statements and the
//	              COMMIT in one round trip (PostgreSQL only)
//	batch         inbox.Consume with BatchSize -batch (ProcessBatch), whose
//	              batches adapt to lock conflicts
//	fixed         batch with FixedBatchSize: no adapting, as before; not
//	              in the default -modes
//	consumebatch  inbox.ConsumeBatch with BatchSize -batch: one INSERT for the
//	              batch's ledger rows, then the accounts' updates sorted by id
//	watermill     Watermill's router, AMQP subscriber on the quorum queue and
//	              middleware.Deduplicator keyed by the message UUID on a
//	              PostgreSQL table, in the handler's transaction (RabbitMQ and
//	              PostgreSQL only; see watermill.go for exactly what and why)
//
// Brokers: RabbitMQ (a quorum queue per measurement, broker/rabbitmq with
// Prefetch -prefetch) and NATS JetStream (a file stream per measurement,
// broker/natsjs with PullBatch -prefetch). Stores: PostgreSQL
// (store/pgxstore on a pgx pool; a database created for the run, a schema
// per measurement) and MariaDB (store/sqlstore/mysql; a database per
// measurement; interpolateParams=true for every mode). Everything created
// is dropped afterwards; the servers' settings are left alone.
//
// A measurement publishes -messages fresh messages, starts the consumer
// and times it until the last ledger row committed (ack: the last ack),
// or for at most -max-seconds ("timed out after N messages"; the
// consumer's deliveries in flight then get up to inbox.Consume's
// ShutdownTimeout, 30 s, to finish). It then stops the consumer and
// checks: a ledger row per processed message, no ID twice, each balance
// the sum of its ledger rows, all the amounts credited, and nothing left
// in the queue (RabbitMQ: the queue and its delay queues' depth after
// the consumer closed; NATS: the consumer's NumPending + NumAckPending). It records the server's deadlocks
// (PostgreSQL: pg_stat_database of the run's database; MariaDB: the
// global Innodb_deadlocks, other clients' included) and, for the inbox
// modes, the outcomes of an inbox.Counts hook. The rounds interleave the
// modes (ack, plain, consume, …, ack, plain, …), each measurement on a
// fresh queue with fresh IDs and fresh tables.
//
// Output: for each broker, store and -rows a table of msgs/s (mean, and
// min–max over -rounds), the ratios to consume, ack and ackbatch and to the
// same writes without the inbox (× no inbox: consume to plain, batch to
// plaineach, consumebatch to plainbatch), the round trips to PostgreSQL
// per message (pgx's tracer on the measurement's pool), deadlocks, retries
// and messages left, summed over the rounds. -json FILE writes every
// measurement too, with its round trips, statements and COMMITs. A failed check is printed loudly and makes the
// command exit with status 1.
//
// Flags:
//
//	-brokers rabbitmq,nats          brokers to run on
//	-stores postgres,mariadb        databases to run on
//	-rows 16,0                      hot accounts (0: one per message)
//	-modes ack,ackbatch,plain,plainbatch,plaineach,consume,queued,batch,consumebatch,watermill
//	-messages 20000                 messages per measurement
//	-workers 4                      workers of every mode
//	-batch 50                       BatchSize of batch and consumebatch
//	-prefetch 200                   RabbitMQ Prefetch, NATS PullBatch
//	-rounds 3                       measurements of each mode
//	-max-seconds 120                cap of one measurement
//	-json FILE                      also write the results as JSON
//	-cpuprofile FILE                write the run's CPU profile (go tool pprof)
//	-pg, -mysql, -amqp, -nats       servers (defaults: INBOX_POSTGRES_DSN,
//	                                INBOX_MYSQL_DSN, INBOX_AMQP_URL,
//	                                INBOX_NATS_URL, else the local ones)
//	-v                              log the inbox's INFO lines too
//
// Example, from the repository's bench folder (a module of its own, so
// that Watermill never reaches the library's go.mod):
//
//	go run ./cmd/consumebench -brokers rabbitmq,nats -stores postgres,mariadb \
//	    -rows 16,0 -messages 5000 -rounds 2
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
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inbox/bench/internal/ledger"

	"github.com/inboxkit/inbox/bench/internal/cli"
)

// options are the command's flags.
type options struct {
	brokers, stores, modes []string
	rows                   []int
	messages               int
	workers                int
	batch                  int
	prefetch               int
	rounds                 int
	maxTime                time.Duration
	jsonFile               string
	cpuProfile             string

	pgURL, mysqlDSN, amqpURL, natsURL string
	logger                            *slog.Logger
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("consumebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	brokers := fs.String("brokers", "rabbitmq,nats", "brokers: rabbitmq, nats")
	stores := fs.String("stores", "postgres,mariadb", "databases: postgres, mariadb")
	rows := fs.String("rows", "16,0", "hot account rows, comma-separated; 0: one row per message")
	modes := fs.String("modes", strings.Join(defaultModes, ","), "modes: "+strings.Join(allModes, ", "))
	fs.IntVar(&o.messages, "messages", 20000, "messages per measurement")
	fs.IntVar(&o.workers, "workers", 4, "workers of every mode")
	fs.IntVar(&o.batch, "batch", 50, "BatchSize of the batch and consumebatch modes")
	fs.IntVar(&o.prefetch, "prefetch", 200, "RabbitMQ Prefetch, NATS PullBatch")
	fs.IntVar(&o.rounds, "rounds", 3, "measurements of each mode, interleaved")
	maxSeconds := fs.Float64("max-seconds", 120, "cap of one measurement, in seconds")
	fs.StringVar(&o.jsonFile, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the run's CPU profile to this file")
	fs.StringVar(&o.pgURL, "pg", envOr("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	fs.StringVar(&o.mysqlDSN, "mysql", envOr("INBOX_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test"), "MariaDB DSN (go-sql-driver/mysql)")
	fs.StringVar(&o.amqpURL, "amqp", envOr("INBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL")
	fs.StringVar(&o.natsURL, "nats", envOr("INBOX_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL")
	verbose := fs.Bool("v", false, "log the inbox's INFO lines too")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	o.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o.maxTime = time.Duration(*maxSeconds * float64(time.Second))
	var err error
	if o.brokers, err = cli.List(*brokers, []string{"rabbitmq", "nats"}); err != nil {
		return nil, fmt.Errorf("-brokers: %w", err)
	}
	if o.stores, err = cli.List(*stores, []string{"postgres", "mariadb"}); err != nil {
		return nil, fmt.Errorf("-stores: %w", err)
	}
	if o.modes, err = cli.List(*modes, allModes); err != nil {
		return nil, fmt.Errorf("-modes: %w", err)
	}
	for _, s := range strings.Split(*rows, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-rows: %q is not a number of rows", s)
		}
		o.rows = append(o.rows, n)
	}
	if o.messages < 1 || o.workers < 1 || o.batch < 1 || o.prefetch < 1 || o.rounds < 1 || o.maxTime <= 0 {
		return nil, errors.New("-messages, -workers, -batch, -prefetch, -rounds and -max-seconds must be positive")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumebench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var profile *os.File
	if o.cpuProfile != "" {
		if profile, err = os.Create(o.cpuProfile); err == nil {
			err = pprof.StartCPUProfile(profile)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "consumebench: -cpuprofile:", err)
			os.Exit(2)
		}
	}
	results, err := run(ctx, o, os.Stderr)
	if profile != nil {
		pprof.StopCPUProfile()
		_ = profile.Close()
	}
	cells := summarize(results)
	printTables(os.Stdout, cells, o)
	if o.jsonFile != "" {
		if err := writeJSON(o.jsonFile, o, results, cells); err != nil {
			fmt.Fprintln(os.Stderr, "consumebench:", err)
		}
	}
	failed := printFailures(os.Stdout, results)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumebench:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// run opens the brokers and stores, runs every measurement and returns the
// results; a progress line per measurement goes to log.
func run(ctx context.Context, o *options, log io.Writer) ([]*result, error) {
	var brokers []brokerKind
	var stores []storeKind
	defer func() {
		for _, b := range brokers {
			b.close()
		}
		for _, s := range stores {
			s.close()
		}
	}()
	for _, name := range o.brokers {
		var b brokerKind
		var err error
		switch name {
		case "rabbitmq":
			b, err = openRabbit(ctx, o)
		case "nats":
			b, err = openNATS(o)
		}
		if err != nil {
			return nil, err
		}
		brokers = append(brokers, b)
	}
	for _, name := range o.stores {
		var s storeKind
		var err error
		switch name {
		case "postgres":
			s, err = openPostgres(ctx, o)
		case "mariadb":
			s, err = openMariaDB(ctx, o)
		}
		if err != nil {
			return nil, err
		}
		stores = append(stores, s)
	}
	var results []*result
	for _, b := range brokers {
		for _, s := range stores {
			for _, rows := range o.rows {
				for round := 1; round <= o.rounds; round++ {
					for _, mode := range o.modes {
						if ctx.Err() != nil {
							return results, ctx.Err()
						}
						r := measure(ctx, o, b, s, rows, mode, round)
						if r == nil {
							continue // the mode does not run here
						}
						fmt.Fprintln(log, r.line(o.rounds))
						results = append(results, r)
					}
				}
			}
		}
	}
	return results, nil
}

// result is one measurement.
type result struct {
	Broker    string `json:"broker"`
	Store     string `json:"store"`
	Rows      int    `json:"rows"`
	Mode      string `json:"mode"`
	Round     int    `json:"round"`
	Messages  int    `json:"messages"`
	Processed int64  `json:"processed"` // by the end of the timed part
	// AtStop is the messages processed once the consumer stopped: a timed
	// out measurement's deliveries in flight finish first.
	AtStop     int64   `json:"processed_at_stop"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"msgs_per_s"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	Deadlocks  int64   `json:"deadlocks"`
	Retries    int64   `json:"retries"`
	Duplicates int64   `json:"duplicates"`
	Left       int64   `json:"left"`
	// Traffic is what the consumer sent to the database from its start to
	// its stop (PostgreSQL only).
	Traffic  *traffic `json:"traffic,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

func (r *result) line(rounds int) string {
	s := fmt.Sprintf("%s %s rows=%d round %d/%d %-12s %6d msgs in %7.2f s = %8.1f msgs/s, deadlocks %d, retries %d, duplicates %d, left %d",
		r.Broker, r.Store, r.Rows, r.Round, rounds, r.Mode, r.Processed, r.Seconds, r.Rate, r.Deadlocks, r.Retries, r.Duplicates, r.Left)
	if t := r.Traffic; t != nil && r.AtStop > 0 {
		n := float64(r.AtStop)
		s += fmt.Sprintf(", per message %.2f round trips, %.2f statements, %.3f commits", float64(t.Trips)/n, float64(t.Statements)/n, float64(t.Commits)/n)
	}
	if r.TimedOut {
		s += fmt.Sprintf(" (timed out; %d processed by the stop)", r.AtStop)
	}
	if len(r.Problems) > 0 {
		s += " CHECK FAILED: " + strings.Join(r.Problems, "; ")
	}
	return s
}

// measure runs one mode once on a fresh queue and fresh tables, and
// checks the outcome; nil when the mode does not run on b and s.
func measure(ctx context.Context, o *options, b brokerKind, s storeKind, rows int, mode string, round int) *result {
	r := &result{Broker: b.name(), Store: s.name(), Rows: rows, Mode: mode, Round: round, Messages: o.messages}
	fail := func(format string, args ...any) *result {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
		return r
	}
	if mode == "watermill" && (b.name() != "rabbitmq" || s.name() != "postgres") {
		return nil
	}
	w := ledger.Fresh(o.messages, rows)
	q, err := b.newQueue(ctx)
	if err != nil {
		return fail("queue: %v", err)
	}
	defer q.drop(context.WithoutCancel(ctx))
	run := ackMode(o)
	if mode == "ackbatch" {
		run = ackBatchMode(o)
	}
	var e env
	var dl0 int64
	if mode != "ack" && mode != "ackbatch" {
		if dl0, err = s.deadlocks(ctx); err != nil {
			return fail("deadlocks: %v", err)
		}
		if e, err = s.prepare(ctx, w); err != nil {
			return fail("tables: %v", err)
		}
		dropped := false
		drop := func() {
			if !dropped {
				dropped = true
				e.drop(context.WithoutCancel(ctx))
			}
		}
		defer drop()
		if run, err = e.runner(mode); errors.Is(err, errNoMode) {
			return nil
		} else if err != nil {
			return fail("%v", err)
		}
		defer func() { // after the tables' checks, with the pool closed
			drop()
			dl1, err := s.deadlocks(context.WithoutCancel(ctx))
			if err != nil {
				fail("deadlocks: %v", err)
			}
			r.Deadlocks = dl1 - dl0
		}()
	}
	if err := q.publish(ctx, w); err != nil {
		return fail("publish: %v", err)
	}

	var traffic0 traffic
	if e != nil {
		traffic0, _ = e.traffic()
	}
	p := newProgress(o.messages)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- run(runCtx, q, p) }()
	timer := time.NewTimer(o.maxTime)
	defer timer.Stop()
	var runErr error
	stopped := false
	select {
	case <-p.done:
	case <-timer.C:
		r.TimedOut = true
	case runErr = <-errc:
		stopped = true
	case <-ctx.Done():
	}
	elapsed := p.elapsed()
	r.Processed = min(p.count.Load(), int64(o.messages))
	r.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		r.Rate = float64(r.Processed) / elapsed.Seconds()
	}
	stop()
	if !stopped {
		runErr = <-errc
	}
	if runErr != nil {
		fail("consumer: %v", runErr)
	}
	if !r.TimedOut && r.Processed < int64(o.messages) {
		fail("the consumer stopped after %d of %d messages", r.Processed, o.messages)
	}

	// After the stop: what committed while in-flight deliveries finished.
	processed := p.count.Load()
	r.AtStop = processed
	if e != nil {
		if t, ok := e.traffic(); ok {
			t = t.sub(traffic0)
			r.Traffic = &t
		}
	}
	left, err := q.left(context.WithoutCancel(ctx))
	if err != nil {
		fail("left in queue: %v", err)
	}
	r.Left = left
	switch want := int64(o.messages) - processed; {
	case !r.TimedOut && left != 0:
		fail("%d messages left in the queue after all were processed", left)
	case r.TimedOut && left < want:
		fail("%d messages left in the queue, %d not processed: %d lost", left, want, want-left)
	}
	r.Retries = p.retries.Load()
	if e == nil {
		return r
	}
	st, err := e.state(context.WithoutCancel(ctx))
	if err != nil {
		return fail("reading the tables: %v", err)
	}
	r.Problems = append(r.Problems, st.Problems(w, processed, !r.TimedOut)...)
	if c := e.outcomes(); c != nil {
		r.Retries = c.Retries.Load()
		r.Duplicates = c.Duplicates.Load()
		if n := c.DeadLettered.Load(); n > 0 {
			fail("%d messages dead-lettered", n)
		}
	}
	return r
}
