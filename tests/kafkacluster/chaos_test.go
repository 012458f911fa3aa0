package kafkacluster

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// The changes, in the order chaos makes them, one per chaosEvery. Those
// that need a handler to run come first, while messages flow.
var changes = []string{"kill-mid-batch", "stall", "move", "shuffle", "join", "rehash", "kill", "leave"}

// chaosEvery is the time between two changes: INBOX_KAFKA_CLUSTER_EVERY, a
// duration such as "3s", or 1 s.
func chaosEvery() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("INBOX_KAFKA_CLUSTER_EVERY")); err == nil && d > 0 {
		return d
	}
	return time.Second
}

// The names under which r.changes counts.
const (
	countLeaderMoves = "leader moves"
	countShuffles    = "leader shuffles"
	countRehashes    = "coordinator rehashes"
	countCoordMoves  = "coordinator moves"
	countJoins       = "joins"
	countLeaves      = "leaves"
	countRestarts    = "restarts"
	countStalls      = "stalls"
)

// chaos makes a change every chaosEvery until the producer is done and
// every kind of change was made once (for at most 4 rounds), and fails t
// if the producer failed.
func (r *run) chaos(t *testing.T, produced <-chan error) {
	t.Helper()
	tick := time.NewTicker(chaosEvery())
	defer tick.Stop()
	done, made := false, map[string]bool{}
	producerDone := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
		done = true
	}
	for i := 0; ; i++ {
		select {
		case err := <-produced:
			producerDone(err)
		default:
		}
		kind := changes[i%len(changes)]
		switch {
		case done && (len(made) == len(changes) || i > 4*len(changes)):
			return // checkChanges tells what is missing
		case done && made[kind]:
			continue
		}
		select {
		case err := <-produced:
			producerDone(err)
			i-- // this change is still to make
			continue
		case <-tick.C:
		}
		if at := time.Now(); r.change(t, kind) {
			made[kind] = true
			r.mu.Lock()
			r.marks = append(r.marks, mark{kind: kind, at: at})
			r.mu.Unlock()
		}
	}
}

// change makes one change of kind and reports whether it made one.
func (r *run) change(t *testing.T, kind string) bool {
	t.Helper()
	switch kind {
	case "move":
		r.moveLeaders(t, 3)
	case "shuffle":
		r.c.ShufflePartitionLeaders()
		r.changes.Add(countShuffles)
	case "rehash":
		r.moveCoordinator(t)
	case "join":
		if r.count() >= maxChildren {
			return false
		}
		r.join(t, "")
		r.changes.Add(countJoins)
	case "leave":
		return r.leave(t)
	case "kill-mid-batch":
		return r.kill(t, endMidBatch)
	case "kill":
		return r.kill(t, endAnytime)
	case "stall":
		return r.stall(t)
	}
	return true
}

// moveLeaders moves the leaders of n random partitions to another
// broker each.
func (r *run) moveLeaders(t *testing.T, n int) {
	t.Helper()
	for _, p := range r.rng.Perm(partitions)[:n] {
		from := r.c.LeaderFor(r.topic, int32(p))
		to := (from + 1 + int32(r.rng.IntN(brokers-1))) % brokers
		if err := r.c.MoveTopicPartition(r.topic, int32(p), to); err != nil {
			t.Fatal(err)
		}
		if got := r.c.LeaderFor(r.topic, int32(p)); got != to {
			t.Fatalf("partition %d: leader %d after the move from %d to %d", p, got, from, to)
		}
		r.changes.Add(countLeaderMoves)
	}
}

// moveCoordinator rehashes the coordinators until the group's moves to
// another broker (a rehash may keep it where it was).
func (r *run) moveCoordinator(t *testing.T) {
	t.Helper()
	from := r.c.CoordinatorFor(r.group)
	for range 50 {
		r.c.RehashCoordinators()
		r.changes.Add(countRehashes)
		if r.c.CoordinatorFor(r.group) != from {
			r.changes.Add(countCoordMoves)
			return
		}
	}
	t.Fatalf("the group's coordinator stayed on broker %d after 50 rehashes", from)
}

// leave asks a child to leave the group and waits for its exit.
func (r *run) leave(t *testing.T) bool {
	t.Helper()
	c := r.pick(minChildren)
	if c == nil {
		return false
	}
	start := time.Now()
	c.signal(syscall.SIGTERM, endLeave)
	if !c.wait(30 * time.Second) {
		t.Fatalf("child %s did not leave within 30 s:\n%s", c.name, c.out.String())
	}
	if _, err := c.end(); err != nil {
		t.Fatal(err)
	}
	t.Logf("child %s left in %v", c.name, time.Since(start).Round(time.Millisecond))
	r.changes.Add(countLeaves)
	return true
}

// kill kills a child, in a handler (how is endMidBatch) or wherever it is
// (endAnytime), and starts another in its place, with its instance ID
// under static membership. A child asked to die in a
// handler that runs none within 5 s is killed anyway.
func (r *run) kill(t *testing.T, how string) bool {
	t.Helper()
	mark := markReady // SIGUSR1 would end it otherwise, as it starts
	if how == endMidBatch {
		mark = markHandling
	}
	c := r.pickMarked(0, mark)
	if c == nil {
		return false
	}
	if how == endMidBatch {
		c.signal(syscall.SIGUSR1, endMidBatch)
		if !c.wait(5 * time.Second) {
			how = endAnytime
		}
	}
	r.replace(t, c, how)
	return true
}

// replace kills c, unless it died already as how tells, and starts
// another in its place, with its instance ID under static membership.
func (r *run) replace(t *testing.T, c *child, how string) {
	t.Helper()
	if how == endAnytime {
		c.signal(syscall.SIGKILL, endAnytime)
	}
	if !c.wait(10 * time.Second) {
		t.Fatalf("child %s still runs 10 s after its SIGKILL", c.name)
	}
	why, err := c.end()
	if err != nil {
		t.Fatal(err)
	}
	r.kills.Add(why)
	r.join(t, c.instance)
	r.changes.Add(countRestarts)
}

// count is the number of living children.
func (r *run) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.alive)
}

// stall stops a child in the middle of a batch's transaction, its claims
// held, for stallFor: longer than its session, so that the group gives
// its partitions to others, and longer than their lock timeout, so that
// their claims of its records fail and are retried. Then it lets it go on.
// A child that runs no handler within 5 s is killed and replaced instead.
func (r *run) stall(t *testing.T) bool {
	t.Helper()
	c := r.pickMarked(0, markHandling)
	if c == nil {
		return false
	}
	_ = c.cmd.Process.Signal(syscall.SIGUSR2)
	if !stopped(c.cmd.Process.Pid, 5*time.Second) {
		r.replace(t, c, endAnytime)
		return false
	}
	time.Sleep(stallFor)
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	r.mu.Lock()
	r.ended = slices.DeleteFunc(r.ended, func(e *child) bool { return e == c })
	r.alive = append(r.alive, c)
	r.mu.Unlock()
	r.changes.Add(countStalls)
	return true
}

// stallFor is how long stall stops a child: its session, a rebalance, and
// the others' lock timeout.
const stallFor = sessionTimeout + 2*time.Second + lockTimeout

// stopped waits at most d for process pid to be stopped (state T in
// /proc), and reports whether it is.
func stopped(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The state follows the command's closing parenthesis.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return true
		}
	}
	return false
}
