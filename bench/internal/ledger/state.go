package ledger

import "fmt"

// State is what the checks read of the tables.
type State struct {
	Rows, Distinct int64
	Sums           map[int64]int64 // the ledger's amounts by account
	Balances       map[int64]int64 // the accounts' non-zero balances
}

// NewState returns an empty State, its maps made.
func NewState() *State {
	return &State{Sums: map[int64]int64{}, Balances: map[int64]int64{}}
}

// Problems compares the tables with what was processed: a ledger row per
// processed message, no ID twice, each balance the sum of its ledger
// rows, and, when the measurement completed, every message once.
// processed below 0 skips the first comparison.
func (s *State) Problems(w *Workload, processed int64, complete bool) []string {
	var ps []string
	if processed >= 0 && s.Rows != processed {
		ps = append(ps, fmt.Sprintf("the ledger has %d rows, the consumer processed %d messages", s.Rows, processed))
	}
	if complete && s.Rows != int64(len(w.IDs)) {
		ps = append(ps, fmt.Sprintf("the ledger has %d rows, want %d", s.Rows, len(w.IDs)))
	}
	if s.Distinct != s.Rows {
		ps = append(ps, fmt.Sprintf("the ledger has %d rows but %d distinct IDs: messages processed twice", s.Rows, s.Distinct))
	}
	return append(ps, s.balanceProblems(w, complete)...)
}

// balanceProblems compares each balance with its ledger rows' sum.
func (s *State) balanceProblems(w *Workload, complete bool) []string {
	var ps []string
	var ledger, balances int64
	wrong := 0
	for a, sum := range s.Sums {
		ledger += sum
		if s.Balances[a] != sum {
			wrong++
		}
	}
	for a, b := range s.Balances {
		balances += b
		if _, ok := s.Sums[a]; !ok {
			wrong++
		}
	}
	if wrong > 0 {
		ps = append(ps, fmt.Sprintf("%d accounts' balances differ from their ledger rows' sums", wrong))
	}
	if balances != ledger {
		ps = append(ps, fmt.Sprintf("the balances sum to %d, the ledger's amounts to %d", balances, ledger))
	}
	if complete && balances != w.Total {
		ps = append(ps, fmt.Sprintf("the balances sum to %d, the messages' amounts to %d", balances, w.Total))
	}
	return ps
}
