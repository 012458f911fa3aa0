package idempotency

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is an error response, sent as application/problem+json (RFC
// 9457). Its type is [Config.ProblemType], "about:blank" by default. Its
// title is the status's own phrase. Code tells the fault apart for
// programs.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Code is one of the Code constants.
	Code string `json:"code"`
}

// The codes of a [Problem].
const (
	CodeKeyMissing       = "idempotency_key_missing"   // 400: the route requires a key
	CodeKeyMalformed     = "idempotency_key_malformed" // 400: not a Structured Field string, empty or too long
	CodeKeyInUse         = "idempotency_key_in_use"    // 409: a request with this key is still running
	CodeKeyReused        = "idempotency_key_reused"    // 422: the key came with another request
	CodeRequestTooLarge  = "request_too_large"         // 413: the body is over MaxRequestBytes
	CodeBodyUnreadable   = "request_body_unreadable"   // 400: the body could not be read
	CodeResponseTooLarge = "response_too_large"        // 500: the response is over MaxResponseBytes; rolled back
	CodeFailed           = "request_failed"            // 500: the handler failed; rolled back
	CodeUnavailable      = "database_unavailable"      // 503: the database failed for now; retry with the key
)

// problem sends a Problem of Config.ProblemType. retryAfter, in seconds,
// is set when positive.
func (m *Middleware[TTx]) problem(w http.ResponseWriter, status int, code, detail string, retryAfter int) {
	p := Problem{Type: m.cfg.ProblemType, Title: http.StatusText(status), Status: status, Detail: detail, Code: code}
	b, _ := json.Marshal(p) // strings only: it cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
