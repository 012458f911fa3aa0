// Command pgcluster starts a PostgreSQL primary and a streaming standby on
// free ports, prints their DSNs, and removes both at Ctrl-C:
//
//	go run github.com/inboxkit/inbox/tests/internal/pgcluster/cmd/pgcluster -sync
//
// Type "failover" and Enter to stop the primary as a crash does and
// promote the standby. Run as root, the servers run as the user postgres.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

func main() {
	syncRepl := flag.Bool("sync", false, "synchronous replication: a COMMIT waits for the standby")
	verbose := flag.Bool("v", false, "log each step")
	flag.Parse()
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(log, *syncRepl); err != nil {
		log.Error("pgcluster", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, syncRepl bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := &pgcluster.Options{Logger: log}
	if syncRepl {
		opts.Replication = pgcluster.Sync
	}
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Error("pgcluster: close", "error", err)
		}
	}()
	fmt.Printf("replication: %s\n", c.Replication)
	fmt.Printf("both:    %s\n", c.DSN())
	fmt.Printf("primary: %s\n", c.Primary.DSN())
	fmt.Printf("standby: %s\n", c.Standby.DSN())
	fmt.Printf("data and logs: %s\n", c.Dir())
	fmt.Println(`Type "failover" and Enter to crash the primary and promote the standby; Ctrl-C stops both.`)

	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(os.Stdin)
		for s.Scan() {
			lines <- strings.TrimSpace(s.Text())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case l := <-lines:
			if l != "failover" {
				fmt.Println(`only "failover" is understood`)
				continue
			}
			start := time.Now()
			if err := c.StopPrimary(ctx); err != nil {
				return err
			}
			if err := c.Promote(ctx); err != nil {
				return err
			}
			fmt.Printf("failover done in %v: the standby on port %d is the primary\n", time.Since(start).Round(time.Millisecond), c.Standby.Port)
		}
	}
}
