// Package pgcluster runs a PostgreSQL primary and a streaming standby, for
// tests of failover. Each pair has its own ports and data directories in a
// temporary directory, removed by Close. The shared server on port 5432 is
// never touched.
//
// The primary has wal_level=replica and fsync on; the standby is a
// pg_basebackup -R copy of it on a replication slot. Replication is
// asynchronous, or synchronous with [Sync]. [Cluster.StopPrimary] stops the
// primary as a crash does (pg_ctl stop -m immediate), and [Cluster.Promote]
// makes the standby the primary. [Cluster.DSN] names both servers with
// target_session_attrs=read-write, so pgx finds the primary of the moment.
//
// The binaries come from INBOX_PG_BIN, or the newest
// /usr/lib/postgresql/*/bin, or PATH. Run as root, every PostgreSQL program
// runs as the user postgres, since initdb refuses root. The command
// cmd/pgcluster starts a pair by hand.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/tests/internal/freeport"
)

// Replication says whether the primary's commits wait for the standby.
type Replication int

const (
	// Async replication: a COMMIT returns once the primary flushed it. A
	// failover loses what the standby had not received.
	Async Replication = iota
	// Sync replication: a COMMIT returns once the standby flushed it too
	// (synchronous_commit=on, synchronous_standby_names naming it).
	Sync
)

func (r Replication) String() string {
	if r == Sync {
		return "sync"
	}
	return "async"
}

// StandbyName is the standby's application_name, which
// synchronous_standby_names and pg_stat_replication show.
const StandbyName = "inbox_standby"

// Options configure a Cluster. Nil or zero means the defaults.
type Options struct {
	// Replication is Async or Sync. Default Async.
	Replication Replication
	// Dir is where the temporary directory is made. Default os.TempDir().
	Dir string
	// Settings are more postgresql.conf lines for both servers, such as
	// "log_min_messages = info". Default none.
	Settings []string
	// LinkDelay, when positive, makes the standby stream through a relay
	// in this process that holds each chunk for this long, both ways: a
	// standby some way off. StopPrimary then drops what the relay holds,
	// as a crash of the primary's machine loses what it had not sent.
	// Default 0: the standby connects to the primary directly.
	LinkDelay time.Duration
	// Logger tells what the cluster does. Default a logger that discards.
	Logger *slog.Logger
}

// ErrNoBinaries is wrapped by Start's error when initdb, pg_ctl,
// pg_basebackup or postgres are missing.
var ErrNoBinaries = errors.New("pgcluster: PostgreSQL binaries not found (set INBOX_PG_BIN to their directory)")

// Node is one server of a Cluster.
type Node struct {
	Name string // "primary" or "standby"
	Port int
	Dir  string // the data directory
	Log  string // the server's log file

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
}

// DSN is the node's keyword/value DSN, for the database postgres.
func (n *Node) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5", n.Port)
}

// Running reports whether the node's postmaster has not exited.
func (n *Node) Running() bool {
	select {
	case <-n.done:
		return false
	default:
		return n.cmd != nil
	}
}

// Cluster is a running primary and standby.
type Cluster struct {
	Primary, Standby *Node
	Replication      Replication

	bin  string
	base string
	cred *syscall.Credential
	log  *slog.Logger
	link *link // nil without Options.LinkDelay

	mu       sync.Mutex
	promoted bool
	closed   bool
}

// Start makes and starts a primary and a streaming standby. It returns once
// pg_stat_replication on the primary shows the standby streaming (and
// sync, with Sync). On an error it removes what it made.
func Start(ctx context.Context, opts *Options) (_ *Cluster, err error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Replication: o.Replication, bin: bin, log: o.Logger}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	if c.base, err = os.MkdirTemp(o.Dir, "pgcluster-"); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if c.cred != nil {
		if err := os.Chown(c.base, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	ports, err := freeport.Ports(2)
	if err != nil {
		return nil, err
	}
	c.Primary = &Node{Name: "primary", Port: ports[0], Dir: filepath.Join(c.base, "primary"), Log: filepath.Join(c.base, "primary.log")}
	c.Standby = &Node{Name: "standby", Port: ports[1], Dir: filepath.Join(c.base, "standby"), Log: filepath.Join(c.base, "standby.log")}

	if err := c.run(ctx, "initdb", "-D", c.Primary.Dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return nil, err
	}
	syncNames := "''"
	if o.Replication == Sync {
		syncNames = "'" + StandbyName + "'"
	}
	conf := append([]string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + c.base + "'",
		"port = " + strconv.Itoa(c.Primary.Port),
		"wal_level = replica",
		"max_wal_senders = 4",
		"max_replication_slots = 4",
		"wal_keep_size = '64MB'",
		"hot_standby = on",
		"fsync = on", // durability is what these tests are about
		"synchronous_commit = on",
		"synchronous_standby_names = " + syncNames,
		"shared_buffers = '32MB'",
		"max_connections = 60",
		"wal_sender_timeout = '5s'",
		"wal_receiver_timeout = '5s'",
		"wal_receiver_status_interval = '1s'",
		"wal_retrieve_retry_interval = '200ms'",
		"log_min_messages = warning",
		"log_line_prefix = '%m [%p] '",
	}, o.Settings...)
	if err := appendConf(c.Primary.Dir, conf); err != nil {
		return nil, err
	}
	if err := c.startNode(ctx, c.Primary); err != nil {
		return nil, err
	}
	if err := c.run(ctx, "pg_basebackup", "-D", c.Standby.Dir, "-h", "127.0.0.1", "-p", strconv.Itoa(c.Primary.Port),
		"-U", "postgres", "-R", "-X", "stream", "-C", "-S", StandbyName, "-c", "fast", "--no-sync"); err != nil {
		return nil, err
	}
	upstream := c.Primary.Port
	if o.LinkDelay > 0 {
		if c.link, err = newLink(fmt.Sprintf("127.0.0.1:%d", c.Primary.Port), o.LinkDelay); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
		upstream = c.link.Port()
	}
	// After a promotion the standby is a primary without a standby: naming
	// one in synchronous_standby_names would make every COMMIT wait forever.
	if err := appendConf(c.Standby.Dir, []string{
		"port = " + strconv.Itoa(c.Standby.Port),
		"synchronous_standby_names = ''",
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s'", upstream, StandbyName),
		"primary_slot_name = '" + StandbyName + "'",
	}); err != nil {
		return nil, err
	}
	if err := c.startNode(ctx, c.Standby); err != nil {
		return nil, err
	}
	if err := c.waitStreaming(ctx); err != nil {
		return nil, err
	}
	c.log.InfoContext(ctx, "pgcluster: started", "replication", c.Replication, "primary", c.Primary.Port, "standby", c.Standby.Port, "dir", c.base)
	return c, nil
}

// DSN names both servers, primary first, with
// target_session_attrs=read-write: pgx connects to the first that accepts
// writes, so to the standby once it is promoted.
func (c *Cluster) DSN() string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable connect_timeout=5 target_session_attrs=read-write",
		c.Primary.Port, c.Standby.Port)
}

// Dir is the temporary directory that holds both data directories and
// logs.
func (c *Cluster) Dir() string { return c.base }

// StopPrimary stops the primary as a crash does: pg_ctl stop -m immediate,
// which ends every backend and the WAL sender at once, without a
// checkpoint. It returns once the postmaster has exited. With
// Options.LinkDelay it sends the postmaster SIGQUIT itself (what pg_ctl
// sends) and cuts the link at once, dropping the WAL still on its way.
func (c *Cluster) StopPrimary(ctx context.Context) error {
	if c.link != nil && c.Primary.Running() {
		_ = c.Primary.cmd.Process.Signal(syscall.SIGQUIT)
		c.link.Cut()
	}
	return c.stop(ctx, c.Primary, "immediate")
}

// StopStandby stops the standby as StopPrimary stops the primary.
func (c *Cluster) StopStandby(ctx context.Context) error {
	return c.stop(ctx, c.Standby, "immediate")
}

// Promote makes the standby a primary (pg_ctl promote) and returns once it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	if err := c.run(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", c.Standby.Dir); err != nil {
		return err
	}
	err := poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, c.Standby.DSN())
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		var recovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil {
			return err
		}
		if recovery {
			return errors.New("still in recovery")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgcluster: promote: %w%s", err, tail(c.Standby.Log))
	}
	c.mu.Lock()
	c.promoted = true
	c.mu.Unlock()
	c.log.InfoContext(ctx, "pgcluster: standby promoted", "port", c.Standby.Port)
	return nil
}

// Close stops both servers (immediately) and removes the temporary
// directory. It may be called more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if c.link != nil {
		c.link.Cut()
	}
	for _, n := range []*Node{c.Standby, c.Primary} {
		if n != nil && n.Running() {
			errs = append(errs, c.stop(ctx, n, "immediate"))
		}
	}
	if c.base != "" {
		errs = append(errs, os.RemoveAll(c.base))
	}
	return errors.Join(errs...)
}

// BinDir returns the directory of the PostgreSQL binaries: INBOX_PG_BIN,
// the newest /usr/lib/postgresql/*/bin, or the one of initdb on PATH. Its
// error wraps ErrNoBinaries.
func BinDir() (string, error) {
	var dirs []string
	if d := os.Getenv("INBOX_PG_BIN"); d != "" {
		dirs = append(dirs, d)
	} else {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
		dirs = append(dirs, found...)
		if p, err := exec.LookPath("initdb"); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "pg_basebackup", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (looked in %v)", ErrNoBinaries, dirs)
}

// version reads the major version from /usr/lib/postgresql/N/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs the user postgres: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// appendConf appends lines to dir's postgresql.auto.conf, which
// PostgreSQL reads last, after pg_basebackup -R's lines there.
func appendConf(dir string, lines []string) error {
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString("\n# pgcluster\n" + strings.Join(lines, "\n") + "\n")
	return errors.Join(err, f.Close())
}

// command returns the program name of c's binaries, run as postgres when
// the process is root.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.base
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGHOST=127.0.0.1", "PGUSER=postgres")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// run runs a program to its end.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := c.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgcluster: %s %s: %w\n%s", name, strings.Join(args, " "), err, out.Bytes())
	}
	c.log.DebugContext(ctx, "pgcluster: ran", "program", name, "args", args, "took", time.Since(start))
	return nil
}

// spawner starts the postmasters from one goroutine locked to its thread,
// which never ends: Pdeathsig follows the thread that started a child, and
// it stops the servers if the test process dies without Close.
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

// startNode starts n's postmaster as a child, its output in n.Log, and
// waits until it accepts connections (a standby: read-only ones).
func (c *Cluster) startNode(ctx context.Context, n *Node) error {
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer func() { _ = logf.Close() }()
	cmd := c.command(context.Background(), "postgres", "-D", n.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT // an immediate shutdown
	cmd.SysProcAttr.Setpgid = true              // a Ctrl-C is the command's to handle
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return fmt.Errorf("pgcluster: start %s: %w", n.Name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(n.done)
	}()
	err = poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		if !n.Running() {
			return errExited
		}
		conn, err := pgx.Connect(ctx, n.DSN())
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		return fmt.Errorf("pgcluster: start %s: %w%s", n.Name, err, tail(n.Log))
	}
	return nil
}

var errExited = errors.New("the postmaster exited")

// stop stops n with pg_ctl stop -m mode and waits for its postmaster to
// exit.
func (c *Cluster) stop(ctx context.Context, n *Node, mode string) error {
	if !n.Running() {
		return nil
	}
	if err := c.run(ctx, "pg_ctl", "stop", "-m", mode, "-w", "-D", n.Dir); err != nil && n.Running() {
		_ = n.cmd.Process.Signal(syscall.SIGQUIT)
	}
	select {
	case <-n.done:
		c.log.InfoContext(ctx, "pgcluster: stopped", "node", n.Name, "mode", mode)
		return nil
	case <-ctx.Done():
		_ = n.cmd.Process.Kill()
		return fmt.Errorf("pgcluster: stop %s: %w", n.Name, ctx.Err())
	}
}

// waitStreaming waits until pg_stat_replication shows the standby
// streaming, and with Sync, as sync.
func (c *Cluster) waitStreaming(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	want := "async"
	if c.Replication == Sync {
		want = "sync"
	}
	err := poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, c.Primary.DSN())
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		var state, syncState string
		err = conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, StandbyName).Scan(&state, &syncState)
		if err != nil {
			return fmt.Errorf("pg_stat_replication: %w", err)
		}
		if state != "streaming" || syncState != want {
			return fmt.Errorf("pg_stat_replication: state %s, sync_state %s; want streaming, %s", state, syncState, want)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgcluster: the standby does not stream: %w%s", err, tail(c.Standby.Log))
	}
	return nil
}

// poll calls f every interval until it returns nil or ctx is done; then it
// returns f's last error.
func poll(ctx context.Context, interval time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeoutCause(ctx, time.Minute, errors.New("a minute passed"))
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		acancel()
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}

// tail returns the end of a log file, to explain an error.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n" + filepath.Base(path) + ":\n" + string(b)
}
