// Command galera starts a MariaDB Galera cluster of three nodes on
// loopback, prints their DSNs, and stops it on Ctrl-C.
//
//	go run github.com/inboxkit/inbox/tests/internal/galera/cmd/galera
//
// It needs mariadbd, the galera-4 provider and rsync (Debian's
// mariadb-server, galera-4 and rsync). The nodes' data lives in a
// temporary directory, removed at the end. Flags:
//
//	-nodes N       the number of nodes (3)
//	-standalone    also start a MariaDB with wsrep off, as a yardstick
//	-db NAME       create database NAME and put it in the DSNs (test)
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox/tests/internal/galera"
)

func main() {
	nodes := flag.Int("nodes", 3, "the number of Galera nodes")
	standalone := flag.Bool("standalone", false, "also start a MariaDB with wsrep off")
	db := flag.String("db", "test", "the database to create and put in the DSNs")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *nodes, *standalone, *db); err != nil {
		log.Error("galera", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, nodes int, standalone bool, db string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := galera.Start(ctx, &galera.Options{Nodes: nodes, Standalone: standalone, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Error("galera: close", "err", err)
		}
		log.Info("galera cluster stopped and removed")
	}()
	if db != "" {
		admin, err := sql.Open("mysql", c.Nodes[0].DSN(""))
		if err != nil {
			return err
		}
		_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+db+"`")
		_ = admin.Close()
		if err != nil {
			return err
		}
		if c.Standalone != nil {
			if admin, err = sql.Open("mysql", c.Standalone.DSN("")); err != nil {
				return err
			}
			_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+db+"`")
			_ = admin.Close()
			if err != nil {
				return err
			}
		}
	}
	for _, n := range c.Nodes {
		fmt.Printf("%s\t%s\n", n.Name, n.DSN(db))
	}
	if c.Standalone != nil {
		fmt.Printf("%s\t%s\n", c.Standalone.Name, c.Standalone.DSN(db))
	}
	fmt.Println("Ctrl-C stops the cluster and removes its data.")
	<-ctx.Done()
	return nil
}
