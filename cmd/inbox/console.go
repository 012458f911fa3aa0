package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/console"
)

// The environment that holds the console's credentials: a flag's value
// would show in ps.
const (
	envConsoleToken    = "INBOX_CONSOLE_TOKEN"
	envConsoleUser     = "INBOX_CONSOLE_USER"
	envConsolePassword = "INBOX_CONSOLE_PASSWORD"
)

var consoleCommand = command{
	name: "console",
	synopsis: "inbox console " + storeSynopsis + `
    [-listen ADDR] [-read-only] [-token-file PATH] [-retention D]
    [-replay-consumer C [-scope-id-by-type] (-nats URL -subject S |
     -amqp URL [-exchange E] -routing-key K | -kafka BROKERS -topic T
     [-kafka-tls] [-kafka-ca FILE] [-kafka-sasl M] |
     -sqs QUEUE_URL [-sqs-endpoint URL]) [-type-header H] [-id-header H]
     [-timeout D]]`,
	description: `Serves the web console: per consumer the messages processed per minute,
those in retry, the dead letters by error group, and the outbox's pending
and parked rows; lists of dead letters and outbox rows with filters, and
each one with its payload. It prints its URL on stderr and runs until
SIGINT or SIGTERM. Each action it takes is logged on stderr.

Its actions: discard dead letters; unpark or discard parked outbox rows;
with -replay-consumer and a broker, replay that consumer's dead letters
through the broker, as inbox dead-letters replay does (see its help for
the flags and what a replay does). Each acts on one row, or on every one
a filter selects, after a page that counts them and asks to confirm.
Every action is a POST that carries a signed token and must come from the
console's own page. -read-only hides the actions and refuses them.

It listens on 127.0.0.1:8080 by default. An address other than loopback
needs authentication, or the command refuses to start (exit 2). The
credentials come from the environment or a file, never from a flag:
  INBOX_CONSOLE_TOKEN     a token: "Authorization: Bearer TOKEN", or the
                          password of basic auth with any user name
  -token-file PATH        the token, read from the file's first line
  INBOX_CONSOLE_USER and INBOX_CONSOLE_PASSWORD
                          basic auth, as a browser asks for it
Put TLS in front of it (a reverse proxy) off loopback: basic auth and
tokens travel in clear text over HTTP.`,
	examples: `inbox console -sqlite inbox.db
INBOX_CONSOLE_TOKEN=$(cat /run/secrets/console) inbox console -postgres postgres://app@db/app -listen 0.0.0.0:8080
inbox console -mysql 'app@tcp(db:3306)/app' -token-file /run/secrets/console -listen :8080 -read-only
inbox console -postgres $DSN -replay-consumer billing -nats nats://127.0.0.1:4222 -subject payments.billing`,
}

func consoleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := consoleCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on; other than loopback, authentication is required")
	readOnly := fs.Bool("read-only", false, "hide every action and refuse it: the console changes nothing")
	replayConsumer := fs.String("replay-consumer", "", "the consumer whose dead letters the console replays, through the broker flags' destination (default: no replay)")
	scope := fs.Bool("scope-id-by-type", false, "with -replay-consumer: the consumer scopes IDs by type (inbox.Config.ScopeIDByType)")
	var bf brokerFlags
	bf.register(fs)
	tokenFile := fs.String("token-file", "", "file whose first line is the token (instead of "+envConsoleToken+")")
	retention := fs.Duration("retention", inbox.DefaultRetention, "the inbox's retention: older dead letters are said to be forgotten")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	auth, err := consoleAuth(*tokenFile)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *retention < inbox.MinRetention {
		return usageError(fs, stderr, "-retention %v is shorter than the minimum %v", *retention, inbox.MinRetention)
	}
	loopback, err := isLoopback(*listen)
	if err != nil {
		return usageError(fs, stderr, "-listen %q: %v", *listen, err)
	}
	if !loopback && auth == (console.Auth{}) {
		return usageError(fs, stderr, "-listen %s is not a loopback address: set %s, -token-file, or %s and %s, so that the console asks for them",
			*listen, envConsoleToken, envConsoleUser, envConsolePassword)
	}
	cfg := &console.Config{ReadOnly: *readOnly, Retention: *retention, Auth: auth}
	if *replayConsumer != "" {
		if err := bf.validate(); err != nil {
			return usageError(fs, stderr, "-replay-consumer: %v", err)
		}
		dest, err := bf.publisher(ctx)
		if err != nil {
			return err
		}
		defer dest.close()
		cfg.Replay = map[string]*console.Destination{*replayConsumer: {Publisher: dest.Publisher, Subject: dest.Subject,
			ScopeIDByType: *scope, QuietDedup: dest.QuietDedup, Timeout: bf.timeout}}
	} else if bf.nats != "" || bf.amqp != "" || bf.kafka != "" || bf.sqs != "" {
		return usageError(fs, stderr, "a broker goes with -replay-consumer: the consumer whose dead letters it replays")
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	if v, err := d.applied(ctx); err != nil {
		return fmt.Errorf("reading the applied migrations: %w", err)
	} else if len(v) == 0 {
		return errNotMigrated
	}
	// Info: each action is logged.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Logger = log
	c, err := d.console(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A bulk replay answers when it is done: a thousand dead letters
		// take seconds, a broker that times out each publish far longer.
		WriteTimeout: 15 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:  func(net.Listener) context.Context { return ctx },
	}
	mode := "no authentication"
	switch {
	case auth.Token != "" && auth.Password != "":
		mode = "a token or basic auth"
	case auth.Token != "":
		mode = "a token"
	case auth.Password != "":
		mode = "basic auth"
	}
	fmt.Fprintf(stderr, "inbox console: serving http://%s/ (%s); stop with Ctrl-C\n", ln.Addr(), mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Fprintln(stderr, "inbox console: stopped")
	return nil
}

// consoleAuth reads the credentials from the environment and the token
// file.
func consoleAuth(tokenFile string) (console.Auth, error) {
	a := console.Auth{Token: os.Getenv(envConsoleToken), User: os.Getenv(envConsoleUser), Password: os.Getenv(envConsolePassword)}
	if tokenFile != "" {
		if a.Token != "" {
			return a, fmt.Errorf("give %s or -token-file, not both", envConsoleToken)
		}
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return a, fmt.Errorf("-token-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if a.Token = strings.TrimSpace(line); a.Token == "" {
			return a, fmt.Errorf("-token-file %s: the first line is empty", tokenFile)
		}
	}
	if (a.User == "") != (a.Password == "") {
		return a, fmt.Errorf("set both %s and %s, or neither", envConsoleUser, envConsolePassword)
	}
	if strings.Contains(a.User, ":") {
		return a, fmt.Errorf("%s holds a colon, which basic auth cannot carry", envConsoleUser)
	}
	return a, nil
}

// isLoopback reports whether addr, host:port, listens on loopback only.
// An empty host listens on every interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
