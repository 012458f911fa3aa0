package sqldialect

import (
	"strings"
	"testing"
)

func TestMentionsName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query, name string
		want        bool
	}{
		{"SET SESSION innodb_lock_wait_timeout = 30", "lock_wait_timeout", true},
		{"SET innodb_lock_wait_timeout=30", "lock_wait_timeout", true},
		{"SET @@SESSION.innodb_lock_wait_timeout = 30", "lock_wait_timeout", true},
		{"SET GLOBAL INNODB_LOCK_WAIT_TIMEOUT = 30", "lock_wait_timeout", true},
		{"/* app */ set session Innodb_Lock_Wait_Timeout = 30", "lock_wait_timeout", true},
		{"lock_wait_timeout", "lock_wait_timeout", true},               // the whole query
		{"SELECT 1; SET lock_wait_timeout", "lock_wait_timeout", true}, // at the end
		{"lock_wait_timeou", "lock_wait_timeout", false},               // shorter than name
		{"SET SESSION innodb_lock_wait = 30", "lock_wait_timeout", false},
		{"SET innodb_lock__wait_timeout = 30", "lock_wait_timeout", false},
		{"SET innodb_loc\u212a_wait_timeout = 30", "lock_wait_timeout", false}, // the Kelvin sign is not a k to SQL
		{"_____________________", "lock_wait_timeout", false},
		{"PRAGMA busy_timeout = 30000", "busy_timeout", true},
		{"PRAGMA main.BUSY_TIMEOUT(30000)", "busy_timeout", true},
		{`PRAGMA "busy_timeout" = 30000`, "busy_timeout", true},
		{"_busy_timeout", "busy_timeout", true},
		{"busy_timeou", "busy_timeout", false},
		{"", "busy_timeout", false},
		{long, "busy_timeout", false},
		{long + "PRAGMA busy_timeout = 1", "busy_timeout", true},
		{"SET SESSION TimeZone = 'UTC'", "timezone", true}, // a name without '_'
		{"SET SESSION time_zone = 'UTC'", "timezone", false},
	} {
		if got := MentionsName(tc.query, tc.name); got != tc.want {
			t.Errorf("MentionsName(%.60q, %q) = %v, want %v", tc.query, tc.name, got, tc.want)
		}
	}
}

// long is a batch's statement: many names with '_', none the one looked for.
var long = strings.Repeat("INSERT INTO inbox_messages (consumer_id, message_id) VALUES (?, ?); ", 200)

// Not parallel: AllocsPerRun refuses to run beside other tests.
func TestMentionsNameAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(10, func() { MentionsName(long, "busy_timeout") }); n != 0 {
		t.Errorf("MentionsName allocates %v times a call, want none", n)
	}
}

func BenchmarkMentionsName(b *testing.B) {
	b.SetBytes(int64(len(long)))
	for b.Loop() {
		MentionsName(long, "busy_timeout")
	}
}
