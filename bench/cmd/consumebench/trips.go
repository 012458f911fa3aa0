package main

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// traffic is what a measurement sent to PostgreSQL, as pgx's tracer saw it
// on the measurement's pool: the inbox's statements and the handlers'.
type traffic struct {
	// Trips are the round trips: a statement sent alone, or a batch
	// (pipeline) of them.
	Trips int64 `json:"round_trips"`
	// Statements are the statements, a batch's each counted.
	Statements int64 `json:"statements"`
	// Commits are the COMMITs sent. ConsumeQueued's transactions commit
	// implicitly, at the end of their pipeline: none.
	Commits int64 `json:"commits"`
}

func (t traffic) sub(u traffic) traffic {
	return traffic{t.Trips - u.Trips, t.Statements - u.Statements, t.Commits - u.Commits}
}

// tripCounter counts a pgx pool's traffic: every Exec, Query and QueryRow
// is one round trip, and so is every SendBatch. A statement's first use on
// a connection costs one more to prepare it, which it leaves out: a few per
// connection.
type tripCounter struct {
	trips, statements, commits atomic.Int64
}

var (
	_ pgx.QueryTracer = (*tripCounter)(nil)
	_ pgx.BatchTracer = (*tripCounter)(nil)
)

func (c *tripCounter) traffic() traffic {
	return traffic{c.trips.Load(), c.statements.Load(), c.commits.Load()}
}

func (c *tripCounter) statement(sql string) {
	c.statements.Add(1)
	if strings.EqualFold(strings.TrimSpace(sql), "commit") {
		c.commits.Add(1)
	}
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	c.statement(data.SQL)
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *tripCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.statement(data.SQL)
}

func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
