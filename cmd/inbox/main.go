// Command inbox runs the inbox's demo and its maintenance jobs.
//
//	inbox demo                      run consumers on an embedded NATS server and SQLite through lost acks and failures
//	inbox migrate -print -dialect postgres   print the migrations as one SQL script (postgres, mysql, sqlite)
//	inbox migrate -postgres DSN     create or update the tables (-mysql DSN, -sqlite FILE)
//	inbox prune -sqlite inbox.db    delete inbox rows older than the retention, once
//	inbox stats -postgres DSN [-consumer C] [-json]
//	                                count each consumer's inbox rows, dead letters, failed attempts, top errors
//	inbox dead-letters list -mysql DSN [-consumer C] [-type T] [-error TEXT] [-since T] [-until T] [-after ID] [-limit N] [-json]
//	inbox dead-letters show -sqlite FILE [-json] ID
//	                                one dead letter: payload (text or base64), headers, error, attempts, times
//	inbox dead-letters discard -sqlite FILE (ID... | -all [filters] [-dry-run])
//	                                delete dead letters; their inbox rows stay dead (redeliveries are duplicates)
//	inbox dead-letters replay -postgres DSN (-nats URL -subject S | -amqp URL -routing-key K | -kafka BROKERS -topic T | -sqs QUEUE_URL)
//	                                -consumer C (ID... | -all [filters] [-dry-run])
//	                                publish one consumer's dead letters again with their IDs and release their dead rows, once
//	inbox check -postgres DSN [-nats URL -stream S | -amqp URL -queue Q] [-retention D] [-json]
//	                                schema version, durability settings, retention against the broker's window
//	inbox outbox stats -postgres DSN [-json]
//	                                count pending and parked outbox rows, the age of the oldest pending one
//	inbox outbox list -postgres DSN [-pending | -parked] [filters] [-after SEQ] [-limit N] [-json]
//	inbox outbox show -postgres DSN [-json] (SEQ | -message-id ID)
//	                                one outbox row: payload (text or base64), headers, error, attempts, times
//	inbox outbox (unpark | discard) -postgres DSN [-dry-run] (SEQ... | -all [filters])
//	                                publish parked outbox rows again, or delete them (parked: list -parked)
//	inbox console -postgres DSN [-listen 127.0.0.1:8080] [-read-only] [-token-file PATH]
//	                                serve the read-only web console; off loopback it needs a token or a password
//
// Each command's -h prints its manual: synopsis, description, flags,
// examples, exit status. Data goes to stdout (JSON with -json), errors to
// stderr. Exit status: 0 success and -h, 1 failure, 2 wrong command line,
// 3 check found a problem, 4 a dead letter or parked outbox row asked for
// does not exist (the others given were done), 5 partly done (some
// changes, which stdout lists, and a failure other than not found), 75
// nothing changed and a later run may succeed (a replay within NATS's
// duplicate window).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/inboxkit/inbox/internal/redact"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitCode(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage: the command line was wrong, and what was wrong is written.
var errUsage = errors.New("usage")

// exitCode runs the command and returns its exit code, writing a failure
// to stderr once, with one "inbox: " in front.
func exitCode(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// The URLs and DSNs given are among args: errors and log lines show
	// none of their passwords (the places that print them mask them too).
	stderr = redactWriter{stderr, args}
	err := run(ctx, args, stdout, stderr)
	code := exitFailure
	var coded *codedError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errProblem): // written already
		return exitProblem
	case errors.As(err, &coded):
		code = coded.code
	}
	if errors.Is(err, errWritten) {
		return code
	}
	// The library's own errors start with "inbox: " already.
	msg := err.Error()
	if !strings.HasPrefix(msg, "inbox: ") {
		msg = "inbox: " + msg
	}
	fmt.Fprintln(stderr, msg)
	return code
}

// redactWriter writes to w with the passwords of dsns masked
// (redact.Text), one Write at a time: a line of slog's or of fmt.
type redactWriter struct {
	w    io.Writer
	dsns []string
}

func (r redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.Text(string(p), r.dsns...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

const usage = `usage: inbox <command> [flags]

commands:
  demo      consume payments from an embedded NATS server into SQLite through lost acks and failures, and check them
  migrate   create or update the inbox's tables, or print them as one SQL script (-print)
  prune     delete inbox rows older than the retention, once
  stats     count each consumer's inbox rows, dead letters, failed attempts and top errors
  dead-letters (list | show | discard | replay)
            look into dead letters, delete them, or send them back through their broker
  check     check the schema version, durability settings and retention against the broker
  outbox (stats | list | show | unpark | discard | parked)
            count and look into outbox rows, publish parked ones again, or delete them
  console   serve the web console: throughput, retries, dead letters, the outbox; replay, discard, unpark

Run 'inbox <command> -h' for a command's manual.

exit status: 0 success, 1 failure, 2 wrong command line, 3 check found a
problem, 4 a dead letter or parked outbox row asked for does not exist
(the others were done), 5 partly done (some changes, which stdout lists,
and a failure other than not found), 75 nothing changed, try again later.`

// commands are the subcommands, by name. Each one's -h prints its manual
// (command.flagSet); dead-letters has subcommands of its own.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"demo":         demo,
	"migrate":      migrateCmd,
	"prune":        pruneCmd,
	"stats":        statsCmd,
	"dead-letters": deadLetters,
	"check":        checkCmd,
	"outbox":       outboxCmd,
	"console":      consoleCmd,
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	if f, ok := commands[cmd]; ok {
		return f(ctx, args, stdout, stderr)
	}
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "inbox: unknown command %q\n\n%s\n", cmd, usage)
	return errUsage
}

// parse parses a command's flags: -h writes the flags to stdout
// (flag.ErrHelp, exit 0); a wrong flag writes the error and the flags to
// stderr (errUsage, exit 2).
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var buf strings.Builder
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		io.WriteString(stdout, buf.String())
		return err
	case err != nil:
		io.WriteString(stderr, buf.String())
		return errUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "inbox %s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return errUsage
	}
	return nil
}
