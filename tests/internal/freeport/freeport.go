// Package freeport finds free TCP ports on loopback for the servers that
// tests start themselves: a PostgreSQL pair, Galera nodes.
package freeport

import (
	"fmt"
	"net"
)

// Ports asks the kernel for n free ports on 127.0.0.1. It holds each
// until all are chosen, so that no two are the same. They were free a
// moment ago: a server started on one may still find it taken.
func Ports(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
