package inbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// stubDelivery is a delivery that only carries its message.
type stubDelivery struct{ msg *broker.Message }

func delivered(id string) broker.Delivery { return stubDelivery{&broker.Message{ID: id}} }

func (d stubDelivery) Message() *broker.Message                { return d.msg }
func (stubDelivery) Ack(context.Context) error                 { return nil }
func (stubDelivery) Nack(context.Context, time.Duration) error { return nil }
func (stubDelivery) Term(context.Context, string) error        { return nil }
func (stubDelivery) InProgress(context.Context) error          { return nil }

// stubSource hands out deliveries "n1" to "n3" from Next, then nothing.
type stubSource struct{ nexts int }

func (s *stubSource) Next(ctx context.Context) (broker.Delivery, error) {
	if s.nexts == 3 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s.nexts++
	return delivered("n" + string(rune('0'+s.nexts))), nil
}

func (s *stubSource) Close() error { return nil }

// stubBatchSource is a stubSource whose NextBatch returns batch and err.
type stubBatchSource struct {
	stubSource
	batch []broker.Delivery
	err   error
}

func (s *stubBatchSource) NextBatch(context.Context, int) ([]broker.Delivery, error) {
	return s.batch, s.err
}

// gather takes a broker.BatchSource's batch as it is, in its order, when it
// processes in batches, and one delivery of Next otherwise; other sources
// fill a batch with Next.
func TestGather(t *testing.T) {
	t.Parallel()
	errGone := errors.New("gone")
	for _, tc := range []struct {
		name      string
		src       broker.Source
		batchSize int
		want      []string
		wantErr   bool
	}{
		{"batch source", &stubBatchSource{batch: []broker.Delivery{delivered("b1"), delivered("b2")}}, 10, []string{"b1", "b2"}, false},
		{"batch source, one at a time", &stubBatchSource{batch: []broker.Delivery{delivered("b1")}}, 1, []string{"n1"}, false},
		{"batch source fails", &stubBatchSource{err: errGone}, 10, nil, true},
		{"batch source returns nothing", &stubBatchSource{}, 10, nil, true},
		{"plain source", &stubSource{}, 10, []string{"n1", "n2", "n3"}, false},
		{"plain source, one at a time", &stubSource{}, 1, []string{"n1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := (&ConsumerConfig{BatchSize: tc.batchSize}).withDefaults(tc.src)
			ds, err := gather(context.Background(), tc.src, &c, c.BatchSize)
			if (err != nil) != tc.wantErr {
				t.Fatalf("gather: error %v, want an error: %v", err, tc.wantErr)
			}
			var got []string
			for _, d := range ds {
				got = append(got, d.Message().ID)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("gather took %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("gather took %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// prefetching is a stub source holding n deliveries ahead.
type prefetching struct {
	stubSource
	n int
}

func (p *prefetching) Prefetch() int { return p.n }

// prefetchingBatches is a broker.BatchSource that is also a Prefetcher.
type prefetchingBatches struct {
	stubBatchSource
	n int
}

func (p *prefetchingBatches) Prefetch() int { return p.n }

// logPrefetch warns when a Prefetcher holds fewer than Workers ×
// BatchSize deliveries, except for a BatchSource making its own batches.
func TestLogPrefetch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		src            broker.Source
		workers, batch int
		warn           bool
	}{
		{"not a prefetcher", &stubSource{}, 64, 100, false},
		{"enough", &prefetching{n: 400}, 4, 100, false},
		{"too few for the batches", &prefetching{n: 8}, 4, 100, true},
		{"too few for the workers", &prefetching{n: 8}, 9, 1, true},
		{"batch source in batches", &prefetchingBatches{n: 8}, 4, 100, false},
		{"batch source one by one", &prefetchingBatches{n: 8}, 9, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			logPrefetch(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)), "c", tc.src,
				&ConsumerConfig{Workers: tc.workers, BatchSize: tc.batch})
			if got := strings.Count(buf.String(), "level=WARN"); got != map[bool]int{false: 0, true: 1}[tc.warn] {
				t.Fatalf("logged %q; want a warning: %v", buf.String(), tc.warn)
			}
			if tc.warn && !strings.Contains(buf.String(), "sqs MaxMessages up to 10") {
				t.Fatalf("logged %q; want it to name each adapter's prefetch setting, SQS's MaxMessages with its limit", buf.String())
			}
		})
	}
}

// Once fetching has stopped, a worker takes no more deliveries, even from
// a source that still has one ready: its select may pick the delivery over
// the ended context, and the delivery would then run after the shutdown.
// stubSource's Next ignores a done context while it has deliveries.
func TestGatherAfterFetchStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, size := range []int{1, 3} {
		src := &stubSource{}
		ds, err := gather(ctx, src, &ConsumerConfig{BatchSize: size, BatchLinger: time.Millisecond}, size)
		if len(ds) != 0 || !errors.Is(err, context.Canceled) || src.nexts != 0 {
			t.Errorf("batch size %d: gather after fetching stopped took %d deliveries (%d Next calls), err %v; want none, context.Canceled",
				size, len(ds), src.nexts, err)
		}
	}
}
