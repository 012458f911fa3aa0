package rabbitmq

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestBuckets(t *testing.T) {
	t.Parallel()
	c, err := (&Config{Queue: "q", DelayBuckets: []time.Duration{time.Minute, 250 * time.Millisecond, time.Second, time.Second}}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &Source{cfg: c}
	for _, tc := range []struct {
		delay time.Duration
		want  string
	}{
		{time.Millisecond, "q.retry.250ms"},
		{250 * time.Millisecond, "q.retry.250ms"},
		{251 * time.Millisecond, "q.retry.1s"},
		{time.Second, "q.retry.1s"},
		{30 * time.Second, "q.retry.1m"},
		{time.Hour, "q.retry.1m"}, // down to the largest
	} {
		if got := s.delayQueue(s.bucket(tc.delay)); got != tc.want {
			t.Errorf("delay %v: queue %s, want %s", tc.delay, got, tc.want)
		}
	}
	if got := len(s.Queues()); got != 4 {
		t.Errorf("%d queues, want the queue and 3 delay queues", got)
	}
	for _, b := range DefaultDelayBuckets {
		if b%time.Millisecond != 0 {
			t.Errorf("default bucket %v is not whole milliseconds", b)
		}
	}
	if got := DelayQueue("q", 90*time.Minute); got != "q.retry.90m" {
		t.Errorf("DelayQueue(90 min) = %s", got)
	}
	if _, err := (&Config{Queue: "q", DelayBuckets: []time.Duration{time.Microsecond}}).withDefaults(); err == nil {
		t.Error("a bucket below 1 ms was accepted")
	}
	if _, err := (&Config{}).withDefaults(); err == nil {
		t.Error("a Config without Queue was accepted")
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"s", "s"}, {[]byte("b"), "b"}, {int8(-3), "-3"}, {uint16(4), "4"}, {int64(1) << 40, "1099511627776"},
		{true, "true"}, {1.5, "1.5"}, {float32(0.25), "0.25"}, {nil, ""},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "2026-01-02T03:04:05Z"},
		{amqp.Decimal{Scale: 2, Value: 1234}, "1234e-2"},
		{[]any{"a", int32(1)}, "[a 1]"},
	} {
		if got := render(tc.v); got != tc.want {
			t.Errorf("render(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
