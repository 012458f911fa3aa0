// Command inbox runs the inbox's demo and its maintenance jobs.
//
//	inbox demo                      run consumers on an embedded NATS server and SQLite through lost acks and failures
//	inbox migrate -print -dialect postgres   print the SQL of the migrations (postgres, mysql, sqlite)
//	inbox migrate -postgres DSN     create or update the tables (-mysql DSN, -sqlite FILE)
//	inbox prune -sqlite inbox.db    delete inbox rows older than the retention, once
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "inbox:", err)
		}
		os.Exit(2)
	}
}

const usage = `usage: inbox <command> [flags]

commands:
  demo      consume payments from an embedded NATS server into SQLite through lost acks and failures, and check them
  migrate   create or update the inbox's tables, or print their SQL (-print)
  prune     delete inbox rows older than the retention, once

Run 'inbox <command> -h' for a command's flags.`

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(out, usage)
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "demo":
		return demo(ctx, args, out)
	case "migrate":
		return migrateCmd(ctx, args, out)
	case "prune":
		return pruneCmd(ctx, args, out)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(out, usage)
		return nil
	}
	fmt.Fprintln(out, usage)
	return fmt.Errorf("unknown command %q", cmd)
}
