package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/inboxkit/inbox/store"
)

// errNotMigrated is the error of a command run on tables that migrate
// never created, instead of the database's "no such table".
var errNotMigrated = errors.New("not migrated: run inbox migrate with the same store flags first (the inbox's tables do not exist)")

// usage writes a usage error of the command to stderr: exit status 2.
func (s *storeFlags) usage(stderr io.Writer, msg string) error {
	fmt.Fprintf(stderr, "inbox %s: %s\n", s.cmd, msg)
	return errUsage
}

// migratedInspection is an inspection whose errors on a database without
// the migrations applied are errNotMigrated.
type migratedInspection struct {
	inspection
	applied func(ctx context.Context) ([]int, error)
}

func checked(i inspection, applied func(ctx context.Context) ([]int, error)) inspection {
	return migratedInspection{inspection: i, applied: applied}
}

// check returns errNotMigrated for err when no migration is applied.
func (m migratedInspection) check(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if vs, aerr := m.applied(ctx); aerr == nil && len(vs) == 0 {
		return errNotMigrated
	}
	return err
}

func (m migratedInspection) Stats(ctx context.Context, p *store.StatsParams) ([]*store.ConsumerStats, error) {
	s, err := m.inspection.Stats(ctx, p)
	return s, m.check(ctx, err)
}

func (m migratedInspection) DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error) {
	dls, err := m.inspection.DeadLetterSearch(ctx, p)
	return dls, m.check(ctx, err)
}

func (m migratedInspection) DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error) {
	d, err := m.inspection.DeadLetterGet(ctx, id)
	return d, m.check(ctx, err)
}

func (m migratedInspection) DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error) {
	ids, err := m.inspection.DeadLetterDiscard(ctx, ids)
	return ids, m.check(ctx, err)
}

func (m migratedInspection) release(ctx context.Context, id int64, lt time.Duration, fn func(*store.DeadLetter, bool) error) error {
	return m.check(ctx, m.inspection.release(ctx, id, lt, fn))
}
