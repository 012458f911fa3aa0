package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one consumer process.
type proc struct {
	index  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{} // closed at its "ready" line
	exited chan struct{} // closed once it exited and its stdout is read
	killed bool

	mu      sync.Mutex
	stats   childStats
	readyAt time.Time
	err     error // its exit status
}

// startProc starts a consumer process running s. Its stderr goes to
// stderr; it dies with this process (Pdeathsig).
func startProc(o *options, s spec, stderr io.Writer) (*proc, error) {
	js, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.self[0], o.self[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a consumer process: %w", err)
	}
	p := &proc{index: s.Index, cmd: cmd, stdin: stdin, ready: make(chan struct{}), exited: make(chan struct{})}
	go p.read(stdout)
	return p, nil
}

// read follows the process's lines until it exits.
func (p *proc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	readyOnce := sync.Once{}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			readyOnce.Do(func() {
				p.mu.Lock()
				p.readyAt = time.Now()
				p.mu.Unlock()
				close(p.ready)
			})
		case strings.HasPrefix(line, "stat "):
			if s, ok := parseStats(line); ok {
				p.mu.Lock()
				p.stats = s
				p.mu.Unlock()
			}
		}
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.exited)
}

func (p *proc) snapshot() childStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *proc) readyTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readyAt
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop asks the process to stop (SIGTERM: the consumer shuts down, acks
// what committed), and SIGKILLs it after grace.
func (p *proc) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("consumer process %d did not stop within %s of SIGTERM", p.index, grace)
	}
}

// group is a measurement's processes, the killed ones included. The
// sampler reads it while the measurement adds to it.
type group struct {
	mu    sync.Mutex
	procs []*proc
}

func (g *group) add(p *proc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.procs = append(g.procs, p)
}

// all returns the processes started so far.
func (g *group) all() []*proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.procs)
}

// totals sums every process's last reported stats.
func (g *group) totals() childStats {
	var t childStats
	for _, p := range g.all() {
		s := p.snapshot()
		t.Processed += s.Processed
		t.Duplicates += s.Duplicates
		t.Retries += s.Retries
		t.DeadLettered += s.DeadLettered
	}
	return t
}

func (g *group) pids() []int {
	var out []int
	for _, p := range g.all() {
		if p.alive() {
			out = append(out, p.pid())
		}
	}
	return out
}

// stopAll stops every live process at once and returns the problems.
func (g *group) stopAll(grace time.Duration) []string {
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	for _, p := range g.all() {
		wg.Go(func() {
			err := p.stop(grace)
			if err == nil && !p.killed {
				err = p.exitErr()
			}
			if p.readyTime().IsZero() && isSignal(err, syscall.SIGTERM) {
				err = nil // stopped as it started, before its handler was set
			}
			if err != nil {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("process %d: %v", p.index, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return problems
}

// lockedWriter serializes the writes of several processes' stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// isSignal reports whether err is an exit by sig.
func isSignal(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
