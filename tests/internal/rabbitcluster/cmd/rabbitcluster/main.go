// Command rabbitcluster starts a RabbitMQ cluster of three nodes on
// loopback, prints their AMQP URLs, and stops it on Ctrl-C.
//
//	go run github.com/inboxkit/inbox/tests/internal/rabbitcluster/cmd/rabbitcluster
//
// It needs Debian's rabbitmq-server. The nodes' data lives in a temporary
// directory, removed at the end. The machine's own RabbitMQ is left
// alone. Flags:
//
//	-nodes N    the number of nodes (3)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/inboxkit/inbox/tests/internal/rabbitcluster"
)

func main() {
	nodes := flag.Int("nodes", 3, "the number of RabbitMQ nodes")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *nodes); err != nil {
		log.Error("rabbitcluster", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, nodes int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := rabbitcluster.Start(ctx, &rabbitcluster.Options{Nodes: nodes, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Error("rabbitcluster: close", "err", err)
		}
		log.Info("rabbitmq cluster stopped and removed")
	}()
	for _, n := range c.Nodes {
		fmt.Printf("%s\t%s\t%s\n", n.Name, n.URL(), n.Erlang)
	}
	fmt.Printf("URLs\t%s\n", strings.Join(c.URLs(), ","))
	fmt.Println("Ctrl-C stops the cluster and removes its data.")
	<-ctx.Done()
	return nil
}
