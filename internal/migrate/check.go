package migrate

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/store"
)

// Check returns an error wrapping notMigrated when s's tables are at an
// older schema version than the code needs, the last of s.Migrations.
// Tables at a newer version pass: migrations only add. who begins the
// message of an error reading the version.
func Check(ctx context.Context, s store.Schema, who string, notMigrated error) error {
	need := 0
	if ms := s.Migrations(); len(ms) > 0 {
		need = ms[len(ms)-1].Version
	}
	have, err := s.SchemaVersion(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("%s: checking the tables' schema version: %w", who, err)
	case have < need:
		return fmt.Errorf("%w: schema version %d, this code needs %d: run inbox.Migrate (or `inbox migrate`)", notMigrated, have, need)
	}
	return nil
}
