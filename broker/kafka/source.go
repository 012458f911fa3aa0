package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/latch"
)

// partKey names a partition of the topic.
type partKey = int32

// partition is the Source's state of an assigned partition. A new
// assignment gets a new partition, so that acks of records delivered
// under an earlier one change nothing.
type partition struct {
	pending   map[int64]int32 // delivered, not acked: offset -> leader epoch
	next      int64           // one past the highest record delivered (-1: none)
	epoch     int32           // leader epoch of that record
	committed int64           // last offset committed (-1: none by this Source)
}

// commitOffset is what may be committed: the oldest pending offset, or
// next when none is pending, with its record's leader epoch.
func (p *partition) commitOffset() kgo.EpochOffset {
	off := kgo.EpochOffset{Epoch: p.epoch, Offset: p.next}
	for o, e := range p.pending {
		if o < off.Offset {
			off = kgo.EpochOffset{Epoch: e, Offset: o}
		}
	}
	return off
}

// Source is a broker.Source on a Kafka consumer group.
type Source struct {
	cfg Config
	cl  *kgo.Client

	mu    sync.Mutex
	parts map[partKey]*partition
	ready chan *delivery // fetched records and retries due, for Next

	ctx     context.Context // canceled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the goroutines; Add under mu while !closing
	closing bool           // under mu: Close has begun
	kick    chan struct{}  // asks the committer to commit now
	closed  sync.Once

	// afterPoll, set by tests only, runs between a poll and the
	// registration of its records, with their number.
	afterPoll func(n int)

	failed *latch.Error // the terminal error
}

var _ broker.Source = (*Source)(nil)

// NewSource joins the group and starts fetching. A group without a
// committed offset starts at the topic's oldest record.
func NewSource(ctx context.Context, cfg *Config) (*Source, error) {
	return newSource(ctx, cfg, nil)
}

// newSource is NewSource with a test's afterPoll hook.
func newSource(ctx context.Context, cfg *Config, afterPoll func(n int)) (*Source, error) {
	if cfg == nil || len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.Group == "" {
		return nil, fmt.Errorf("%w: Brokers, Topic and Group are required", ErrInvalidConfig)
	}
	c := *cfg
	if c.IDHeader == "" {
		c.IDHeader = broker.DefaultIDHeader
	}
	if c.TypeHeader == "" {
		c.TypeHeader = broker.DefaultTypeHeader
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Source{
		cfg: c, parts: map[partKey]*partition{}, ready: make(chan *delivery),
		ctx: sctx, cancel: cancel, kick: make(chan struct{}, 1), failed: latch.New(),
		afterPoll: afterPoll,
	}
	// The user's options first: the Source's own, which its correctness
	// rests on (no auto-commit, its rebalance callbacks, one topic), win.
	opts := append(append([]kgo.Opt{}, c.Options...),
		kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// A polled batch is registered before a rebalance may revoke its
		// partitions (AllowRebalance), so that no record of an old
		// assignment is ever counted in a new one.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: client: %w", ErrInvalidConfig, err) // kgo.NewClient only checks options
	}
	if err := cl.Ping(ctx); err != nil {
		cancel()
		cl.Close()
		return nil, fmt.Errorf("kafka: brokers %v: %w", c.Brokers, err)
	}
	s.cl = cl
	s.wg.Add(2)
	go s.fetch()
	go s.commitLoop()
	return s, nil
}

// assigned starts fresh state for newly assigned partitions.
func (s *Source) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range assigned[s.cfg.Topic] {
		s.parts[p] = &partition{pending: map[int64]int32{}, next: -1, committed: -1}
	}
}

// revoked commits what is done of the revoked partitions, then forgets
// them: their records still in flight are redelivered to the new owner.
func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.commit(ctx, revoked[s.cfg.Topic])
	s.lost(ctx, nil, revoked)
}

// lost forgets partitions without committing (the group is gone).
func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range lost[s.cfg.Topic] {
		delete(s.parts, p)
	}
}

// fetch polls records, registers the batch as pending, lets the group
// rebalance again, and hands the records to Next one at a time, skipping
// those whose partition was revoked meanwhile (the new owner reads them
// again from the committed offset).
func (s *Source) fetch() {
	defer s.wg.Done()
	for s.ctx.Err() == nil {
		batch := s.poll()
		for _, d := range batch {
			if !s.current(d) {
				continue
			}
			select {
			case s.ready <- d:
			case <-s.ctx.Done():
				return
			}
		}
	}
}

// poll polls one batch and registers it while rebalancing is blocked.
func (s *Source) poll() []*delivery {
	fetches := s.cl.PollRecords(s.ctx, 64)
	defer s.cl.AllowRebalance()
	if fetches.IsClientClosed() || s.ctx.Err() != nil {
		return nil
	}
	if s.afterPoll != nil {
		s.afterPoll(fetches.NumRecords())
	}
	fetches.EachError(func(topic string, p int32, err error) {
		var ke *kerr.Error
		var gs *kgo.ErrGroupSession
		switch {
		case errors.Is(err, context.Canceled):
		case errors.As(err, &gs) && rejoinable(gs.Err):
			// Kicked out of the group (UNKNOWN_MEMBER_ID after a session
			// timeout, say): franz-go revokes the partitions and rejoins
			// by itself; it only tells.
			s.cfg.Logger.Warn("kafka: the consumer group session was lost; rejoining", "group", s.cfg.Group, "error", err)
		case errors.As(err, &ke) && !ke.Retriable:
			// franz-go retries the retriable ones itself and returns
			// the others: authorization, an unsupported format.
			s.failed.Set(fmt.Errorf("kafka: fetching %s partition %d: %w", topic, p, err))
		default:
			s.cfg.Logger.Warn("kafka: fetch error", "topic", topic, "partition", p, "error", err)
		}
	})
	var batch []*delivery
	s.mu.Lock()
	defer s.mu.Unlock()
	fetches.EachRecord(func(r *kgo.Record) {
		p := s.parts[r.Partition]
		if r.Topic != s.cfg.Topic || p == nil {
			return // another topic, or not assigned (cannot happen while rebalancing is blocked)
		}
		p.pending[r.Offset] = r.LeaderEpoch
		if r.Offset+1 > p.next {
			p.next, p.epoch = r.Offset+1, r.LeaderEpoch
		}
		batch = append(batch, &delivery{s: s, r: r, part: p, msg: s.message(r)})
	})
	return batch
}

// current reports whether d's partition is still assigned as it was when
// d was fetched.
func (s *Source) current(d *delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parts[d.r.Partition] == d.part
}

func (s *Source) message(r *kgo.Record) *broker.Message {
	m := &broker.Message{Subject: r.Topic, Key: string(r.Key), Payload: r.Value, Deliveries: 1}
	if len(r.Headers) > 0 {
		m.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			switch h.Key {
			case s.cfg.IDHeader:
				m.ID = string(h.Value)
			case s.cfg.TypeHeader:
				m.Type = string(h.Value)
			}
			m.Headers[h.Key] = string(h.Value)
		}
	}
	if m.ID == "" && s.cfg.IDFromOffset {
		m.ID = r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
	}
	return m
}

// done marks d's record acked, and asks for a commit.
func (s *Source) done(d *delivery) {
	s.mu.Lock()
	if s.parts[d.r.Partition] == d.part { // else revoked since: the new owner has it
		delete(d.part.pending, d.r.Offset)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// retry hands d out again after delay, unless the Source closes first.
func (s *Source) retry(d *delivery, delay time.Duration) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return // read again from the committed offset by the next owner
	}
	s.wg.Add(1)
	d.msg.Deliveries++ // as this Source counts them: it does not survive a restart
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return
		}
		if !s.current(d) {
			return // revoked meanwhile: the new owner reads it again
		}
		select {
		case s.ready <- d:
		case <-s.ctx.Done():
		}
	}()
}

// Next returns the next record, fetched or due for a retry.
func (s *Source) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case d := <-s.ready:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, broker.ErrSourceClosed
	case <-s.failed.Done():
		return nil, s.failed.Err()
	}
}

// Close commits what is done, leaves the group and closes the client.
// Records delivered and not acked are read again by the partition's next
// owner.
func (s *Source) Close() error {
	s.closed.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.commit(ctx, nil)
		s.cl.CloseAllowingRebalance()
	})
	return nil
}

// rejoinable reports whether a lost group session is one that rejoining
// fixes: the member was kicked out or its generation is stale, or the
// error is one Kafka marks retriable (a coordinator moving), or no Kafka
// error at all (the network). Others (authorization, an invalid session
// timeout, an inconsistent protocol, a fenced instance ID) would fail
// again on every rejoin: they are terminal.
func rejoinable(err error) bool {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return true
	}
	return ke.Retriable || errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.MemberIDRequired)
}

var _ broker.RedeliveryWindower = (*Source)(nil)

// RedeliveryWindow returns the topic's retention.ms (Kafka's default is 7
// days), 0 when it is -1 (no time limit).
func (s *Source) RedeliveryWindow(ctx context.Context) (time.Duration, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = s.cfg.Topic
	res.ConfigNames = []string{"retention.ms"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return 0, fmt.Errorf("kafka: describing topic %s: %w", s.cfg.Topic, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return 0, fmt.Errorf("kafka: describing topic %s: %w", s.cfg.Topic, err)
		}
		for _, c := range r.Configs {
			if c.Name != "retention.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("kafka: topic %s: retention.ms %q: %w", s.cfg.Topic, *c.Value, err)
			}
			if ms < 0 {
				return 0, nil
			}
			return time.Duration(ms) * time.Millisecond, nil
		}
	}
	return 0, fmt.Errorf("kafka: topic %s: no retention.ms in the broker's answer", s.cfg.Topic)
}
