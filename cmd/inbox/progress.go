package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressEvery is the least time between two updates of a progress line:
// a few a second, which a person can read and a slow terminal can take.
const progressEvery = 250 * time.Millisecond

// progressInterval is the commands' interval: progressEvery, but in tests
// that make every add write.
var progressInterval = progressEvery

// progress tells a person at a terminal how far a long command has come:
// what is done so far, the rate, and the time left when the total is
// known. It rewrites one line on stderr in place (carriage return), with
// new figures at most every progressEvery, and ends it with a final line.
// It writes nothing when stderr is not a terminal, or with -json; nor for
// a command done before its first update was due.
type progress struct {
	w    io.Writer
	on   bool
	verb string // "pruned", "discarded"
	noun string // "row"; empty: only the time so far is known
	// total is what the command will do, 0 when unknown.
	total int

	interval    time.Duration // between updates
	now         func() time.Time
	start, last time.Time
	done        int
	line        string // the last written, "" before the first update
	width       int    // of the line on the terminal, 0 when blank
}

// newProgress returns the progress of a command writing to stderr; quiet
// (-json) turns it off, as does a stderr that is not a terminal.
func newProgress(stderr io.Writer, quiet bool, verb, noun string, total int) *progress {
	return newProgressOn(stderr, !quiet && isTerminal(unwrapStderr(stderr)), verb, noun, total, time.Now)
}

// newProgressOn is newProgress with the terminal test and the clock given.
func newProgressOn(w io.Writer, on bool, verb, noun string, total int, now func() time.Time) *progress {
	t := now()
	return &progress{w: w, on: on, verb: verb, noun: noun, total: total, interval: progressInterval, now: now, start: t, last: t}
}

// unwrapStderr is the writer under the command's redacting stderr.
func unwrapStderr(w io.Writer) io.Writer {
	if r, ok := w.(redactWriter); ok {
		return r.w
	}
	return w
}

// add counts n more done, and updates the line when an update is due.
func (p *progress) add(n int) {
	p.done += n
	p.tick()
}

// tick writes new figures when an update is due, else the last line
// again if clear blanked it. A command whose count is unknown (migrate)
// calls it from a timer (every).
func (p *progress) tick() {
	if !p.on {
		return
	}
	switch t := p.now(); {
	case t.Sub(p.last) >= p.interval:
		p.last = t
		p.write(p.figures(t), "")
	case p.width == 0 && p.line != "":
		p.write(p.line, "")
	}
}

// every ticks p every d until the returned stop is called, which writes
// the final line.
func (p *progress) every(ctx context.Context, d time.Duration) (stop func()) {
	if !p.on {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				p.tick() // stop waits for this goroutine: p is its own meanwhile
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		p.finish()
	}
}

// clear blanks the line, so that the command can write a line of its own
// to the terminal (stdout may be the same); the next add writes it again.
func (p *progress) clear() {
	if p.on && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

// finish writes the final line, when an update was written.
func (p *progress) finish() {
	if !p.on || p.line == "" {
		return
	}
	t := p.now()
	line := p.figures(t)
	if p.noun == "" {
		line = fmt.Sprintf("%s: done in %v", p.verb, t.Sub(p.start).Round(time.Second))
	}
	p.write(line, "\n")
	p.width = 0
	p.line = ""
}

// write writes line over the one on the terminal.
func (p *progress) write(line, end string) {
	pad := ""
	if n := len(line); n < p.width {
		pad = strings.Repeat(" ", p.width-n)
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
	p.line, p.width = line, len(line)
}

// figures is the progress at t: "discarded 1200 of 5000 dead letters
// (24%) in 3s, 400/s, 10s left", "pruned 12000 rows in 3s, 4000/s", or
// with no noun "migrate: 12s so far".
func (p *progress) figures(t time.Time) string {
	elapsed := t.Sub(p.start)
	if p.noun == "" {
		return fmt.Sprintf("%s: %v so far", p.verb, elapsed.Round(time.Second))
	}
	var b strings.Builder
	if p.total > 0 {
		fmt.Fprintf(&b, "%s %d of %s (%d%%)", p.verb, p.done, plural(p.total, p.noun), p.done*100/p.total)
	} else {
		fmt.Fprintf(&b, "%s %s", p.verb, plural(p.done, p.noun))
	}
	fmt.Fprintf(&b, " in %v", elapsed.Round(time.Second))
	if elapsed <= 0 {
		return b.String()
	}
	rate := float64(p.done) / elapsed.Seconds()
	if rate >= 10 {
		fmt.Fprintf(&b, ", %.0f/s", rate)
	} else {
		fmt.Fprintf(&b, ", %.1f/s", rate)
	}
	if p.total > 0 && rate > 0 && p.done < p.total {
		left := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
		fmt.Fprintf(&b, ", %v left", left.Round(time.Second))
	}
	return b.String()
}
