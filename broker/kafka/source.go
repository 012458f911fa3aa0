package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// queue holds the records fetched or due for a retry, not yet handed
	// out, in offset order.
	queue []*delivery
	// held counts the deliveries of a batch from NextBatch not yet acked
	// or nacked: while it is above 0 the queue waits, so that the
	// partition's records are worked on by one batch at a time.
	held int
	// waiting counts the records of batches nacked and not yet back in
	// the queue: while it is above 0 the queue waits too, so that no
	// record after them commits before them.
	waiting int
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

	mu      sync.Mutex
	parts   map[partKey]*partition
	queued  int           // records in the partitions' queues
	changed chan struct{} // closed (and replaced) when a queue grows or shrinks, or a hold ends

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

var _ broker.BatchSource = (*Source)(nil)

// queueLimit is the low-water mark of the records fetched and not yet
// handed out: fetching waits while that many wait on partitions a worker
// may take (see takeable). A poll then takes all that franz-go has
// buffered. queueCap bounds the records queued in all, then fetching
// waits too; the bytes of a poll are franz-go's to bound (see the package
// doc).
const (
	queueLimit = 512
	queueCap   = 16 * queueLimit
)

// fetchMaxWait is how long a fetch waits for new records, unless
// Config.Options sets kgo.FetchMaxWait: franz-go's default of 5 s would
// keep a partition assigned by a rebalance unfetched that long, while the
// fetch in flight waits on the partitions already caught up.
const fetchMaxWait = 500 * time.Millisecond

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
		cfg: c, parts: map[partKey]*partition{}, changed: make(chan struct{}),
		ctx: sctx, cancel: cancel, kick: make(chan struct{}, 1), failed: latch.New(),
		afterPoll: afterPoll,
	}
	// The Source's defaults, then the user's options, then the Source's
	// own, which its correctness rests on (no auto-commit, its rebalance
	// callbacks, one topic): each wins over those before it.
	opts := append(append([]kgo.Opt{kgo.FetchMaxWait(fetchMaxWait)}, c.Options...),
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
		s.forget(p)
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
		s.forget(p)
	}
}

// takeable counts the records queued on partitions that a worker may take
// now, under s.mu: held by no batch and waiting for no retry. The others'
// records do not take the room of those: a partition queued behind a
// batch in flight, or behind a retry, must not keep the rest unfetched.
// A waiting partition's fetching is paused, so its queue grows by at most
// the fetch that was in flight when the pause came.
func (s *Source) takeable() int {
	n := 0
	for _, p := range s.parts {
		if p.held == 0 && p.waiting == 0 {
			n += len(p.queue)
		}
	}
	return n
}

// pause stops fetching partition k while a record of its batch waits for
// a retry, under s.mu; resume starts it again. franz-go keeps a pause
// across rebalances, so forget resumes too.
func (s *Source) pause(k partKey) {
	s.cl.PauseFetchPartitions(map[string][]int32{s.cfg.Topic: {k}})
}

func (s *Source) resume(k partKey) {
	s.cl.ResumeFetchPartitions(map[string][]int32{s.cfg.Topic: {k}})
}

// forget drops partition k's state and its queue, under s.mu: the records
// not yet handed out are read again by the partition's next owner.
func (s *Source) forget(k partKey) {
	if p := s.parts[k]; p != nil {
		if p.waiting > 0 {
			s.resume(k)
		}
		s.queued -= len(p.queue)
		p.queue = nil
		delete(s.parts, k)
		s.signal()
	}
}

// signal wakes those waiting for a change of the queues, under s.mu.
func (s *Source) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// fetch polls records while the queues have room and queues them by
// partition, for Next and NextBatch. Each poll takes all the buffered
// fetches. franz-go hands them out partition after partition, so a poll
// of a few records at a time would queue one or two partitions at once,
// and NextBatch, which holds a partition per batch, would let no more
// batches than that run side by side.
func (s *Source) fetch() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		room, changed := min(queueLimit-s.takeable(), queueCap-s.queued), s.changed
		s.mu.Unlock()
		if room <= 0 {
			select {
			case <-changed:
				continue
			case <-s.ctx.Done():
				return
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		s.poll()
	}
}

// poll polls the buffered records, and registers them as pending and
// queues them while rebalancing is blocked.
func (s *Source) poll() {
	fetches := s.cl.PollRecords(s.ctx, -1)
	defer s.cl.AllowRebalance()
	if fetches.IsClientClosed() || s.ctx.Err() != nil {
		return
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
	// Converted outside the lock: a poll may bring a whole fetch.
	recs := fetches.Records()
	msgs := make([]*broker.Message, len(recs))
	for i, r := range recs {
		msgs[i] = s.message(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	queued := s.queued
	for i, r := range recs {
		p := s.parts[r.Partition]
		if r.Topic != s.cfg.Topic || p == nil {
			continue // another topic, or not assigned (cannot happen while rebalancing is blocked)
		}
		if r.Offset < p.next {
			s.rewound(p, r)
		}
		if _, ok := p.pending[r.Offset]; ok {
			continue // in flight or waiting for a retry since before the rewind
		}
		p.pending[r.Offset] = r.LeaderEpoch
		if r.Offset+1 > p.next {
			p.next, p.epoch = r.Offset+1, r.LeaderEpoch
		}
		p.queue = append(p.queue, &delivery{s: s, r: r, part: p, msg: msgs[i]})
		s.queued++
	}
	if s.queued != queued {
		s.signal()
	}
}

// rewound takes back, under s.mu, the records queued at or after r, when
// franz-go moved the partition's fetch back to r within the assignment,
// as it does after what it takes for lost data. They come again from r
// on, in offset order. What lies before r stays: queued, in flight or
// waiting for a retry, and pending, so that the commit waits for it. A
// record fetched again while it is still pending is not queued twice.
func (s *Source) rewound(p *partition, r *kgo.Record) {
	s.cfg.Logger.Warn("kafka: the fetch moved back; the partition is read again from there",
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	keep := p.queue[:0]
	for _, d := range p.queue {
		if d.r.Offset < r.Offset {
			keep = append(keep, d)
			continue
		}
		delete(p.pending, d.r.Offset)
		s.queued--
	}
	clear(p.queue[len(keep):])
	p.queue = keep
	p.next = r.Offset
}

func (s *Source) message(r *kgo.Record) *broker.Message {
	m := &broker.Message{Subject: r.Topic, Key: string(r.Key), Payload: r.Value, Deliveries: 1,
		Time: r.Timestamp, System: broker.SystemKafka} // the producer's time, or the broker's (LogAppendTime)
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
	s.release(d)
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
	inBatch := d.held // its partition waits for it
	s.release(d)
	if s.closing {
		s.mu.Unlock()
		return // read again from the committed offset by the next owner
	}
	s.wg.Add(1)
	d.msg.Deliveries++ // as this Source counts them: it does not survive a restart
	if inBatch {
		if d.part.waiting++; d.part.waiting == 1 {
			s.pause(d.r.Partition)
		}
	}
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
		s.mu.Lock()
		defer s.mu.Unlock()
		current := s.parts[d.r.Partition] == d.part
		if inBatch {
			if d.part.waiting--; d.part.waiting == 0 && current {
				s.resume(d.r.Partition)
			}
		}
		if !current {
			return // revoked meanwhile: the new owner reads it again
		}
		// Back in offset order, so that a batch stays in it.
		q := d.part.queue
		i, _ := slices.BinarySearchFunc(q, d.r.Offset, func(e *delivery, off int64) int { return cmp.Compare(e.r.Offset, off) })
		d.part.queue = slices.Insert(q, i, d)
		s.queued++
		s.signal()
	}()
}

// release ends d's hold on its partition, under s.mu.
func (s *Source) release(d *delivery) {
	if !d.held {
		return
	}
	d.held = false
	if d.part.held--; d.part.held == 0 {
		s.signal()
	}
}

// Next returns the next record, fetched or due for a retry, of a
// partition that no batch of NextBatch holds.
func (s *Source) Next(ctx context.Context) (broker.Delivery, error) {
	ds, err := s.take(ctx, 1, false)
	if err != nil {
		return nil, err
	}
	return ds[0], nil
}

// NextBatch returns up to n consecutive records of one partition, in offset
// order, fetched or due for a retry.
//
// The partition is held until each of them is acked, nacked or termed.
// Meanwhile neither NextBatch nor Next hands out its other records. One
// batch at a time thus works on a partition's records, in order. A nacked
// record holds the partition until it is handed out again after its
// delay, before the records that follow it. So they never commit before
// it.
func (s *Source) NextBatch(ctx context.Context, n int) ([]broker.Delivery, error) {
	return s.take(ctx, max(n, 1), true)
}

// take waits for a partition with queued records that no batch holds, and
// takes up to n of them, holding the partition if hold.
func (s *Source) take(ctx context.Context, n int, hold bool) ([]broker.Delivery, error) {
	for {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case s.ctx.Err() != nil:
			return nil, broker.ErrSourceClosed
		case s.failed.Err() != nil:
			return nil, s.failed.Err()
		}
		s.mu.Lock()
		// Map order is random: no partition is favored for long.
		for _, p := range s.parts {
			if p.held > 0 || p.waiting > 0 || len(p.queue) == 0 {
				continue
			}
			k := min(n, len(p.queue))
			ds := make([]broker.Delivery, k)
			for i, d := range p.queue[:k] {
				d.held = hold
				ds[i] = d
			}
			if hold {
				p.held = k
			}
			if p.queue = p.queue[k:]; len(p.queue) == 0 {
				p.queue = nil // let the array go
			}
			s.queued -= k
			s.signal() // room for fetch
			s.mu.Unlock()
			return ds, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		case <-s.ctx.Done():
		case <-s.failed.Done():
		}
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

// RedeliveryWindow returns the topic's retention.ms, which is 7 days by
// Kafka's default. It returns 0 when retention.ms is -1, with no time
// limit.
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
