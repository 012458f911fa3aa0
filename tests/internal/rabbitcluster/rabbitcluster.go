// Package rabbitcluster starts a RabbitMQ cluster of three nodes on
// loopback, for tests and for the command in cmd/rabbitcluster.
//
// Each node is a rabbitmq-server of its own, with its own Erlang node
// name, AMQP and distribution ports, and data and log directories under
// one temporary directory. The nodes share an Erlang cookie of their own,
// in that directory, which is their HOME. They find each other through
// the machine's epmd on port 4369, which all Erlang nodes share. No
// plugin is enabled, so that no management listener takes port 15672.
//
// Node 1 starts first. Nodes 2 and 3 then start together and join it
// during their boot, by classic peer discovery. That needs no rabbitmqctl,
// whose every call costs seconds of CPU. A node killed with SIGKILL
// rejoins the cluster from its data directory when it restarts.
//
// [Cluster.Close] kills every process it started and removes the
// directory. A test process that dies without Close takes the nodes with
// it (Pdeathsig), and leaves only the directory. Nothing touches the machine's own RabbitMQ, its cookie or its
// configuration.
package rabbitcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/tests/internal/freeport"
)

// The programs the cluster needs, from Debian's rabbitmq-server. Not
// /usr/sbin's wrappers: run as root, they switch to the rabbitmq user and
// its home. INBOX_RABBITMQ_SERVER and INBOX_RABBITMQCTL name others.
var (
	Server = envOr("INBOX_RABBITMQ_SERVER", "/usr/lib/rabbitmq/bin/rabbitmq-server")
	Ctl    = envOr("INBOX_RABBITMQCTL", "/usr/lib/rabbitmq/bin/rabbitmqctl")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ErrUnavailable is returned by [Start] when a program it needs is missing.
var ErrUnavailable = errors.New("rabbitcluster: rabbitmq-server is not installed")

// Available returns an error wrapping ErrUnavailable when a program that
// the cluster needs is missing.
func Available() error {
	for _, p := range []string{Server, Ctl} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	return nil
}

// Options configure [Start]. The zero value starts three nodes.
type Options struct {
	// Nodes is the number of nodes. Defaults to 3.
	Nodes int
	// Logger receives the cluster's progress. Defaults to a discarding one.
	Logger *slog.Logger
	// Dir is where the temporary directory is made. Defaults to os.TempDir().
	Dir string
}

// Node is one rabbitmq-server of the cluster.
type Node struct {
	// Name is "node1", "node2"…
	Name string
	// Erlang is the Erlang node name, such as inboxtest3fa1c2n1@localhost.
	Erlang string
	// Port is the AMQP port on 127.0.0.1; DistPort is Erlang distribution's.
	Port, DistPort int

	dir    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL returns the node's AMQP URL, as the guest user.
func (n *Node) URL() string {
	return "amqp://guest:guest@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) + "/"
}

// Running reports whether the node's process runs.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Log returns the end of the node's log, for a failure's message.
func (n *Node) Log() string {
	var out []byte
	for _, f := range []string{filepath.Join(n.dir, "stdout.log"), filepath.Join(n.dir, "log", n.Erlang+".log")} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		out = append(out, "\n--- "+f+"\n"...)
		out = append(out, b...)
	}
	return string(out)
}

// LogLines returns the lines of the node's log that contain any of
// words, at most limit of them, the last ones.
func (n *Node) LogLines(limit int, words ...string) []string {
	b, err := os.ReadFile(filepath.Join(n.dir, "log", n.Erlang+".log"))
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out[max(0, len(out)-limit):]
}

// Cluster is the running cluster. Its methods are safe for concurrent use.
type Cluster struct {
	// Nodes are the nodes, node 1 first.
	Nodes []*Node

	dir string
	log *slog.Logger
}

// Start makes a temporary directory, starts the nodes, and returns once
// every node runs in a cluster of all of them. On an error it removes what
// it started.
func Start(ctx context.Context, opts *Options) (_ *Cluster, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp(o.Dir, "inbox-rabbitcluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, log: o.Logger}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	begin := time.Now()
	if err := c.prepare(o.Nodes); err != nil {
		return nil, err
	}
	if err := c.start(ctx, c.Nodes[0]); err != nil {
		return nil, err
	}
	// The joiners together: each joins node 1 as it boots.
	errs := make(chan error, len(c.Nodes))
	for _, n := range c.Nodes[1:] {
		go func() { errs <- c.start(ctx, n) }()
	}
	for range c.Nodes[1:] {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	if err := c.WaitClustered(ctx); err != nil {
		return nil, err
	}
	c.log.Info("rabbitmq cluster running", "nodes", len(c.Nodes), "took", time.Since(begin).Round(time.Millisecond), "dir", dir)
	return c, nil
}

// prepare writes the cookie, the empty plugin list and each node's files.
func (c *Cluster) prepare(nodes int) error {
	ports, err := freeport.Ports(2 * nodes)
	if err != nil {
		return err
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	for i := range nodes {
		n := &Node{Name: "node" + strconv.Itoa(i+1), Port: ports[2*i], DistPort: ports[2*i+1],
			Erlang: "inboxtest" + hex.EncodeToString(suffix) + "n" + strconv.Itoa(i+1) + "@localhost"}
		n.dir = filepath.Join(c.dir, n.Name)
		c.Nodes = append(c.Nodes, n)
	}
	cookie := make([]byte, 20)
	_, _ = rand.Read(cookie)
	if err := os.WriteFile(filepath.Join(c.dir, ".erlang.cookie"), []byte(strings.ToUpper(hex.EncodeToString(cookie))), 0o400); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "rabbitmq-env.conf"), nil, 0o644); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.dir, "rabbitmq.conf"), []byte(c.config(n)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// config is n's rabbitmq.conf: its listener on loopback, and node 1 as
// the peer to join on the first boot.
func (c *Cluster) config(n *Node) string {
	return strings.Join([]string{
		"listeners.tcp.1 = 127.0.0.1:" + strconv.Itoa(n.Port),
		"cluster_formation.peer_discovery_backend = classic_config",
		"cluster_formation.classic_config.nodes.1 = " + c.Nodes[0].Erlang,
		"log.file.level = info",
		"log.console = false",
		"",
	}, "\n")
}

// env is the environment of n's server and of rabbitmqctl: the cluster's
// HOME (its cookie), and none of the machine's RabbitMQ settings.
func (c *Cluster) env(n *Node) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "ERL_") &&
			!strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return append(env,
		"HOME="+c.dir,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(c.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(c.dir, "enabled_plugins"),
		"RABBITMQ_NODENAME="+n.Erlang,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.DistPort),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "rabbitmq.pid"),
		// rabbitmq-server then execs erl, which becomes beam.smp, instead of
		// running it in the background and waiting: Pdeathsig reaches only
		// the process started, and it must be beam.smp itself.
		"RUNNING_UNDER_SYSTEMD=true",
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
}

// spawner starts the servers from one goroutine locked to its thread,
// which never ends: Pdeathsig follows the thread that started a child, and
// it kills the nodes if the test process dies without Close.
var spawner = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// start starts n's server in a process group of its own, so that Kill
// reaches beam.smp's children too and a Ctrl-C reaches none of them. It
// waits until n accepts AMQP connections, which it does once it joined.
func (c *Cluster) start(ctx context.Context, n *Node) error {
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = out.Close() }()
	cmd := exec.Command(Server)
	cmd.Dir, cmd.Env = n.dir, c.env(n)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return fmt.Errorf("rabbitcluster: start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	begin := time.Now()
	if err := waitAMQP(ctx, n); err != nil {
		return err
	}
	c.log.Info("rabbitmq node up", "node", n.Name, "erlang", n.Erlang, "port", n.Port, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// bootTimeout bounds a node's boot: about 15 s on a loaded 2-core machine.
const bootTimeout = 3 * time.Minute

// waitAMQP waits until n completes an AMQP handshake.
func waitAMQP(ctx context.Context, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	var last error
	for {
		conn, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			return conn.Close()
		}
		last = err
		if !n.Running() {
			return fmt.Errorf("rabbitcluster: %s exited: %v%s", n.Name, last, n.Log())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitcluster: %s: %w: %v%s", n.Name, ctx.Err(), last, n.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill kills node i (0-based) with SIGKILL, its whole process group:
// beam.smp and its helpers. It waits until the server has exited.
func (c *Cluster) Kill(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil || !n.Running() {
		return fmt.Errorf("rabbitcluster: %s is not running", n.Name)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("rabbitcluster: %s still running 30 s after SIGKILL", n.Name)
	}
	c.log.Info("rabbitmq node killed", "node", n.Name)
	return nil
}

// Restart starts node i (0-based) again after Kill, and waits until every
// node runs in the cluster again.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.Nodes[i]
	if n.Running() {
		return fmt.Errorf("rabbitcluster: %s is running", n.Name)
	}
	begin := time.Now()
	if err := c.start(ctx, n); err != nil {
		return err
	}
	if err := c.WaitClustered(ctx); err != nil {
		return err
	}
	c.log.Info("rabbitmq node rejoined", "node", n.Name, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// URLs returns every node's AMQP URL, node 1 first.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// Node returns the node whose Erlang node name is erlang, or nil.
func (c *Cluster) Node(erlang string) *Node {
	for _, n := range c.Nodes {
		if n.Erlang == erlang {
			return n
		}
	}
	return nil
}

// Ctl runs rabbitmqctl against a running node with args, and returns its
// standard output. Each call costs a second or more of CPU.
func (c *Cluster) Ctl(ctx context.Context, args ...string) ([]byte, error) {
	i := slices.IndexFunc(c.Nodes, (*Node).Running)
	if i < 0 {
		return nil, errors.New("rabbitcluster: no node is running")
	}
	n := c.Nodes[i]
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Ctl, append([]string{"-n", n.Erlang, "-q"}, args...)...)
	cmd.Dir, cmd.Env = c.dir, c.env(n)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("rabbitcluster: rabbitmqctl %s: %w: %s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out, nil
}

// Running returns the Erlang names of the nodes that the cluster reports
// running.
func (c *Cluster) Running(ctx context.Context) ([]string, error) {
	out, err := c.Ctl(ctx, "cluster_status", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var st struct {
		Running []string `json:"running_nodes"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("rabbitcluster: cluster_status: %w: %s", err, out)
	}
	slices.Sort(st.Running)
	return st.Running, nil
}

// WaitClustered waits until the cluster reports every node running.
func (c *Cluster) WaitClustered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var want []string
	for _, n := range c.Nodes {
		want = append(want, n.Erlang)
	}
	slices.Sort(want)
	for {
		got, err := c.Running(ctx)
		if err == nil && slices.Equal(got, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitcluster: running nodes %v (%v), want %v: %w", got, err, want, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Queue is what rabbitmqctl list_queues tells of a queue.
type Queue struct {
	Name     string   `json:"name"`
	Type     string   `json:"type"`
	Leader   string   `json:"leader"`
	Members  []string `json:"members"`
	Online   []string `json:"online"`
	Messages int      `json:"messages"`
}

// Queues lists the queues of the default vhost whose names start with
// prefix.
func (c *Cluster) Queues(ctx context.Context, prefix string) ([]Queue, error) {
	out, err := c.Ctl(ctx, "list_queues", "name", "type", "leader", "members", "online", "messages", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var all []Queue
	if err := json.Unmarshal(out, &all); err != nil {
		return nil, fmt.Errorf("rabbitcluster: list_queues: %w: %s", err, out)
	}
	var qs []Queue
	for _, q := range all {
		if strings.HasPrefix(q.Name, prefix) {
			qs = append(qs, q)
		}
	}
	slices.SortFunc(qs, func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
	return qs, nil
}

// Leader returns the index of the node that leads the quorum queue named
// queue.
func (c *Cluster) Leader(ctx context.Context, queue string) (int, error) {
	qs, err := c.Queues(ctx, queue)
	if err != nil {
		return -1, err
	}
	for _, q := range qs {
		if q.Name != queue {
			continue
		}
		for i, n := range c.Nodes {
			if n.Erlang == q.Leader {
				return i, nil
			}
		}
		return -1, fmt.Errorf("rabbitcluster: queue %q: leader %q is none of the cluster's nodes", queue, q.Leader)
	}
	return -1, fmt.Errorf("rabbitcluster: no queue %q", queue)
}

// Close kills every node and removes the cluster's directory.
func (c *Cluster) Close() error {
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.mu.Unlock()
		if cmd != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	return os.RemoveAll(c.dir)
}
