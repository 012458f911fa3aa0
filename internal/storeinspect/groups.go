package storeinspect

import (
	"context"

	"github.com/inboxkit/inbox/internal/failgroup"
)

// Ungrouped is a row whose error group is not filled in: a dead letter
// (ID) or an attempts row (Consumer, MessageID), and its error.
type Ungrouped struct {
	ID                  int64
	Consumer, MessageID []byte
	Error               string
}

// GroupFiller reads and writes the rows whose error group is not filled
// in, for FillGroups. Next returns up to limit of them. Set writes the
// group of one.
type GroupFiller struct {
	Next func(ctx context.Context, limit int) ([]Ungrouped, error)
	Set  func(ctx context.Context, u Ungrouped, group string) error
}

// fillBatch is how many rows FillGroups reads at a time.
const fillBatch = 500

// FillGroups fills in the error group of the rows written before the
// stores recorded it, one statement per row, outside any transaction. It
// returns how many it wrote. It stops at the first batch shorter than a
// full one, so that rows an older writer adds meanwhile cannot keep it
// running.
func FillGroups(ctx context.Context, f GroupFiller) (int64, error) {
	var n int64
	for {
		rows, err := f.Next(ctx, fillBatch)
		if err != nil {
			return n, err
		}
		for _, u := range rows {
			if err := f.Set(ctx, u, failgroup.Of(u.Error)); err != nil {
				return n, err
			}
			n++
		}
		if len(rows) < fillBatch {
			return n, nil
		}
	}
}
