package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitLoop commits every CommitInterval, sooner after an ack when the
// last commit is older than that.
func (s *Source) commitLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			select { // at most one commit per interval
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
		}
		s.commit(s.ctx, nil)
	}
}

// commit commits the done offsets of the given partitions (nil: all
// assigned) that moved since their last commit.
func (s *Source) commit(ctx context.Context, only []int32) {
	s.mu.Lock()
	offsets := map[int32]kgo.EpochOffset{}
	parts := map[int32]*partition{}
	consider := func(k int32, p *partition) {
		if p == nil || p.next < 0 {
			return
		}
		if off := p.commitOffset(); off.Offset > p.committed {
			offsets[k] = off
			parts[k] = p
		}
	}
	if only == nil {
		for k, p := range s.parts {
			consider(k, p)
		}
	} else {
		for _, k := range only {
			consider(k, s.parts[k])
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	var failed error
	s.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{s.cfg.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			failed = commitError(resp, err)
		})
	if failed != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("kafka: commit failed, retrying at the next interval", "topic", s.cfg.Topic, "group", s.cfg.Group, "error", failed)
		}
		return
	}
	s.mu.Lock()
	for k, p := range parts {
		p.committed = max(p.committed, offsets[k].Offset)
	}
	s.mu.Unlock()
}

// commitError is the error of a commit: the request's, or the first
// partition's.
func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}
