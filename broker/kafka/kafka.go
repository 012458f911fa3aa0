// Package kafka connects the inbox's consumer runtime to Kafka, with a
// consumer group on franz-go (github.com/twmb/franz-go/pkg/kgo).
//
//	src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: []string{"localhost:9092"}, Topic: "payments", Group: "billing"})
//	err = inbox.Consume(ctx, ib, src, handler, nil)
//
// Kafka has no per-message acknowledgement: a partition's committed offset
// says that everything before it is done. The Source therefore commits,
// per partition, the offset of the oldest record delivered and not yet
// acked (or one past the last record, when every one is acked): a record
// waiting for a retry holds its partition's offset back, never the
// records after it, which are processed meanwhile. Commits go out in the
// background every CommitInterval, when partitions are revoked, and on
// Close. After a crash or a rebalance the group reads again from the
// committed offset: records processed since are redelivered, and the
// inbox skips them as duplicates.
//
// Kafka does not redeliver by itself: Nack keeps the record in the Source
// and hands it out again after the delay (Message.Deliveries counts these
// hand-outs in this Source only). A rebalance that moves the partition
// drops the waiting retry: the new owner reads the record again from the
// committed offset, at once. A message's ID is its IDHeader header, which
// Publisher sets.
//
// A fetch error that franz-go does not retry itself (authorization, an
// unsupported format) is terminal: Next returns it, and so Consume does.
//
// Polled records are registered before the group may rebalance again
// (BlockRebalanceOnPoll), so that no record of an earlier assignment of a
// partition counts in a later one. A commit computed just before a
// partition was revoked may land after the new owner's, moving the offset
// back: that redelivers, never skips.
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

// Config configures a Source. Brokers, Topic and Group are required; zero
// values of the others mean the defaults.
type Config struct {
	// Brokers are seed addresses of the cluster ("host:9092").
	Brokers []string
	// Topic is the topic to consume.
	Topic string
	// Group is the consumer group; use one per logical consumer.
	Group string
	// IDHeader names the record header holding the message's ID. Default
	// "Inbox-Id".
	IDHeader string
	// TypeHeader names the header holding the message type. Default
	// "Inbox-Type".
	TypeHeader string
	// IDFromOffset gives a record without the ID header the ID
	// "topic/partition/offset". It is stable across redeliveries of that
	// record, but a producer that sends the same message twice (a retried
	// send without idempotence) makes two records with two IDs. Default
	// false: such a record is dead-lettered as having no ID.
	IDFromOffset bool
	// CommitInterval is how often acked offsets are committed. A crash
	// loses at most that much progress (redelivered, then skipped as
	// duplicates). Default 500 ms.
	CommitInterval time.Duration
	// Options are more franz-go options (TLS, SASL, timeouts). Those the
	// Source sets (seed brokers, group, topic, reset offset, no
	// auto-commit, blocking rebalances on poll, the partition callbacks)
	// override them.
	Options []kgo.Opt
	// Logger receives commit failures (retried at the next interval).
	// Default slog.Default().
	Logger *slog.Logger
}

// ErrInvalidConfig is wrapped by NewSource's error for a missing field or
// an option franz-go refuses.
var ErrInvalidConfig = errors.New("kafka: invalid config")

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
		c.IDHeader = "Inbox-Id"
	}
	if c.TypeHeader == "" {
		c.TypeHeader = "Inbox-Type"
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = 500 * time.Millisecond
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
		switch {
		case errors.Is(err, context.Canceled):
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
	m := &broker.Message{Subject: r.Topic, Payload: r.Value, Deliveries: 1}
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

type delivery struct {
	s    *Source
	r    *kgo.Record
	part *partition
	msg  *broker.Message
}

func (d *delivery) Message() *broker.Message { return d.msg }

// Ack marks the record done; its offset is committed in the background
// (see Config.CommitInterval).
func (d *delivery) Ack(context.Context) error {
	d.s.done(d)
	return nil
}

// Nack hands the record out again after delay; its partition's committed
// offset stays before it meanwhile.
func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	d.s.retry(d, delay)
	return nil
}

// Term marks the record done: Kafka cannot skip one record otherwise.
func (d *delivery) Term(ctx context.Context, _ string) error { return d.Ack(ctx) }

// InProgress does nothing: a Kafka record has no lease (the group's
// session is kept by the client's heartbeats).
func (d *delivery) InProgress(context.Context) error { return nil }

// Publisher produces to Kafka with the message's ID in the IDHeader
// header.
type Publisher struct {
	cl                   *kgo.Client
	idHeader, typeHeader string
}

var _ broker.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher on cl (a producer client); idHeader and
// typeHeader default to "Inbox-Id" and "Inbox-Type", and must match the
// consumers' Config.
func NewPublisher(cl *kgo.Client, idHeader, typeHeader string) *Publisher {
	if idHeader == "" {
		idHeader = "Inbox-Id"
	}
	if typeHeader == "" {
		typeHeader = "Inbox-Type"
	}
	return &Publisher{cl: cl, idHeader: idHeader, typeHeader: typeHeader}
}

// Publish produces msg to the topic msg.Subject and waits for the broker's
// ack. The record has no key: partitioning is franz-go's default.
func (p *Publisher) Publish(ctx context.Context, msg *broker.Message) error {
	if msg.ID == "" {
		return errors.New("kafka: publish: the message has no ID")
	}
	r := &kgo.Record{Topic: msg.Subject, Value: msg.Payload}
	for k, v := range msg.Headers {
		if k != p.idHeader && k != p.typeHeader {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.idHeader, Value: []byte(msg.ID)})
	if msg.Type != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.typeHeader, Value: []byte(msg.Type)})
	}
	return p.cl.ProduceSync(ctx, r).FirstErr()
}
