package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered are the series of one Gather, by metric name: what the status
// page reads of the backends' state, the same numbers /metrics serves.
type gathered map[string][]series

type series struct {
	labels map[string]string
	v      float64 // a gauge's, counter's or untyped value
	hist   histSummary
}

type histSummary struct {
	count uint64
	sum   float64
}

// gather reads g; a failed Gather leaves out what it could not read.
func gather(g prometheus.Gatherer) gathered {
	out := gathered{}
	if g == nil {
		return out
	}
	mfs, _ := g.Gather() // partial results come with the error
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := series{labels: map[string]string{}}
			for _, lp := range m.GetLabel() {
				s.labels[lp.GetName()] = lp.GetValue()
			}
			switch {
			case m.Gauge != nil:
				s.v = m.GetGauge().GetValue()
			case m.Counter != nil:
				s.v = m.GetCounter().GetValue()
			case m.Untyped != nil:
				s.v = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				s.hist = histSummary{count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum()}
			}
			out[mf.GetName()] = append(out[mf.GetName()], s)
		}
	}
	return out
}

func (g gathered) series(name string) []series { return g[name] }

// value is name's value for node ("" for a series without a node label);
// 0 when absent.
func (g gathered) value(name, node string) float64 {
	return g.labelled(name, "node", node)
}

// labelled is name's value where label is v (or absent, for v "").
func (g gathered) labelled(name, label, v string) float64 {
	for _, s := range g[name] {
		if s.labels[label] == v {
			return s.v
		}
	}
	return 0
}

// histogram is name's count and sum for node.
func (g gathered) histogram(name, node string) histSummary {
	for _, s := range g[name] {
		if s.labels["node"] == node {
			return s.hist
		}
	}
	return histSummary{}
}

// gatherValue reads the first series of name from g; ok is false when g
// has none.
func gatherValue(g prometheus.Gatherer, name string) (float64, bool) {
	s := gather(g).series(name)
	if len(s) == 0 {
		return 0, false
	}
	return s[0].v, true
}

// sampler reads a value at start and then every interval into a ring that
// covers span, for a chart of the recent past. When its first read finds
// nothing (the value does not exist on this server: no migration), it
// stops. Safe for concurrent use; close stops its goroutine and waits.
type sampler struct {
	mu   sync.Mutex
	ring []sample
	next int
	full bool

	stop chan struct{}
	done chan struct{}
}

type sample struct {
	At time.Time
	V  float64
}

func startSampler(every, span time.Duration, read func() (float64, bool)) *sampler {
	s := &sampler{ring: make([]sample, max(1, int(span/every))), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run(every, read)
	return s
}

func (s *sampler) run(every time.Duration, read func() (float64, bool)) {
	defer close(s.done)
	if !s.take(read) {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.take(read)
		}
	}
}

// take reads one sample; false when there was nothing to read.
func (s *sampler) take(read func() (float64, bool)) bool {
	v, ok := read()
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring[s.next] = sample{At: time.Now(), V: v}
	s.next = (s.next + 1) % len(s.ring)
	s.full = s.full || s.next == 0
	return true
}

// samples returns the ring's samples, oldest first.
func (s *sampler) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]sample(nil), s.ring[:s.next]...)
	}
	return append(append([]sample(nil), s.ring[s.next:]...), s.ring[:s.next]...)
}

func (s *sampler) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}
