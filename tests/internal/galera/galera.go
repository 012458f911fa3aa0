// Package galera starts a MariaDB Galera cluster of three nodes on
// loopback, for tests and for the command in cmd/galera.
//
// Each node is a mariadbd of its own, with its own ports and data
// directory under one temporary directory. Node 1 bootstraps the cluster
// with --wsrep-new-cluster. Nodes 2 and 3 join it one after the other by
// a state snapshot transfer (SST) with rsync. A node killed with SIGKILL
// rejoins by an incremental state transfer (IST) when it restarts.
//
// [Cluster.Close] kills every process it started and removes the
// directory. Nothing touches the machine's own MariaDB.
package galera

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox/tests/internal/freeport"
)

// The binaries the cluster needs, from Debian's mariadb-server and
// galera-4. INBOX_MARIADBD, INBOX_MARIADB_INSTALL_DB and
// INBOX_GALERA_PROVIDER name others.
var (
	Mariadbd  = envOr("INBOX_MARIADBD", "/usr/sbin/mariadbd")
	InstallDB = envOr("INBOX_MARIADB_INSTALL_DB", "/usr/bin/mariadb-install-db")
	Provider  = envOr("INBOX_GALERA_PROVIDER", "/usr/lib/galera/libgalera_smm.so")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ErrUnavailable is returned by [Start] when a binary it needs is missing.
var ErrUnavailable = errors.New("galera: MariaDB or the Galera provider is not installed")

// Available returns an error wrapping ErrUnavailable when a binary that
// the cluster needs is missing.
func Available() error {
	for _, p := range []string{Mariadbd, InstallDB, Provider} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	for _, name := range []string{"rsync", "wsrep_sst_rsync"} {
		if _, err := exec.LookPath(name); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	return nil
}

// Options configure [Start]. The zero value starts three nodes.
type Options struct {
	// Nodes is the number of Galera nodes. Defaults to 3.
	Nodes int
	// Standalone also starts a MariaDB of its own with wsrep off and
	// otherwise the nodes' settings, as a yardstick. Defaults to false.
	Standalone bool
	// Logger receives the cluster's progress. Defaults to a discarding one.
	Logger *slog.Logger
	// Dir is where the temporary directory is made. Defaults to os.TempDir().
	Dir string
}

// Node is one mariadbd of the cluster.
type Node struct {
	// Name is "node1", "node2"… or "standalone".
	Name string
	// Port is the MySQL protocol's port on 127.0.0.1.
	Port int
	// GroupPort, ISTPort and SSTPort are Galera's ports (0 when standalone).
	GroupPort, ISTPort, SSTPort int

	dir    string
	wsrep  bool
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// DSN returns the node's DSN in go-sql-driver/mysql's format, on database
// db (none when empty).
func (n *Node) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
	cfg.DBName = db
	return cfg.FormatDSN()
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

// Cluster is the running cluster. Its methods are safe for concurrent use.
type Cluster struct {
	// Nodes are the Galera nodes, node 1 first.
	Nodes []*Node
	// Standalone is the yardstick server, nil unless asked for.
	Standalone *Node

	dir  string
	log  *slog.Logger
	cred *syscall.Credential
	addr string // gcomm:// addresses of all nodes
}

// Start makes a temporary directory, starts the nodes, and returns once
// every node is Synced in a cluster of all of them. On an error it
// removes what it started.
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
	dir, err := os.MkdirTemp(o.Dir, "inbox-galera-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, log: o.Logger}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if err := c.setOwner(); err != nil {
		return nil, err
	}
	count := o.Nodes
	if o.Standalone {
		count++
	}
	ports, err := freeport.Ports(4 * count)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range o.Nodes {
		p := ports[4*i:]
		n := &Node{Name: "node" + strconv.Itoa(i+1), Port: p[0], GroupPort: p[1], ISTPort: p[2], SSTPort: p[3], wsrep: true}
		n.dir = filepath.Join(dir, n.Name)
		c.Nodes = append(c.Nodes, n)
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(n.GroupPort))
	}
	c.addr = "gcomm://" + strings.Join(peers, ",")
	if o.Standalone {
		c.Standalone = &Node{Name: "standalone", Port: ports[4*o.Nodes], dir: filepath.Join(dir, "standalone")}
	}

	// One template, installed once. Node 1 and the standalone server start
	// from copies; the joiners start empty and receive node 1's by SST.
	begin := time.Now()
	template := filepath.Join(dir, "template")
	if err := c.installDB(ctx, template); err != nil {
		return nil, err
	}
	for _, n := range append(c.Nodes, c.Standalone) {
		if n == nil {
			continue
		}
		data := filepath.Join(n.dir, "data")
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		if n == c.Nodes[0] || n == c.Standalone {
			if out, err := exec.CommandContext(ctx, "cp", "-a", template, data).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("galera: cp: %w\n%s", err, out)
			}
		} else if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		if err := c.chown(n.dir); err != nil {
			return nil, err
		}
	}
	if c.Standalone != nil {
		if err := c.start(c.Standalone, false); err != nil {
			return nil, err
		}
	}
	if err := c.start(c.Nodes[0], true); err != nil {
		return nil, err
	}
	if err := c.waitSynced(ctx, c.Nodes[0], 1); err != nil {
		return nil, err
	}
	// Joiners one at a time: the donor serves one SST at a time anyway,
	// and two scripts at once on two cores slow each other down.
	for i, n := range c.Nodes[1:] {
		if err := c.start(n, false); err != nil {
			return nil, err
		}
		if err := c.waitSynced(ctx, n, i+2); err != nil {
			return nil, err
		}
	}
	if c.Standalone != nil {
		if err := waitReady(ctx, c.Standalone); err != nil {
			return nil, err
		}
	}
	c.log.Info("galera cluster synced", "nodes", len(c.Nodes), "took", time.Since(begin).Round(time.Millisecond), "dir", dir)
	return c, nil
}

// DSNs returns every node's DSN on database db, node 1 first.
func (c *Cluster) DSNs(db string) []string {
	dsns := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		dsns[i] = n.DSN(db)
	}
	return dsns
}

// Kill kills node i (0-based) with SIGKILL and waits until it has exited.
func (c *Cluster) Kill(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("galera: %s is not running", n.Name)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its group: mariadbd and any SST script
	<-exited
	c.log.Info("galera node killed", "node", n.Name)
	return nil
}

// Restart starts node i (0-based) again after Kill, and waits until it is
// Synced in a cluster of all nodes. It rejoins by IST when a donor's
// gcache still holds what it missed, and by SST otherwise.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.Nodes[i]
	if n.Running() {
		return fmt.Errorf("galera: %s is running", n.Name)
	}
	begin := time.Now()
	pos, err := c.recoverPosition(ctx, n)
	if err != nil {
		return err
	}
	if err := c.start(n, false, "--wsrep-start-position="+pos); err != nil {
		return err
	}
	if err := c.waitSynced(ctx, n, len(c.Nodes)); err != nil {
		return err
	}
	c.log.Info("galera node rejoined", "node", n.Name, "took", time.Since(begin).Round(time.Millisecond), "transfer", n.Transfer())
	return nil
}

// WaitSynced waits until every node is Synced in a cluster of all of them.
func (c *Cluster) WaitSynced(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.waitSynced(ctx, n, len(c.Nodes)); err != nil {
			return err
		}
	}
	return nil
}

// Close kills every process the cluster started and removes its directory.
func (c *Cluster) Close() error {
	for _, n := range append(c.Nodes, c.Standalone) {
		if n == nil {
			continue
		}
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

// Log returns the end of node's error log, for a failure's message.
func (n *Node) Log() string {
	b, err := os.ReadFile(filepath.Join(n.dir, "error.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Transfer tells from the error log how the node last joined: "SST",
// "IST" or "none" (node 1, or a node whose state was current).
func (n *Node) Transfer() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	last := bytes.LastIndex(b, []byte("Starting MariaDB"))
	if last < 0 {
		return "unknown"
	}
	b = b[last:]
	switch {
	case bytes.Contains(b, []byte("rsync SST completed")):
		return "SST"
	case bytes.Contains(b, []byte("IST received")):
		return "IST"
	default:
		return "none"
	}
}

// setOwner makes the directory the mysql user's when running as root.
// The rsync daemon of an SST drops root for "nobody" unless the server
// runs as an ordinary user; mariadbd then runs as mysql from the start.
func (c *Cluster) setOwner() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return fmt.Errorf("galera: running as root needs the mysql user: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return c.chown(c.dir)
}

func (c *Cluster) chown(dir string) error {
	if c.cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid))
	})
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("galera: %s: %w\n%s", name, err, out)
	}
	return nil
}

// installDB makes a data directory with the system tables, and root
// without a password on 127.0.0.1 (the shared server's DSN has none either).
func (c *Cluster) installDB(ctx context.Context, dir string) error {
	return c.run(ctx, InstallDB, "--no-defaults", "--datadir="+dir,
		"--auth-root-authentication-method=normal", "--skip-test-db",
		"--innodb-buffer-pool-size=16M", "--innodb-log-file-size=16M")
}

// args are mariadbd's arguments for n. Small buffers keep start-up fast;
// durability settings stay the defaults (innodb_flush_log_at_trx_commit=1).
func (c *Cluster) args(n *Node, bootstrap bool) []string {
	args := []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(n.dir, "data"),
		"--socket=" + filepath.Join(n.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(n.dir, "error.log"),
		"--port=" + strconv.Itoa(n.Port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=16M",
		"--max-connections=500",
		"--binlog-format=ROW",
		"--innodb-autoinc-lock-mode=2",
		"--default-storage-engine=InnoDB",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
	}
	if !n.wsrep {
		return append(args, "--wsrep-on=OFF")
	}
	args = append(args,
		"--wsrep-on=ON",
		"--wsrep-provider="+Provider,
		"--wsrep-cluster-name=inboxtest",
		"--wsrep-cluster-address="+c.addr,
		"--wsrep-node-name="+n.Name,
		"--wsrep-node-address=127.0.0.1:"+strconv.Itoa(n.GroupPort),
		"--wsrep-provider-options="+strings.Join([]string{
			"gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(n.GroupPort),
			"ist.recv_addr=127.0.0.1:" + strconv.Itoa(n.ISTPort),
			"gcache.size=64M",
		}, ";"),
		"--wsrep-sst-method=rsync",
		"--wsrep-sst-receive-address=127.0.0.1:"+strconv.Itoa(n.SSTPort),
	)
	if bootstrap {
		args = append(args, "--wsrep-new-cluster")
	}
	return args
}

// start starts n's mariadbd in a process group of its own, so that Kill
// reaches an SST script's children too, and a Ctrl-C reaches none of them.
func (c *Cluster) start(n *Node, bootstrap bool, extra ...string) error {
	cmd := exec.Command(Mariadbd, append(c.args(n, bootstrap), extra...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("galera: start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	c.log.Debug("galera node started", "node", n.Name, "port", n.Port, "bootstrap", bootstrap)
	return nil
}

// recoverPosition finds the last transaction that n committed, as
// mysqld_safe does after a crash: mariadbd --wsrep-recover reads it from
// InnoDB. Started at that position, the node asks for an IST of what it
// missed; without it, grastate.dat says seqno -1 after a SIGKILL, and the
// node needs a full SST.
func (c *Cluster) recoverPosition(ctx context.Context, n *Node) (string, error) {
	log := filepath.Join(n.dir, "recover.log")
	_ = os.Remove(log)
	args := append(c.args(n, false), "--wsrep-recover", "--log-error="+log)
	if err := c.run(ctx, Mariadbd, args...); err != nil {
		return "", err
	}
	b, err := os.ReadFile(log)
	if err != nil {
		return "", err
	}
	const mark = "WSREP: Recovered position: "
	i := bytes.LastIndex(b, []byte(mark))
	if i < 0 {
		return "", fmt.Errorf("galera: %s: no recovered position in\n%s", n.Name, b)
	}
	pos, _, _ := strings.Cut(string(b[i+len(mark):]), "\n")
	return strings.TrimSpace(pos), nil
}

// waitSynced waits until n answers, is Synced, and sees size nodes.
func (c *Cluster) waitSynced(ctx context.Context, n *Node, size int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	var last error
	for {
		state, got, err := status(ctx, db)
		if err == nil && state == "Synced" && got == size {
			return nil
		}
		last = fmt.Errorf("state %q, cluster size %d, want Synced and %d (%v)", state, got, size, err)
		if !n.Running() {
			return fmt.Errorf("galera: %s exited: %v\n%s", n.Name, last, n.Log())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("galera: %s: %w: %v\n%s", n.Name, ctx.Err(), last, n.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// status reads wsrep_local_state_comment and wsrep_cluster_size.
func status(ctx context.Context, db *sql.DB) (state string, size int, err error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state_comment', 'wsrep_cluster_size')")
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return "", 0, err
		}
		switch name {
		case "wsrep_local_state_comment":
			state = value
		case "wsrep_cluster_size":
			size, _ = strconv.Atoi(value)
		}
	}
	return state, size, rows.Err()
}

// waitReady waits until the standalone server answers.
func waitReady(ctx context.Context, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if !n.Running() {
			return fmt.Errorf("galera: %s exited: %v\n%s", n.Name, err, n.Log())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("galera: %s: %w: %v", n.Name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
