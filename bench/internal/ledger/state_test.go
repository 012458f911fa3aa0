package ledger

import (
	"strings"
	"testing"
)

// TestProblems checks that the checks catch what they are for.
func TestProblems(t *testing.T) {
	t.Parallel()
	w := New("m", 4, 2)
	good := func() *State {
		s := NewState()
		s.Rows, s.Distinct = 4, 4
		for i := range w.IDs {
			s.Sums[w.Accounts[i]] += w.Amounts[i]
			s.Balances[w.Accounts[i]] += w.Amounts[i]
		}
		return s
	}
	tests := []struct {
		name      string
		change    func(s *State)
		processed int64
		complete  bool
		want      string // in the problems; "" for none
	}{
		{"all good", func(*State) {}, 4, true, ""},
		{"processed twice", func(s *State) { s.Rows, s.Distinct = 5, 4 }, 5, true, "distinct IDs"},
		{"lost", func(s *State) { s.Rows, s.Distinct = 3, 3 }, 3, true, "want 4"},
		{"more rows than processed", func(*State) {}, 3, false, "processed 3 messages"},
		{"processed not known", func(*State) {}, -1, true, ""},
		{"balance off", func(s *State) { s.Balances[w.Accounts[0]]++ }, 4, true, "balances"},
		{"timed out, consistent", func(s *State) { s.Rows, s.Distinct = 4, 4 }, 4, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := good()
			tt.change(s)
			ps := strings.Join(s.Problems(w, tt.processed, tt.complete), "; ")
			switch {
			case tt.want == "" && ps != "":
				t.Errorf("problems %q, want none", ps)
			case tt.want != "" && !strings.Contains(ps, tt.want):
				t.Errorf("problems %q, want one with %q", ps, tt.want)
			}
		})
	}
}

// TestNew checks that a workload is the same in every process that
// makes it from the same prefix, and spreads over hot rows.
func TestNew(t *testing.T) {
	t.Parallel()
	a, b := New("p", 100, 16), New("p", 100, 16)
	for i := range a.IDs {
		if a.Entry(i) != b.Entry(i) || string(a.Payload(i)) != string(b.Payload(i)) {
			t.Fatalf("message %d: %+v and %+v", i, a.Entry(i), b.Entry(i))
		}
		e, err := ParseEntry(a.IDs[i], a.Payload(i))
		if err != nil || e != a.Entry(i) {
			t.Fatalf("ParseEntry(%q) = %+v, %v; want %+v", a.Payload(i), e, err, a.Entry(i))
		}
	}
	if a.NumAccounts != 16 || New("p", 100, 0).NumAccounts != 100 {
		t.Errorf("accounts %d and %d, want 16 and 100", a.NumAccounts, New("p", 100, 0).NumAccounts)
	}
}
