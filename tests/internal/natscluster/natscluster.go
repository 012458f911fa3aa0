package natscluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/tests/internal/freeport"
)

// EnvServer names a nats-server binary to use instead of building one.
const EnvServer = "INBOX_NATS_SERVER"

// waitTimeout bounds each wait of this package that has no deadline of
// its own.
const waitTimeout = 2 * time.Minute

// Options configure [Start] and [Launch]. The zero value starts three nodes.
type Options struct {
	// Nodes is the number of nodes. Defaults to 3.
	Nodes int
	// Name is the cluster's name. Defaults to "inbox-test".
	Name string
	// Binary is the nats-server to run. Defaults to INBOX_NATS_SERVER, or
	// else one that [Build] compiles.
	Binary string
	// Dir is where the temporary directory is made. Defaults to os.TempDir().
	Dir string
	// Logger receives the cluster's progress. Defaults to a discarding one.
	Logger *slog.Logger
}

// Node is one nats-server of the cluster.
type Node struct {
	// Name is the server's name, "n1", "n2"…, as stream and consumer infos
	// name their leaders and replicas.
	Name string
	// Port, ClusterPort and MonitorPort are the client, route and HTTP
	// monitoring ports on 127.0.0.1.
	Port, ClusterPort, MonitorPort int

	c      *Cluster
	dir    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL returns the node's client URL.
func (n *Node) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

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

// Kill kills the node with SIGKILL and waits until it has exited.
func (n *Node) Kill() error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("natscluster: %s was never started", n.Name)
	}
	select {
	case <-exited:
		return fmt.Errorf("natscluster: %s is not running", n.Name)
	default:
	}
	_ = cmd.Process.Kill()
	<-exited
	n.c.log.Info("nats node killed", "node", n.Name)
	return nil
}

// Restart starts the node again after Kill, on the same ports and store
// directory, and waits until it serves its monitoring port. It does not
// wait for JetStream to catch up: [Cluster.WaitHealthy] and
// [Cluster.WaitStreamCurrent] do.
func (n *Node) Restart(ctx context.Context) error {
	if n.Running() {
		return fmt.Errorf("natscluster: %s is running", n.Name)
	}
	if err := n.start(); err != nil {
		return err
	}
	if err := n.waitServing(ctx); err != nil {
		return err
	}
	n.c.log.Info("nats node restarted", "node", n.Name)
	return nil
}

// Log returns the end of the node's log, for a failure's message.
func (n *Node) Log() string {
	b, err := os.ReadFile(filepath.Join(n.dir, "server.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Cluster is the running cluster. Its methods are safe for concurrent use.
type Cluster struct {
	// Nodes are the servers, n1 first.
	Nodes []*Node
	// Name is the cluster's name.
	Name string

	bin string
	dir string
	log *slog.Logger
}

// Launch makes a temporary directory, starts the nodes, and returns once
// every node reports itself healthy. On an error it removes what it
// started. [Start] is Launch for a test.
func Launch(ctx context.Context, opts *Options) (_ *Cluster, err error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Name == "" {
		o.Name = "inbox-test"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp(o.Dir, "inbox-nats-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: o.Name, bin: o.Binary, dir: dir, log: o.Logger}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if c.bin == "" {
		c.bin = os.Getenv(EnvServer)
	}
	if c.bin == "" {
		if c.bin, err = Build(ctx, dir); err != nil {
			return nil, err
		}
	}
	if err := c.configure(o.Nodes); err != nil {
		return nil, err
	}
	begin := time.Now()
	for _, n := range c.Nodes {
		if err := n.start(); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	c.log.Info("nats cluster healthy", "nodes", len(c.Nodes), "took", time.Since(begin).Round(time.Millisecond), "dir", dir, "binary", c.bin)
	return c, nil
}

// Build compiles github.com/nats-io/nats-server/v2, at the version the
// calling module requires, into dir and returns the binary's path. It
// runs go build in the current directory, which must be in the tests
// module or the repository's go.work.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("natscluster: go build of nats-server (or set %s): %w\n%s", EnvServer, err, out)
	}
	return bin, nil
}

// configure chooses the ports and writes each node's configuration file.
func (c *Cluster) configure(nodes int) error {
	ports, err := freeport.Ports(3 * nodes)
	if err != nil {
		return err
	}
	var routes []string
	for i := range nodes {
		p := ports[3*i:]
		n := &Node{Name: "n" + strconv.Itoa(i+1), Port: p[0], ClusterPort: p[1], MonitorPort: p[2], c: c}
		n.dir = filepath.Join(c.dir, n.Name)
		c.Nodes = append(c.Nodes, n)
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(n.ClusterPort))
	}
	for _, n := range c.Nodes {
		if err := os.MkdirAll(filepath.Join(n.dir, "store"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.dir, "server.conf"), []byte(c.config(n, routes)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// config is n's configuration file: loopback only, its own store, routes
// to every node (a server ignores the route to itself).
func (c *Cluster) config(n *Node, routes []string) string {
	return fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
log_file: %q
jetstream {
	store_dir: %q
	max_memory_store: 256MB
	max_file_store: 2GB
}
cluster {
	name: %q
	listen: 127.0.0.1:%d
	routes: [%s]
}
`, n.Name, n.Port, n.MonitorPort, filepath.Join(n.dir, "server.log"), filepath.Join(n.dir, "store"),
		c.Name, n.ClusterPort, strings.Join(routes, ", "))
}

// start starts n's nats-server in a process group of its own, so that a
// Ctrl-C of the command reaches it only through Close. Pdeathsig kills it
// when the process that started it dies.
func (n *Node) start() error {
	cmd := exec.Command(n.c.bin, "-c", filepath.Join(n.dir, "server.conf"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("natscluster: start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	n.c.log.Debug("nats node started", "node", n.Name, "port", n.Port)
	return nil
}

// URLs returns every node's client URL, comma-separated, as nats.Connect
// takes them. A client given all of them reconnects to a live one.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Node returns the node named name, such as a stream's leader, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Close kills every node and removes the cluster's directory.
func (c *Cluster) Close() error {
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return os.RemoveAll(c.dir)
}

// WaitHealthy waits until every running node answers its /healthz with
// 200: JetStream is enabled, it sees a meta leader, and its streams and
// consumers are current. It waits at most 2 min, or until ctx is done.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		if err := n.poll(ctx, "/healthz"); err != nil {
			return err
		}
	}
	return nil
}

// waitServing waits until n's monitoring port answers.
func (n *Node) waitServing(ctx context.Context) error { return n.poll(ctx, "/varz") }

// poll asks n for path until it answers 200, n exits, or the wait ends.
func (n *Node) poll(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	url := "http://127.0.0.1:" + strconv.Itoa(n.MonitorPort) + path
	var last string
	for {
		status, body, err := get(ctx, url)
		if err == nil && status == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("status %d, %q, %v", status, body, err)
		if !n.Running() {
			return fmt.Errorf("natscluster: %s exited while waiting for %s (%s)\n%s", n.Name, path, last, n.Log())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natscluster: %s %s: %w; last answer: %s", n.Name, path, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func get(ctx context.Context, url string) (int, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// ErrNotCurrent is wrapped by WaitStreamCurrent's error when the wait
// ended before every replica was current.
var ErrNotCurrent = errors.New("natscluster: replicas not current")

// WaitStreamCurrent waits until stream has a leader and every one of its
// replicas is online and current, and so is each of consumers. It waits
// at most 2 min, or until ctx is done; the error then tells what was seen.
func (c *Cluster) WaitStreamCurrent(ctx context.Context, js jetstream.JetStream, stream string, consumers ...string) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	var last string
	for {
		seen, ok := c.current(ctx, js, stream, consumers)
		if ok {
			return nil
		}
		last = seen
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: stream %s: %w; last seen: %s", ErrNotCurrent, stream, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// current tells whether stream and consumers are current, and what it saw.
func (c *Cluster) current(ctx context.Context, js jetstream.JetStream, stream string, consumers []string) (string, bool) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(rctx, stream)
	if err != nil {
		return err.Error(), false
	}
	info, err := st.Info(rctx)
	if err != nil {
		return err.Error(), false
	}
	if seen, ok := replicasCurrent("stream "+stream, info.Config.Replicas, info.Cluster); !ok {
		return seen, false
	}
	for _, name := range consumers {
		cons, err := st.Consumer(rctx, name)
		if err != nil {
			return err.Error(), false
		}
		ci, err := cons.Info(rctx)
		if err != nil {
			return err.Error(), false
		}
		if seen, ok := replicasCurrent("consumer "+name, info.Config.Replicas, ci.Cluster); !ok {
			return seen, false
		}
	}
	return "", true
}

// replicasCurrent tells whether ci has a leader and replicas-1 current,
// online peers.
func replicasCurrent(what string, replicas int, ci *jetstream.ClusterInfo) (string, bool) {
	if ci == nil || ci.Leader == "" {
		return what + ": no leader", false
	}
	peers := make([]string, 0, len(ci.Replicas))
	ok := len(ci.Replicas) == max(replicas, 1)-1
	for _, p := range ci.Replicas {
		peers = append(peers, fmt.Sprintf("%s current=%v offline=%v lag=%d", p.Name, p.Current, p.Offline, p.Lag))
		if !p.Current || p.Offline {
			ok = false
		}
	}
	return fmt.Sprintf("%s: leader %s, peers [%s]", what, ci.Leader, strings.Join(peers, "; ")), ok
}

// StreamLeader returns the node that leads stream now.
func (c *Cluster) StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) (*Node, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	return c.leader("stream "+stream, info.Cluster)
}

// ConsumerLeader returns the node that leads stream's consumer now.
func (c *Cluster) ConsumerLeader(ctx context.Context, js jetstream.JetStream, stream, consumer string) (*Node, error) {
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	return c.leader("consumer "+consumer, info.Cluster)
}

func (c *Cluster) leader(what string, ci *jetstream.ClusterInfo) (*Node, error) {
	if ci == nil || ci.Leader == "" {
		return nil, fmt.Errorf("natscluster: %s has no leader", what)
	}
	if n := c.Node(ci.Leader); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("natscluster: %s's leader %q is no node of this cluster", what, ci.Leader)
}
