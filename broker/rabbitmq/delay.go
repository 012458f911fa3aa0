package rabbitmq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// delayQueue names the delay queue of bucket b.
func (s *Source) delayQueue(b time.Duration) string { return DelayQueue(s.cfg.Queue, b) }

func bucketName(b time.Duration) string {
	switch {
	case b%time.Hour == 0:
		return strconv.FormatInt(int64(b/time.Hour), 10) + "h"
	case b%time.Minute == 0:
		return strconv.FormatInt(int64(b/time.Minute), 10) + "m"
	case b%time.Second == 0:
		return strconv.FormatInt(int64(b/time.Second), 10) + "s"
	default:
		return strconv.FormatInt(b.Milliseconds(), 10) + "ms"
	}
}

// bucket rounds delay up to a bucket, or down to the largest.
func (s *Source) bucket(delay time.Duration) time.Duration {
	i, _ := slices.BinarySearch(s.cfg.DelayBuckets, delay)
	return s.cfg.DelayBuckets[min(i, len(s.cfg.DelayBuckets)-1)]
}

// declaration is one declare of a delay queue, which the concurrent
// Nacks of its bucket wait for: a quorum queue that another declaration
// is still creating is declared-ok at once, but refuses publishes
// (negative confirms) until it is started.
type declaration struct {
	done chan struct{} // closed when err is set
	err  error
}

// declareDelay declares bucket b's delay queue once per Source: its
// messages expire after b and go back to the queue. Concurrent callers
// wait for one declare; a failed one is tried again by the next caller.
func (s *Source) declareDelay(ctx context.Context, sess *session, b time.Duration) error {
	if s.cfg.NoDeclare {
		return nil
	}
	s.mu.Lock()
	dl, ok := s.declared[b]
	if !ok {
		dl = &declaration{done: make(chan struct{})}
		s.declared[b] = dl
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-dl.done:
			return dl.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	dl.err = s.queueDeclareDelay(sess, b)
	close(dl.done)
	if dl.err != nil {
		s.forgetDelay(b)
	}
	return dl.err
}

// forgetDelay makes the next declareDelay of bucket b declare it again,
// unless a declare is under way.
func (s *Source) forgetDelay(b time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dl, ok := s.declared[b]; ok {
		select {
		case <-dl.done:
			delete(s.declared, b)
		default:
		}
	}
}

func (s *Source) queueDeclareDelay(sess *session, b time.Duration) error {
	args := amqp.Table{
		"x-queue-type":              string(s.cfg.QueueType),
		"x-message-ttl":             b.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": s.cfg.Queue,
	}
	if s.cfg.QueueType == Quorum {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	ch, err := sess.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(s.delayQueue(b), true, false, false, false, args); err != nil {
		return fmt.Errorf("declare delay queue %q: %w", s.delayQueue(b), err)
	}
	return nil
}
