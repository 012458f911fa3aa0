// Package natscluster starts a NATS JetStream cluster of three nodes on
// loopback, for tests and for the command in cmd/natscluster.
//
// Each node is a nats-server process of its own. It has its own client,
// cluster (route) and monitoring ports, chosen by package freeport, and
// its own store directory under one temporary directory. Every node
// routes to the others, in one cluster named by [Options.Name]. A node
// killed with SIGKILL restarts on the same ports and store directory, and
// catches up from the others.
//
// # Which nats-server
//
// [Start] builds github.com/nats-io/nats-server/v2 at the version in
// tests/go.mod (v2.15.2 when this was written) into a temporary directory,
// once per test binary. It takes about 7 s with a warm build cache and
// 40 s of CPU without one. The alternatives were worse:
//   - Debian's /usr/sbin/nats-server is v2.9.10, three years older than
//     the server that tests/natsjs embeds. Its Raft layer lacks years of
//     fixes to elections and catch-up, which are what a cluster test is about.
//   - An embedded server, the test binary re-executed, would carry -race's
//     instrumentation when CI runs with -race. Three instrumented servers
//     on two cores miss Raft heartbeats, and elections then come from load,
//     not from the kills.
//
// INBOX_NATS_SERVER names another binary, such as /usr/sbin/nats-server,
// and skips the build.
//
// [Cluster.Close] kills every process it started and removes the
// directory. Each process also has Pdeathsig set, so that a test binary
// killed itself leaves no server behind. Nothing touches the machine's
// own NATS on port 4222.
package natscluster
