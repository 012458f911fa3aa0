// Package cli holds what the benchmark commands' flags share.
package cli

import (
	"fmt"
	"slices"
	"strings"
)

// List splits a comma-separated flag value and checks each item against
// known.
func List(s string, known []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(known, v) {
			return nil, fmt.Errorf("unknown %q (known: %s)", v, strings.Join(known, ", "))
		}
		out = append(out, v)
	}
	return out, nil
}
