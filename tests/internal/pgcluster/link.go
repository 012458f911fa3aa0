package pgcluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// link relays the standby's replication connection to the primary, and
// holds each chunk for a delay in both directions: a standby some way off.
// Cut drops the chunks held, as a crash of the primary's machine loses what
// it had not sent yet.
type link struct {
	l     net.Listener
	to    string
	delay time.Duration

	mu    sync.Mutex
	conns []net.Conn
	cut   bool
	wg    sync.WaitGroup
}

func newLink(to string, delay time.Duration) (*link, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &link{l: l, to: to, delay: delay}
	k.wg.Go(k.accept)
	return k, nil
}

// Port is where the standby connects.
func (k *link) Port() int { return k.l.Addr().(*net.TCPAddr).Port }

func (k *link) accept() {
	for {
		in, err := k.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", k.to)
		if err != nil {
			_ = in.Close()
			continue
		}
		k.mu.Lock()
		if k.cut {
			k.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		k.conns = append(k.conns, in, out)
		k.mu.Unlock()
		k.wg.Go(func() { k.pipe(out, in) })
		k.wg.Go(func() { k.pipe(in, out) })
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk delay after it was read.
func (k *link) pipe(dst, src net.Conn) {
	held := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() { _ = dst.Close() }()
		failed := false
		for c := range held { // drained to the end, so that the reader never blocks
			if failed || k.isCut() {
				continue
			}
			time.Sleep(time.Until(c.at))
			if k.isCut() {
				continue // dropped
			}
			if _, err := dst.Write(c.b); err != nil {
				failed = true
			}
		}
	})
	for {
		b := make([]byte, 32<<10)
		n, err := src.Read(b)
		if n > 0 {
			held <- chunk{b: b[:n], at: time.Now().Add(k.delay)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = src.Close()
			}
			break
		}
	}
	close(held)
	wg.Wait()
}

func (k *link) isCut() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cut
}

// Cut closes the link and its connections, and drops what they hold.
func (k *link) Cut() {
	k.mu.Lock()
	k.cut = true
	conns := k.conns
	k.conns = nil
	k.mu.Unlock()
	_ = k.l.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	k.wg.Wait()
}
