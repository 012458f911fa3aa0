// Package killcount counts a crash test's SIGKILLs by where they struck.
package killcount

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Counter counts kills per point. Its zero value is ready, and safe for
// concurrent use.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts one kill at point.
func (c *Counter) Add(point string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[point]++
}

// At returns the kills at point.
func (c *Counter) At(point string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[point]
}

// Total returns the kills at every point.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.n {
		n += k
	}
	return n
}

// String lists the kills per point, in the points' order: "a 3, b 1".
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(c.n)) {
		parts = append(parts, fmt.Sprintf("%s %d", p, c.n[p]))
	}
	return strings.Join(parts, ", ")
}
