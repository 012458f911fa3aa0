package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// A Source closed while a receive is in flight, after the queue marked
// its messages in flight but before the response arrived, does not leave
// them invisible for the visibility timeout: the receive is not canceled,
// and what it brings back is released. Before the fix, Close canceled the
// receive and the message came back only after 30 s.
func TestCloseDuringReceiveReleases(t *testing.T) {
	t.Parallel()
	if !sqsenv.Emulated() {
		t.Skip("needs the in-process emulator behind a proxy")
	}
	ctx := context.Background()
	cl := sqsenv.Client()
	name := sqsenv.Queue(t, false)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, &broker.Message{ID: "inflight", Subject: name, Payload: []byte("inflight")}); err != nil {
		t.Fatal(err)
	}
	// The proxy holds a receive's response with the message for 500 ms,
	// or until its client gives up: the window in which Close comes.
	held := make(chan struct{}, 1)
	target, err := url.Parse(sqsenv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		var out struct{ Messages []json.RawMessage }
		if json.Unmarshal(b, &out) == nil && len(out.Messages) > 0 {
			select {
			case held <- struct{}{}:
			default:
			}
			select {
			case <-time.After(500 * time.Millisecond):
			case <-resp.Request.Context().Done():
			}
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	src, err := sqs.NewSource(ctx, &sqs.Config{Client: sqsenv.ClientOn(srv.URL), Queue: name, VisibilityTimeout: 30 * time.Second, WaitTime: waitTime})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no receive brought the message")
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	again := newSource(t, cl, name, sqs.Config{VisibilityTimeout: 30 * time.Second})
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := again.Next(nctx)
	if err != nil {
		t.Fatalf("the message received while the Source closed is still invisible after 5 s (%v); want it released at Close, not after its 30 s visibility timeout", err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}
