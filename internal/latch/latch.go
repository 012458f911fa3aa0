// Package latch holds a broker source's terminal error: set once, by
// whichever goroutine sees it first, then returned by every Next.
package latch

import "sync"

// Error is a terminal error latch. Make it with New.
type Error struct {
	once sync.Once
	done chan struct{}
	err  error
}

// New returns an Error with nothing set.
func New() *Error { return &Error{done: make(chan struct{})} }

// Set records err unless an error was set before, and reports whether it
// did.
func (l *Error) Set(err error) (set bool) {
	l.once.Do(func() {
		l.err, set = err, true
		close(l.done)
	})
	return set
}

// Done is closed once an error is set.
func (l *Error) Done() <-chan struct{} { return l.done }

// Err returns the error set, nil before that.
func (l *Error) Err() error {
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}
