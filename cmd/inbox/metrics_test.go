package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// processedRe matches the processed outcomes' counter in the exposition.
var processedRe = regexp.MustCompile(`(?m)^inbox_messages_total\{[^}]*inbox_outcome="processed"[^}]*\} (\d+)`)

// demo -metrics serves /metrics while it runs: a scrape during the run
// finds the outcome counter counting processed messages; the endpoint is
// gone once the demo returned.
func TestDemoServesMetrics(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	done := make(chan error, 1)
	var out, errOut bytes.Buffer
	go func() {
		done <- run(context.Background(), []string{"demo", "-messages", "200", "-workers", "2", "-metrics", addr}, &out, &errOut)
	}()
	url := "http://" + addr + "/metrics"
	var scraped int
	var last string
	deadline := time.After(2 * time.Minute)
scrape:
	for {
		select {
		case err := <-done:
			t.Fatalf("the demo ended (%v) before a scrape found processed messages; last scrape:\n%s\nstderr: %s", err, last, errOut.String())
		case <-deadline:
			t.Fatalf("no scrape found processed messages; last:\n%s", last)
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get(url)
		if err != nil {
			continue // not serving yet
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		last = string(body)
		if m := processedRe.FindStringSubmatch(last); m != nil {
			if scraped, _ = strconv.Atoi(m[1]); scraped > 0 {
				break scrape
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\nstderr: %s", err, errOut.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("metrics:    http://"+addr+"/metrics")) {
		t.Errorf("stdout does not name the endpoint:\n%s", out.String())
	}
	for _, name := range []string{"inbox_in_flight", "inbox_process_duration_seconds_bucket", "inbox_handler_duration_seconds_count"} {
		if !bytes.Contains([]byte(last), []byte(name)) {
			t.Errorf("the scrape lacks %s:\n%s", name, last)
		}
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("%s still answers after the demo ended", url)
	}
}
