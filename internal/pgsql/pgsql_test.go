package pgsql

import (
	"testing"
	"time"
)

func TestLockTimeout(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5000ms", 300 * time.Millisecond: "300ms", time.Microsecond: "1ms", 0: "1ms", time.Minute: "60000ms",
	} {
		if got := LockTimeout(d); got != want {
			t.Errorf("LockTimeout(%v) = %q, want %q", d, got, want)
		}
	}
	if LockTimeout(defaultLockTimeout) != LockTimeout(defaultLockTimeout+time.Nanosecond) {
		t.Error("the kept default text differs from the computed one")
	}
}
