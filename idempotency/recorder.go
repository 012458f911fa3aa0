package idempotency

import (
	"bytes"
	"net/http"
)

// recorder holds a handler's response until the transaction has ended:
// its status, header fields and body, up to limit bytes of body.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int
	// over is true once the handler wrote more than limit bytes; the
	// bytes past it are dropped.
	over bool
}

func newRecorder(limit int) *recorder {
	return &recorder{header: http.Header{}, limit: limit}
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 && status >= 200 { // 1xx are informational: the final status comes later
		rec.status = status
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	room := rec.limit - rec.body.Len()
	if len(p) > room {
		rec.over = true
		rec.body.Write(p[:max(room, 0)])
		return len(p), nil // the handler goes on; its response is refused after it returns
	}
	return rec.body.Write(p)
}

// code returns the status, 200 when the handler set none.
func (rec *recorder) code() int {
	if rec.status == 0 {
		return http.StatusOK
	}
	return rec.status
}

// send writes the held response to w, with extra header fields.
func (rec *recorder) send(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	w.WriteHeader(rec.code())
	_, _ = w.Write(rec.body.Bytes())
}
