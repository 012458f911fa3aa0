package console

import (
	"fmt"
	"time"

	"github.com/inboxkit/inbox/store"
)

// The chart's geometry, in the SVG's user units: the page scales it to
// its width.
const (
	chartW, chartH      = 720.0, 160.0
	chartLeft, chartTop = 44.0, 8.0
	chartRight          = 8.0
	chartBottom         = 22.0
	chartPlotW          = chartW - chartLeft - chartRight
	chartPlotH          = chartH - chartTop - chartBottom
	chartLabelEvery     = 6 // x labels, at most
)

// chart is one consumer's messages per minute over the window, drawn as
// bars.
type chart struct {
	W, H, Left, Top       float64
	PlotW, PlotH          float64
	Bars                  []bar
	XLabels, YLabels      []label
	Total, Peak           int64
	Minutes               int
	From, To              string
	Description           string
	BaselineY, TextBelowY float64
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

type label struct {
	X, Y float64
	Text string
}

// newChart draws counts, one per minute from start on.
func newChart(start time.Time, counts []int64) *chart {
	c := &chart{W: chartW, H: chartH, Left: chartLeft, Top: chartTop, PlotW: chartPlotW, PlotH: chartPlotH,
		Minutes: len(counts), BaselineY: chartTop + chartPlotH, TextBelowY: chartTop + chartPlotH + 15}
	for _, n := range counts {
		c.Total += n
		c.Peak = max(c.Peak, n)
	}
	top := niceCeil(c.Peak)
	slot := chartPlotW / float64(len(counts))
	gap := 0.0
	if slot >= 3 {
		gap = 1
	}
	for i, n := range counts {
		if n == 0 {
			continue
		}
		h := float64(n) / float64(top) * chartPlotH
		h = max(h, 1) // a minute with one message stays in sight
		m := start.Add(time.Duration(i) * time.Minute).UTC()
		c.Bars = append(c.Bars, bar{
			X: chartLeft + float64(i)*slot, Y: chartTop + chartPlotH - h, W: slot - gap, H: h,
			Title: fmt.Sprintf("%s UTC: %d %s", m.Format("15:04"), n, plural(n, "message")),
		})
	}
	for _, v := range []int64{0, top / 2, top} {
		c.YLabels = append(c.YLabels, label{X: chartLeft - 4, Y: chartTop + chartPlotH - float64(v)/float64(top)*chartPlotH + 4, Text: fmt.Sprint(v)})
	}
	step := labelStep(len(counts))
	for i := 0; i <= len(counts); i++ {
		m := start.Add(time.Duration(i) * time.Minute).UTC()
		if m.Minute()%step != 0 && !(step >= 60 && m.Minute() == 0) {
			continue
		}
		if step > 60 && m.Hour()%(step/60) != 0 {
			continue
		}
		c.XLabels = append(c.XLabels, label{X: chartLeft + float64(i)*slot, Y: chartTop + chartPlotH + 15, Text: m.Format("15:04")})
	}
	end := start.Add(time.Duration(len(counts)) * time.Minute)
	c.From, c.To = start.UTC().Format("15:04"), end.UTC().Format("15:04")
	c.Description = fmt.Sprintf("Messages processed per minute from %s to %s UTC: %d in all, at most %d in a minute.", c.From, c.To, c.Total, c.Peak)
	return c
}

// labelStep is the minutes between x labels, so that at most about
// chartLabelEvery fit.
func labelStep(minutes int) int {
	for _, s := range []int{1, 5, 10, 15, 30, 60, 120, 180, 240, 360} {
		if minutes/s <= chartLabelEvery {
			return s
		}
	}
	return 720
}

// niceCeil is the least of 2, 4, 5, 6, 8 or 10 times a power of ten
// that is at least n and 2, and even: the middle label is then a whole
// number.
func niceCeil(n int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{2, 4, 5, 6, 8, 10} {
			if v := m * p; v >= n && v >= 2 && v%2 == 0 {
				return v
			}
		}
	}
}

// throughput spreads the buckets of the window from start on over
// minutes slots per consumer, keyed by the consumer's bytes.
func throughput(buckets []*store.ThroughputBucket, start time.Time, minutes int) map[string][]int64 {
	out := map[string][]int64{}
	for _, b := range buckets {
		i := int(b.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= minutes {
			continue
		}
		s := out[string(b.Consumer)]
		if s == nil {
			s = make([]int64, minutes)
			out[string(b.Consumer)] = s
		}
		s[i] += b.Count
	}
	return out
}

// plural is noun with an s unless n is 1.
func plural[N ~int | ~int64](n N, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
