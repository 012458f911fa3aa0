// Command natscluster starts a NATS JetStream cluster of three nodes on
// loopback, prints their URLs, and stops it on Ctrl-C.
//
//	go run github.com/inboxkit/inbox/tests/internal/natscluster/cmd/natscluster
//
// It builds nats-server at the version in tests/go.mod, unless
// INBOX_NATS_SERVER names a binary. The nodes' stores live in a temporary
// directory, removed at the end. Flags:
//
//	-nodes N   the number of nodes (3)
//	-name S    the cluster's name (inbox-test)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/inboxkit/inbox/tests/internal/natscluster"
)

func main() {
	nodes := flag.Int("nodes", 3, "the number of nodes")
	name := flag.String("name", "inbox-test", "the cluster's name")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *nodes, *name); err != nil {
		log.Error("natscluster", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, nodes int, name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := natscluster.Launch(ctx, &natscluster.Options{Nodes: nodes, Name: name, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Error("natscluster: close", "err", err)
		}
		log.Info("nats cluster stopped and removed")
	}()
	for _, n := range c.Nodes {
		fmt.Printf("%s\t%s\tmonitor http://127.0.0.1:%d\n", n.Name, n.URL(), n.MonitorPort)
	}
	fmt.Printf("all\t%s\n", c.URLs())
	fmt.Println("Ctrl-C stops the cluster and removes its data.")
	<-ctx.Done()
	return nil
}
