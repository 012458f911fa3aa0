package natsjs_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/testenv"
)

// A pull request that never reaches the server (nats.go's Consume loses
// track of one when all the messages it waits for arrive while it is
// still sending the next request; see natsjs's pullHeartbeat) stalls the
// Source only until the client misses the server's heartbeat: about
// 2 s, not the 30 s of nats.go's default. Before the fix, the messages
// came after 30 s.
func TestLostPullRequestRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var dropped atomic.Int32
	proxy := dropFirstPull(t, testenv.NATSURL(), &dropped)
	_, js := connect(t, proxy)
	env := openOn(t, js, 30*time.Second)
	const n = 20
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if err := env.Publisher.Publish(ctx, &broker.Message{ID: id, Subject: env.Subject, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	src := env.Source(t)
	start := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range n {
		d, err := src.Next(nctx)
		if err != nil {
			t.Fatalf("message %d of %d not delivered within %v after the first pull request was lost (%d dropped): %v; want the lost request replaced within a few seconds",
				i+1, n, time.Since(start).Round(time.Millisecond), dropped.Load(), err)
		}
		if err := d.Ack(nctx); err != nil {
			t.Fatal(err)
		}
	}
	if dropped.Load() != 1 {
		t.Fatalf("the proxy dropped %d pull requests, want 1", dropped.Load())
	}
	t.Logf("%d messages in %v after a lost pull request", n, time.Since(start).Round(time.Millisecond))
}

// dropFirstPull serves a TCP proxy to the NATS server at natsURL, closed
// when t ends, that drops the first pull request (a publish to
// $JS.API.CONSUMER.MSG.NEXT.*) its client sends, and returns its URL.
func dropFirstPull(t *testing.T, natsURL string, dropped *atomic.Int32) string {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go func() { _, _ = io.Copy(c, s) }()
			go filterPulls(c, s, dropped)
		}
	}()
	return "nats://" + ln.Addr().String()
}

// filterPulls copies the client's protocol lines to the server, but for
// the first pull request.
func filterPulls(c, s net.Conn, dropped *atomic.Int32) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) < 3 || (f[0] != "PUB" && f[0] != "HPUB") {
			if _, err := io.WriteString(s, line); err != nil {
				return
			}
			continue
		}
		size, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return
		}
		payload := make([]byte, size+2) // and CR LF
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		if strings.HasPrefix(f[1], "$JS.API.CONSUMER.MSG.NEXT.") && dropped.CompareAndSwap(0, 1) {
			continue
		}
		if _, err := io.WriteString(s, line); err != nil {
			return
		}
		if _, err := s.Write(payload); err != nil {
			return
		}
	}
}
