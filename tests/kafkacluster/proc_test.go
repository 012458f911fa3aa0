package kafkacluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// How a child ended, as the parent meant it or saw it.
const (
	endMidBatch = "sigkill-mid-batch" // SIGUSR1: the child killed itself in a handler
	endAnytime  = "sigkill-anytime"   // the parent's SIGKILL, wherever the child was
	endLeave    = "leave"             // SIGTERM: Consume returned, the Source left the group
)

// child is a consumer process.
type child struct {
	name     string
	instance string // the static member's instance ID, or empty
	cmd      *exec.Cmd
	out      lockedBuffer
	done     chan struct{} // closed when the process has exited
	err      error         // cmd.Wait's, once done is closed
	mu       sync.Mutex
	why      string // what the parent asked for: endMidBatch, endAnytime or endLeave
}

// lockedBuffer is a child's output, written by exec's copying goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// spawner starts the children from one goroutine locked to its thread,
// which never ends: Pdeathsig follows the thread that started a child, and
// it kills the children if the test process dies.
var spawner = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// startChild starts a consumer process with env.
func startChild(name string, env []string) (*child, error) {
	c := &child{name: name, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	spawner() <- func() { errc <- c.cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("start child %s: %w", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// signal sends sig, having noted why.
func (c *child) signal(sig syscall.Signal, why string) {
	c.mu.Lock()
	c.why = why
	c.mu.Unlock()
	_ = c.cmd.Process.Signal(sig)
}

// wait waits at most d for the child's exit and reports whether it came.
func (c *child) wait(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// end tells how the child ended, once done is closed: the kill or the
// leave the parent asked for, or an error that no one asked for.
func (c *child) end() (string, error) {
	c.mu.Lock()
	why := c.why
	c.mu.Unlock()
	var sig syscall.Signal = -1
	if exit := (*exec.ExitError)(nil); errors.As(c.err, &exit) {
		sig = exit.Sys().(syscall.WaitStatus).Signal()
	}
	switch {
	case sig == syscall.SIGKILL && (why == endMidBatch || why == endAnytime):
		return why, nil
	// A child dies of SIGTERM that comes before its handler is set, as
	// it starts: it had not joined.
	case (c.err == nil || sig == syscall.SIGTERM) && why == endLeave:
		return why, nil
	}
	return "", fmt.Errorf("child %s ended (%v) after the parent's %q:\n%s", c.name, c.err, why, c.out.String())
}
