// Command inbox runs the inbox's demo and its maintenance jobs.
//
//	inbox demo                      run consumers on an embedded NATS server and SQLite through lost acks and failures
//	inbox migrate -print -dialect postgres   print the migrations as one SQL script (postgres, mysql, sqlite)
//	inbox migrate -postgres DSN     create or update the tables (-mysql DSN, -sqlite FILE)
//	inbox prune -sqlite inbox.db    delete inbox rows older than the retention, once
//
// It exits 0 on success and for -h, 1 when the command failed, 2 for a
// wrong command line.
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
	err := run(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	// The library's own errors start with "inbox: " already.
	msg := err.Error()
	if !strings.HasPrefix(msg, "inbox: ") {
		msg = "inbox: " + msg
	}
	fmt.Fprintln(stderr, msg)
	return 1
}

const usage = `usage: inbox <command> [flags]

commands:
  demo      consume payments from an embedded NATS server into SQLite through lost acks and failures, and check them
  migrate   create or update the inbox's tables, or print them as one SQL script (-print)
  prune     delete inbox rows older than the retention, once

Run 'inbox <command> -h' for a command's flags.`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "demo":
		return demo(ctx, args, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, args, stdout, stderr)
	case "prune":
		return pruneCmd(ctx, args, stdout, stderr)
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
