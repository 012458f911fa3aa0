// Package ledger is the benchmarks' workload: messages that credit
// accounts, the ledger rows that prove each message's effect, and the
// checks that find a message lost or processed twice.
//
// Each message credits an account. In one transaction its handler inserts
// a ledger row (message ID, account, amount) and adds the amount to the
// account's row. With hot accounts (hot > 0) message → account is
// fnv32a(ID) % hot: contended rows. With hot 0 each message has an
// account row of its own: nothing shared.
package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Workload is one measurement's messages: fresh IDs, each with the
// account it credits and the amount.
type Workload struct {
	IDs      []string
	Accounts []int64
	Amounts  []int64
	// NumAccounts is the number of account rows to create: hot, or one
	// per message (hot 0).
	NumAccounts int
	Total       int64 // the sum of the amounts
}

// New makes n messages whose IDs start with prefix. The same prefix, n
// and hot make the same workload, in any process.
func New(prefix string, n, hot int) *Workload {
	w := &Workload{IDs: make([]string, n), Accounts: make([]int64, n), Amounts: make([]int64, n), NumAccounts: hot}
	if hot <= 0 {
		w.NumAccounts = n
	}
	for i := range n {
		id := prefix + "-" + strconv.Itoa(i)
		w.IDs[i] = id
		if hot > 0 {
			h := fnv.New32a()
			h.Write([]byte(id))
			w.Accounts[i] = int64(h.Sum32() % uint32(hot))
		} else {
			w.Accounts[i] = int64(i)
		}
		w.Amounts[i] = int64(1 + i%97)
		w.Total += w.Amounts[i]
	}
	return w
}

// Fresh makes n messages with IDs no earlier measurement used.
func Fresh(n, hot int) *Workload { return New(RandomName("m"), n, hot) }

// Payload is what message i carries: "account amount".
func (w *Workload) Payload(i int) []byte {
	return []byte(strconv.FormatInt(w.Accounts[i], 10) + " " + strconv.FormatInt(w.Amounts[i], 10))
}

// Entry returns message i's ledger row.
func (w *Workload) Entry(i int) Entry {
	return Entry{ID: w.IDs[i], Account: w.Accounts[i], Amount: w.Amounts[i]}
}

// Entry is one ledger row: the message's ID, account and amount.
type Entry struct {
	ID      string
	Account int64
	Amount  int64
}

// ParseEntry reads a payload made by Workload.Payload.
func ParseEntry(id string, payload []byte) (Entry, error) {
	a, b, ok := strings.Cut(string(payload), " ")
	if !ok {
		return Entry{}, fmt.Errorf("message %q: payload %q is not \"account amount\"", id, payload)
	}
	account, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("message %q: account: %w", id, err)
	}
	amount, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("message %q: amount: %w", id, err)
	}
	return Entry{ID: id, Account: account, Amount: amount}, nil
}

// Credit is the sum a batch adds to one account.
type Credit struct {
	Account int64
	Amount  int64
}

// Credits sums es per account, sorted by account id: the order in which
// a batch takes the accounts' row locks, the same in every transaction,
// so that two batches never wait for each other in a cycle.
func Credits(es []Entry) []Credit {
	sums := map[int64]int64{}
	for _, e := range es {
		sums[e.Account] += e.Amount
	}
	out := make([]Credit, 0, len(sums))
	for a, s := range sums {
		out = append(out, Credit{a, s})
	}
	slices.SortFunc(out, func(x, y Credit) int { return int(x.Account - y.Account) })
	return out
}

// RandomName returns prefix, "_" and 12 random hex digits: schemas,
// databases, queues and streams of one measurement.
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}
