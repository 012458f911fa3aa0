package main

import (
	"context"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// childApp is the application_name of the children's connections: the
// wait events are sampled on those only.
const childApp = "scaleout-child"

// Sampling intervals.
const (
	waitInterval = 100 * time.Millisecond
	cpuInterval  = 250 * time.Millisecond
	clockTicks   = 100 // Linux's USER_HZ, the unit of /proc's CPU times
)

// sample is what a measurement's sampler saw from start to end.
type sample struct {
	// CPU is the CPU time of each group of processes as a share of all
	// cores (1 = both cores busy): children, postgres (every postgres
	// process), parent (this process: kfake, the sampler), nats
	// (nats-server), and the machine's busy and iowait shares.
	CPU map[string]float64 `json:"cpu"`
	// Waits is the mean number of the children's backends in each state
	// per sample: "CPU" (active, no wait event), "Type:Event" (active,
	// waiting), "in tx (client)" (idle in transaction: waiting for the
	// client), "idle".
	Waits   map[string]float64 `json:"waits"`
	Samples int                `json:"wait_samples"`
}

// sampler samples CPU times and wait events until stopped.
type sampler struct {
	conn   *pgx.Conn
	pids   func() []int // the children alive
	natsID int

	stopc chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	waits   map[string]int
	samples int
	cpu     *cpuTracker
	start   time.Time
	end     time.Time
}

func startSampler(conn *pgx.Conn, pids func() []int, natsPID int) *sampler {
	s := &sampler{conn: conn, pids: pids, natsID: natsPID, stopc: make(chan struct{}), waits: map[string]int{},
		cpu: newCPUTracker(), start: time.Now()}
	s.cpuTick(true)
	s.sampleWaits() // one at least, however short the measurement
	s.wg.Go(s.loopWaits)
	s.wg.Go(s.loopCPU)
	return s
}

// stop ends the sampling and returns what it saw.
func (s *sampler) stop() *sample {
	s.cpuTick(false)
	s.end = time.Now()
	close(s.stopc)
	s.wg.Wait()
	out := &sample{CPU: map[string]float64{}, Waits: map[string]float64{}, Samples: s.samples}
	secs := s.end.Sub(s.start).Seconds()
	cores := float64(runtime.NumCPU())
	for g, t := range s.cpu.total {
		out.CPU[g] = float64(t) / clockTicks / secs / cores
	}
	busy, iowait := s.cpu.machine()
	out.CPU["machine"], out.CPU["iowait"] = busy, iowait
	for k, n := range s.waits {
		if s.samples > 0 {
			out.Waits[k] = float64(n) / float64(s.samples)
		}
	}
	return out
}

func (s *sampler) loopWaits() {
	t := time.NewTicker(waitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
			s.sampleWaits()
		}
	}
}

func (s *sampler) loopCPU() {
	t := time.NewTicker(cpuInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
			s.cpuTick(false)
		}
	}
}

// sampleWaits reads the children's backends from pg_stat_activity once.
func (s *sampler) sampleWaits() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := s.conn.Query(ctx, `SELECT coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, '')
		FROM pg_stat_activity WHERE application_name = $1`, childApp)
	if err != nil {
		return
	}
	var keys []string
	var state, typ, event string
	_, err = pgx.ForEachRow(rows, []any{&state, &typ, &event}, func() error {
		keys = append(keys, waitKey(state, typ, event))
		return nil
	})
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, k := range keys {
		s.waits[k]++
	}
}

// waitKey names a backend's state: "CPU" when it runs, its wait event
// when it waits, "in tx (client)" when its transaction waits for the
// client's next statement, "idle" between transactions.
func waitKey(state, typ, event string) string {
	switch {
	case state == "idle":
		return "idle"
	case strings.HasPrefix(state, "idle in transaction"):
		return "in tx (client)"
	case typ == "":
		return "CPU"
	}
	return typ + ":" + event
}

func (s *sampler) cpuTick(first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first {
		s.cpu.baseline(s.natsID)
		return
	}
	for _, pid := range s.pids() {
		s.cpu.add("children", pid)
	}
	for _, pid := range procsNamed("postgres") {
		s.cpu.add("postgres", pid)
	}
	s.cpu.add("parent", os.Getpid())
	if s.natsID > 0 {
		s.cpu.add("nats", s.natsID)
	}
	s.cpu.machineTick()
}

// cpuTracker sums the CPU ticks of processes since its baseline.
type cpuTracker struct {
	last         map[int]uint64
	total        map[string]uint64
	stat0, stat1 []uint64 // /proc/stat's cpu line at the baseline and now
}

func newCPUTracker() *cpuTracker {
	return &cpuTracker{last: map[int]uint64{}, total: map[string]uint64{}}
}

// baseline records the ticks of the processes running now: only what
// they use from now on counts. A process seen later counts whole.
func (t *cpuTracker) baseline(natsPID int) {
	pids := append(procsNamed("postgres"), os.Getpid())
	if natsPID > 0 {
		pids = append(pids, natsPID)
	}
	for _, pid := range pids {
		if ticks, ok := procTicks(pid); ok {
			t.last[pid] = ticks
		}
	}
	t.stat0 = machineStat()
	t.stat1 = t.stat0
}

func (t *cpuTracker) add(group string, pid int) {
	ticks, ok := procTicks(pid)
	if !ok {
		return
	}
	if prev, seen := t.last[pid]; seen {
		if ticks > prev {
			t.total[group] += ticks - prev
		}
	} else {
		t.total[group] += ticks
	}
	t.last[pid] = ticks
}

func (t *cpuTracker) machineTick() {
	if m := machineStat(); m != nil {
		t.stat1 = m
	}
}

// machine returns the busy and iowait shares of all cores between the
// baseline and the last tick.
func (t *cpuTracker) machine() (busy, iowait float64) {
	if len(t.stat0) < 8 || len(t.stat1) < 8 {
		return 0, 0
	}
	d := make([]float64, 8)
	var all float64
	for i := range d {
		d[i] = float64(t.stat1[i] - t.stat0[i])
		all += d[i]
	}
	if all == 0 {
		return 0, 0
	}
	// user nice system idle iowait irq softirq steal
	return (all - d[3] - d[4]) / all, d[4] / all
}

// machineStat reads /proc/stat's cpu line.
func machineStat() []uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var out []uint64
	for _, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseUint(f, 10, 64)
		out = append(out, n)
	}
	return out
}

// procTicks returns a process's user plus system CPU ticks.
func procTicks(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + st, true
}

// procsNamed returns the pids of the processes whose comm is name.
func procsNamed(name string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(comm)) == name {
			out = append(out, pid)
		}
	}
	return out
}

// pgStats are PostgreSQL's counters that tell fsync from CPU: the
// cluster's WAL (pg_stat_wal, every database's) and the run database's
// commits (pg_stat_database).
type pgStats struct {
	WALRecords int64 `json:"wal_records"`
	WALBytes   int64 `json:"wal_bytes"`
	WALWrites  int64 `json:"wal_writes"`
	WALSyncs   int64 `json:"wal_syncs"`
	Commits    int64 `json:"commits"`
	Rollbacks  int64 `json:"rollbacks"`
	Deadlocks  int64 `json:"deadlocks"`
}

func readPGStats(ctx context.Context, conn *pgx.Conn, db string) (pgStats, error) {
	var s pgStats
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return s, err
	}
	if err := conn.QueryRow(ctx, "SELECT wal_records, wal_bytes::bigint, wal_write, wal_sync FROM pg_stat_wal").
		Scan(&s.WALRecords, &s.WALBytes, &s.WALWrites, &s.WALSyncs); err != nil {
		return s, err
	}
	err := conn.QueryRow(ctx, "SELECT xact_commit, xact_rollback, deadlocks FROM pg_stat_database WHERE datname = $1", db).
		Scan(&s.Commits, &s.Rollbacks, &s.Deadlocks)
	return s, err
}

func (s pgStats) sub(t pgStats) pgStats {
	return pgStats{s.WALRecords - t.WALRecords, s.WALBytes - t.WALBytes, s.WALWrites - t.WALWrites, s.WALSyncs - t.WALSyncs,
		s.Commits - t.Commits, s.Rollbacks - t.Rollbacks, s.Deadlocks - t.Deadlocks}
}

// natsServerPID finds the nats-server that serves natsURL: the only one,
// or the one whose command line names the URL's port. 0 when none does.
func natsServerPID(natsURL string) int {
	pids := procsNamed("nats-server")
	if len(pids) == 1 {
		return pids[0]
	}
	u, err := url.Parse(natsURL)
	if err != nil || u.Port() == "" {
		return 0
	}
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a == u.Port() && i > 0 && (args[i-1] == "-p" || args[i-1] == "--port") || strings.HasSuffix(a, ":"+u.Port()) {
				return pid
			}
		}
	}
	return 0
}
