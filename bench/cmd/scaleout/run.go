package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/bench/internal/ledger"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// Bounds of a measurement's steps.
const (
	readyTimeout = 30 * time.Second
	stopGrace    = 45 * time.Second // above Consume's ShutdownTimeout, 30 s
	pollDB       = 250 * time.Millisecond
	// killAt is when a process is killed: once this share of the
	// messages left when all N processes were ready has committed.
	killAt = 0.4
)

// runEnv is what the measurements share: the run's database and the
// NATS connection.
type runEnv struct {
	o       *options
	dbName  string
	dbURL   string
	pool    *pgxpool.Pool // the parent's: tables, checks, progress
	stats   *pgx.Conn     // the sampler's and the counters'
	nats    *natsConn
	natsPID int
}

// openRun creates the run's database and connects to it and to NATS.
func openRun(ctx context.Context, o *options) (*runEnv, error) {
	e := &runEnv{o: o, dbName: ledger.RandomName("scaleout")}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	base, err := pgx.Connect(cctx, o.pgURL)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL at %s: %w", errUnavailable, o.pgURL, err)
	}
	defer base.Close(ctx)
	if _, err := base.Exec(ctx, "CREATE DATABASE "+e.dbName); err != nil {
		return nil, fmt.Errorf("postgres: create database: %w", err)
	}
	u, err := url.Parse(o.pgURL)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("-pg: %w", err)
	}
	u.Path = "/" + e.dbName
	e.dbURL = u.String()
	if e.pool, err = pgxpool.New(ctx, e.dbURL); err != nil {
		e.close()
		return nil, err
	}
	if e.stats, err = pgx.Connect(ctx, e.dbURL); err != nil {
		e.close()
		return nil, err
	}
	if slices.Contains(o.brokers, "nats") {
		if e.nats, err = openNATS(o); err != nil {
			e.close()
			return nil, err
		}
		e.natsPID = natsServerPID(o.natsURL)
	}
	return e, nil
}

// close drops the run's database.
func (e *runEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.nats != nil {
		e.nats.nc.Close()
	}
	if e.stats != nil {
		_ = e.stats.Close(ctx)
	}
	if e.pool != nil {
		e.pool.Close()
	}
	base, err := pgx.Connect(ctx, e.o.pgURL)
	if err != nil {
		e.o.logger.Warn("postgres: drop the run's database", "database", e.dbName, "error", err)
		return
	}
	defer base.Close(ctx)
	if _, err := base.Exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)"); err != nil {
		e.o.logger.Warn("postgres: drop the run's database", "database", e.dbName, "error", err)
	}
}

// run runs every measurement, rounds interleaved, and returns the
// results; a progress line per measurement goes to log.
func run(ctx context.Context, o *options, log io.Writer) ([]*result, error) {
	e, err := openRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var results []*result
	for round := 1; round <= o.rounds; round++ {
		for _, n := range o.procs {
			for _, t := range targets(o) {
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				r := e.measure(ctx, t.broker, t.mode, n, round)
				fmt.Fprintln(log, r.line(o.rounds))
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// target is a mode on a broker; a baseline's broker is "".
type target struct{ broker, mode string }

// targets are the measurements of one N in a round: the baselines, then
// each broker's inbox modes.
func targets(o *options) []target {
	var out []target
	for _, m := range o.modes {
		if isBaseline(m) {
			out = append(out, target{"", m})
		}
	}
	for _, b := range o.brokers {
		for _, m := range o.modes {
			if !isBaseline(m) {
				out = append(out, target{b, m})
			}
		}
	}
	return out
}

// result is one measurement.
type result struct {
	Broker    string `json:"broker,omitempty"`
	Mode      string `json:"mode"`
	Procs     int    `json:"procs"`
	Round     int    `json:"round"`
	Messages  int    `json:"messages"`
	Processed int64  `json:"processed"` // by the end of the timed part
	// Started is the processes started, replacements included.
	Started int     `json:"started"`
	Kills   int     `json:"kills"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"msgs_per_s"`
	// Steady is the inbox modes' msgs/s from all N processes ready to the
	// kill (or the end): the curve without rebalances; 0 if too short.
	Steady     float64  `json:"steady_msgs_per_s"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Duplicates int64    `json:"duplicates"` // the inbox's Duplicate outcomes: redeliveries
	Retries    int64    `json:"retries"`
	Left       int64    `json:"left"`
	Sample     *sample  `json:"sample,omitempty"`
	PG         pgStats  `json:"pg"`
	Problems   []string `json:"problems,omitempty"`
}

func (r *result) name() string {
	if r.Broker == "" {
		return "db/" + r.Mode
	}
	return r.Broker + "/" + r.Mode
}

func (r *result) line(rounds int) string {
	s := fmt.Sprintf("round %d/%d N=%d %-15s %6d msgs in %6.2f s = %7.1f msgs/s (steady %7.1f), kills %d, redeliveries %d, retries %d, left %d",
		r.Round, rounds, r.Procs, r.name(), r.Processed, r.Seconds, r.Rate, r.Steady, r.Kills, r.Duplicates, r.Retries, r.Left)
	if r.TimedOut {
		s += " (timed out)"
	}
	if len(r.Problems) > 0 {
		s += " CHECK FAILED: " + strings.Join(r.Problems, "; ")
	}
	return s
}

func (r *result) fail(format string, args ...any) *result {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	return r
}

// measure runs one mode on n processes on fresh tables (and a fresh topic
// or stream), then checks the outcome.
func (e *runEnv) measure(ctx context.Context, brokerName, mode string, n, round int) *result {
	o := e.o
	r := &result{Broker: brokerName, Mode: mode, Procs: n, Round: round, Messages: o.messages}
	w := ledger.Fresh(o.messages, o.rows)
	pg := ledger.NewPG(ledger.RandomName("m"))
	if err := e.prepare(ctx, pg, w); err != nil {
		return r.fail("tables: %v", err)
	}
	defer func() { _, _ = e.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+pg.Schema+" CASCADE") }()
	base := spec{Mode: mode, Broker: brokerName, DB: e.childURL(), Schema: pg.Schema, Workers: o.workers,
		Batch: o.batch, Prefetch: o.prefetchFor(mode), Verbose: o.verbose}
	var d dest
	if brokerName != "" {
		var err error
		if d, err = e.newDest(ctx, brokerName); err != nil {
			return r.fail("%s: %v", brokerName, err)
		}
		defer d.close()
		if err := d.publish(ctx, w); err != nil {
			return r.fail("publish: %v", err)
		}
		d.fill(&base)
	} else {
		base.Prefix, base.Messages, base.Rows, base.Procs = w.IDs[0][:strings.LastIndexByte(w.IDs[0], '-')], o.messages, o.rows, n
	}
	stats0, err := readPGStats(ctx, e.stats, e.dbName)
	if err != nil {
		return r.fail("pg stats: %v", err)
	}
	g := &group{}
	defer g.stopAll(stopGrace) // after a failure; a no-op otherwise
	run := &running{e: e, r: r, g: g, base: base, n: n}
	if isBaseline(mode) {
		err = run.baseline(ctx)
	} else {
		err = run.inbox(ctx)
	}
	if err != nil {
		r.fail("%v", err)
	}
	if d != nil && err == nil && !r.TimedOut {
		drain(ctx, d)
	}
	r.Problems = append(r.Problems, g.stopAll(stopGrace)...)
	e.waitBackends(ctx)
	if stats1, err := readPGStats(ctx, e.stats, e.dbName); err == nil {
		r.PG = stats1.sub(stats0)
	}
	e.check(ctx, r, g, d, pg, w)
	return r
}

// drainTimeout bounds drain: a few AckWaits and Kafka commit intervals.
const drainTimeout = 5 * natsAckWait

// drain waits, once every message committed, until the broker holds
// none unacked. A killed process's last deliveries committed but were
// not acked: they come back after the AckWait or the rebalance, and the
// live processes ack them as duplicates. The check for messages left
// after the stop then finds none unless one was lost.
func drain(ctx context.Context, d dest) {
	deadline := time.Now().Add(drainTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := d.left(ctx); err == nil && n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// prepare creates the measurement's tables and the inbox's.
func (e *runEnv) prepare(ctx context.Context, pg *ledger.PG, w *ledger.Workload) error {
	if _, err := e.pool.Exec(ctx, pg.DDL(w.NumAccounts)); err != nil {
		return err
	}
	d, err := pgxstore.New(e.pool, &pgxstore.Config{Tables: store.Tables{Schema: pg.Schema}})
	if err != nil {
		return err
	}
	return d.Migrate(ctx)
}

// childURL is the run database's URL with the children's
// application_name.
func (e *runEnv) childURL() string {
	u, _ := url.Parse(e.dbURL)
	q := u.Query()
	q.Set("application_name", childApp)
	u.RawQuery = q.Encode()
	return u.String()
}

func (e *runEnv) newDest(ctx context.Context, name string) (dest, error) {
	if name == "kafka" {
		return newKafka(e.o)
	}
	return e.nats.newStream(ctx)
}

// waitBackends waits (up to 5 s) for the children's backends to be gone,
// and a moment more for their last statistics.
func (e *runEnv) waitBackends(ctx context.Context) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		var others int
		if err := e.stats.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", childApp).
			Scan(&others); err != nil || others == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
}

// check reads the tables and the broker once every process stopped: a
// unique ledger row per message, the balances, nothing left.
func (e *runEnv) check(ctx context.Context, r *result, g *group, d dest, pg *ledger.PG, w *ledger.Workload) {
	t := g.totals()
	r.Duplicates, r.Retries = t.Duplicates, t.Retries
	if t.DeadLettered > 0 {
		r.fail("%d messages dead-lettered", t.DeadLettered)
	}
	cctx := context.WithoutCancel(ctx)
	if d != nil {
		left, err := d.left(cctx)
		if err != nil {
			r.fail("left: %v", err)
		}
		r.Left = left
		if !r.TimedOut && left != 0 {
			r.fail("%d messages left after all were processed", left)
		}
	}
	st, err := pg.ReadState(cctx, e.pool)
	if err != nil {
		r.fail("reading the tables: %v", err)
		return
	}
	// A killed process's last commits may be unreported: the ledger is
	// the truth, the reports only bound it from below.
	if st.Rows < t.Processed {
		r.fail("the ledger has %d rows, the processes reported %d processed", st.Rows, t.Processed)
	}
	r.Problems = append(r.Problems, st.Problems(w, -1, !r.TimedOut)...)
}

// running is one measurement's processes while they run.
type running struct {
	e      *runEnv
	r      *result
	g      *group
	base   spec
	n      int
	start  time.Time
	steady window
}

func (m *running) spec(index int) spec {
	s := m.base
	s.Index = index
	if dir := m.e.o.childProfile; dir != "" {
		name := fmt.Sprintf("%s-N%d-r%d-p%d.pprof", strings.ReplaceAll(m.r.name(), "/", "-"), m.n, m.r.Round, index)
		s.CPUProfile = filepath.Join(dir, name)
	}
	return s
}

func (m *running) startProc(index int) (*proc, error) {
	p, err := startProc(m.e.o, m.spec(index), m.e.o.childStderr)
	if err != nil {
		return nil, err
	}
	m.g.add(p)
	m.r.Started++
	return p, nil
}

// baseline starts n processes, waits until all are ready, then lets them
// go at once and times them to the last message.
func (m *running) baseline(ctx context.Context) error {
	for i := range m.n {
		if _, err := m.startProc(i); err != nil {
			return err
		}
	}
	deadline := time.After(readyTimeout)
	for _, p := range m.g.all() {
		select {
		case <-p.ready:
		case <-p.exited:
			return fmt.Errorf("process %d exited before it was ready: %v", p.index, p.exitErr())
		case <-deadline:
			return fmt.Errorf("process %d not ready after %s", p.index, readyTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	smp := startSampler(m.e.stats, m.g.pids, m.e.natsPID)
	m.start = time.Now()
	for _, p := range m.g.all() {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			return fmt.Errorf("process %d: %w", p.index, err)
		}
	}
	err := m.wait(ctx, nil)
	m.r.Sample = smp.stop()
	return err
}

// inbox starts the processes one every -stagger (each join a rebalance on
// Kafka), SIGKILLs one mid-run and starts its replacement when n >= 2,
// and times them from the first process ready to the last message.
func (m *running) inbox(ctx context.Context) error {
	o := m.e.o
	smp := startSampler(m.e.stats, m.g.pids, m.e.natsPID)
	defer func() { m.r.Sample = smp.stop() }()
	first, err := m.startProc(0)
	if err != nil {
		return err
	}
	select {
	case <-first.ready:
	case <-first.exited:
		return fmt.Errorf("process 0 exited before it was ready: %v", first.exitErr())
	case <-time.After(readyTimeout):
		return fmt.Errorf("process 0 not ready after %s", readyTimeout)
	}
	m.start = first.readyTime()
	next := 1
	nextAt := time.Now().Add(o.stagger)
	return m.wait(ctx, func(processed int64) error {
		if next < m.n && time.Now().After(nextAt) {
			if _, err := m.startProc(next); err != nil {
				return err
			}
			next++
			nextAt = time.Now().Add(o.stagger)
		}
		if next == m.n && m.steady.from.IsZero() && m.lastReady() {
			m.steady.from, m.steady.fromCount = time.Now(), processed
		}
		if o.kill && m.n >= 2 && m.r.Kills == 0 && !m.steady.from.IsZero() &&
			float64(processed-m.steady.fromCount) >= killAt*float64(int64(o.messages)-m.steady.fromCount) {
			m.steady.to, m.steady.toCount = time.Now(), processed
			m.g.all()[0].kill()
			m.r.Kills++
			if _, err := m.startProc(m.n); err != nil {
				return err
			}
		}
		return nil
	})
}

// lastReady reports whether the last process started is ready.
func (m *running) lastReady() bool {
	ps := m.g.all()
	select {
	case <-ps[len(ps)-1].ready:
		return true
	default:
		return false
	}
}

// window is the steady part of an inbox mode's run: from all N processes
// ready to the kill, or to the end without one.
type window struct {
	from, to           time.Time
	fromCount, toCount int64
}

// rate is the window's msgs/s; 0 when it is too short to tell (under a
// tenth of the messages).
func (w window) rate(messages int) float64 {
	n, d := w.toCount-w.fromCount, w.to.Sub(w.from).Seconds()
	if w.from.IsZero() || w.to.IsZero() || d <= 0 || n*10 < int64(messages) {
		return 0
	}
	return float64(n) / d
}

// wait polls the processes' reports (and the ledger, which a killed
// process's unreported commits reach only) until every message
// committed, calling step on each poll; it sets the result's timing.
func (m *running) wait(ctx context.Context, step func(processed int64) error) error {
	o := m.e.o
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(o.maxTime)
	lastPoll := time.Now()
	var processed int64
	finish := func() {
		m.r.Seconds = time.Since(m.start).Seconds()
		m.r.Processed = min(processed, int64(o.messages))
		if m.r.Seconds > 0 {
			m.r.Rate = float64(m.r.Processed) / m.r.Seconds
		}
		if m.steady.to.IsZero() {
			m.steady.to, m.steady.toCount = time.Now(), m.r.Processed
		}
		if isBaseline(m.r.Mode) {
			m.r.Steady = m.r.Rate
		} else {
			m.r.Steady = m.steady.rate(o.messages)
		}
	}
	for {
		processed = m.g.totals().Processed
		if processed < int64(o.messages) && time.Since(lastPoll) >= pollDB && m.r.Kills > 0 {
			lastPoll = time.Now()
			var rows int64
			if err := m.e.pool.QueryRow(ctx, "SELECT count(*) FROM "+m.base.Schema+".ledger").Scan(&rows); err == nil {
				processed = max(processed, rows)
			}
		}
		if processed >= int64(o.messages) {
			finish()
			return nil
		}
		if step != nil {
			if err := step(processed); err != nil {
				return err
			}
		}
		if m.allExited() {
			finish()
			return fmt.Errorf("every process exited after %d of %d messages", processed, o.messages)
		}
		select {
		case <-tick.C:
		case <-timeout:
			m.r.TimedOut = true
			finish()
			return nil
		case <-ctx.Done():
			finish()
			return ctx.Err()
		}
	}
}

// allExited reports whether every process started has exited.
func (m *running) allExited() bool {
	for _, p := range m.g.all() {
		if p.alive() {
			return false
		}
	}
	return true
}
