package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// dead-letters show gives back every header as stored: in the JSON,
// headers whose name or value is not valid UTF-8 come in base64
// (headers_base64, name to value), since JSON would replace their bytes
// and merge "k\xfe" with "k\xff"; in the text, each is quoted.
func TestShowHeadersLossless(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := openDB(t, "sqlite")
	ib := e.inbox(t, inbox.Config{Consumer: "c"})
	stored := map[string]string{"k\xfe": "b", "k\xff": "a", "ok": "c", "bin": "\x00\xff"}
	fail := func(context.Context, *sql.Tx, *inbox.Message) error { return inbox.Permanent(errors.New("boom")) }
	if out, err := ib.Process(ctx, inbox.Message{ID: "m-1", Payload: []byte("p"), Headers: stored}, fail); out.Status != inbox.DeadLettered {
		t.Fatalf("%v %v", out.Status, err)
	}
	found, err := e.driver.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 1})
	if err != nil || len(found) != 1 {
		t.Fatalf("%v %v", found, err)
	}
	args := append([]string{"dead-letters", "show"}, e.flags...)
	var det struct {
		Headers       map[string]string `json:"headers"`
		HeadersBase64 map[string]string `json:"headers_base64"`
	}
	cmdJSON(t, &det, 0, append(args, "-json", fmt.Sprint(found[0].ID))...)
	got := maps.Clone(det.Headers)
	for k, v := range det.HeadersBase64 {
		name, err1 := base64.StdEncoding.DecodeString(k)
		value, err2 := base64.StdEncoding.DecodeString(v)
		if err1 != nil || err2 != nil {
			t.Fatalf("headers_base64 %q: %q: not base64 (%v, %v)", k, v, err1, err2)
		}
		if got == nil {
			got = map[string]string{}
		}
		got[string(name)] = string(value)
	}
	if !maps.Equal(got, stored) || len(det.Headers) != 1 {
		t.Fatalf("show -json: headers %q and headers_base64 %q, want %q, the valid UTF-8 one as text", det.Headers, det.HeadersBase64, stored)
	}
	_, stdout, _ := runCmd(t, append(args, fmt.Sprint(found[0].ID))...)
	for _, want := range []string{`"k\xfe": b`, `"k\xff": a`, `ok: c`, `bin: "\x00\xff"`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("show: no %s in\n%s", want, stdout)
		}
	}
}
