package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// workload is one measurement's messages: fresh IDs, each with the
// account it credits and the amount.
type workload struct {
	ids      []string
	accounts []int64
	amounts  []int64
	// numAccounts is the number of account rows to create: hot (the
	// -rows value) or one per message (-rows 0).
	numAccounts int
	total       int64 // the sum of the amounts
}

// newWorkload makes n messages with IDs no earlier measurement used. hot
// above 0 sends message i to account fnv32a(id) % hot, contended; 0 gives
// each message an account row of its own.
func newWorkload(n, hot int) *workload {
	prefix := randomName("m")
	w := &workload{ids: make([]string, n), accounts: make([]int64, n), amounts: make([]int64, n), numAccounts: hot}
	if hot <= 0 {
		w.numAccounts = n
	}
	for i := range n {
		id := prefix + "-" + strconv.Itoa(i)
		w.ids[i] = id
		if hot > 0 {
			h := fnv.New32a()
			h.Write([]byte(id))
			w.accounts[i] = int64(h.Sum32() % uint32(hot))
		} else {
			w.accounts[i] = int64(i)
		}
		w.amounts[i] = int64(1 + i%97)
		w.total += w.amounts[i]
	}
	return w
}

// payload is what message i carries: "account amount".
func (w *workload) payload(i int) []byte {
	return []byte(strconv.FormatInt(w.accounts[i], 10) + " " + strconv.FormatInt(w.amounts[i], 10))
}

// entry is one ledger row: the message's ID, account and amount.
type entry struct {
	id      string
	account int64
	amount  int64
}

// parseEntry reads a payload made by workload.payload.
func parseEntry(id string, payload []byte) (entry, error) {
	a, b, ok := strings.Cut(string(payload), " ")
	if !ok {
		return entry{}, fmt.Errorf("message %q: payload %q is not \"account amount\"", id, payload)
	}
	account, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return entry{}, fmt.Errorf("message %q: account: %w", id, err)
	}
	amount, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return entry{}, fmt.Errorf("message %q: amount: %w", id, err)
	}
	return entry{id: id, account: account, amount: amount}, nil
}

// credit is the sum a batch adds to one account.
type credit struct {
	account int64
	amount  int64
}

// credits sums es per account, sorted by account id: the order in which
// a batch takes the accounts' row locks, the same in every transaction,
// so that two batches never wait for each other in a cycle.
func credits(es []entry) []credit {
	sums := map[int64]int64{}
	for _, e := range es {
		sums[e.account] += e.amount
	}
	out := make([]credit, 0, len(sums))
	for a, s := range sums {
		out = append(out, credit{a, s})
	}
	slices.SortFunc(out, func(x, y credit) int { return int(x.account - y.account) })
	return out
}

// progress counts the messages whose ledger row committed, and closes
// done when all n have; it times the consumer from begin to the last.
type progress struct {
	n       int64
	count   atomic.Int64
	retries atomic.Int64 // failures the mode counts itself (plain, watermill)
	done    chan struct{}
	once    sync.Once

	mu         sync.Mutex
	start, end time.Time
}

func newProgress(n int) *progress { return &progress{n: int64(n), done: make(chan struct{})} }

// begin marks the start: the consumer is ready to take deliveries.
func (p *progress) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		p.start = time.Now()
	}
}

func (p *progress) add(k int64) {
	if p.count.Add(k) >= p.n {
		p.once.Do(func() {
			p.mu.Lock()
			p.end = time.Now()
			p.mu.Unlock()
			close(p.done)
		})
	}
}

// elapsed is the time from begin to the n-th message, or to now.
func (p *progress) elapsed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		return 0
	}
	end := p.end
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(p.start)
}

// randomName returns prefix, "_" and 12 random hex digits: schemas,
// databases, queues and streams of one measurement.
func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}
