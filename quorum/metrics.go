package quorum

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The Backend is a prometheus.Collector: register it with the proxy's
// registry to export each node's health, latency and quarantine.
var _ prometheus.Collector = (*Backend)(nil)

var (
	descNodeUp = prometheus.NewDesc("lockproxy_quorum_node_up",
		"1 when the node answered the last health check (every check interval).", []string{"node"}, nil)
	descNodeQuarantined = prometheus.NewDesc("lockproxy_quorum_node_quarantined",
		"1 while the node is kept out of votes after a restart.", []string{"node"}, nil)
	descNodeQuarantineLeft = prometheus.NewDesc("lockproxy_quorum_node_quarantine_remaining_seconds",
		"Time until the node votes again after a restart or a loss of its data (0: it votes; +Inf: not read yet since start or since its last restart).", []string{"node"}, nil)
	descHorizon = prometheus.NewDesc("lockproxy_quorum_horizon_seconds",
		"The longest TTL granted through any instance, as recorded on a majority of nodes (the horizon marker): what a node that lost its data is kept out of votes for.", nil, nil)
	descNodeWarnings = prometheus.NewDesc("lockproxy_quorum_node_safety_warnings",
		"Settings of the node that can lose or evict acknowledged locks (appendonly, appendfsync, maxmemory-policy); 0 is safe.", []string{"node"}, nil)
	descNodeCheck = prometheus.NewDesc("lockproxy_quorum_node_check_seconds",
		"Round trip of the node's last health check (INFO).", []string{"node"}, nil)
	descNodeKeys = prometheus.NewDesc("lockproxy_quorum_node_keys",
		"Keys on the node, every database, at the last health check.", []string{"node"}, nil)
	descNodeExpired = prometheus.NewDesc("lockproxy_quorum_node_expired_keys_total",
		"Keys the node expired since this proxy started (its expired_keys, summed over its restarts).", []string{"node"}, nil)
	descNodeFailures = prometheus.NewDesc("lockproxy_quorum_node_failures_total",
		"Operations the node did not answer in time or at all (timeouts, connection errors, LOADING/BUSY replies).", []string{"node"}, nil)
	descRepairs = prometheus.NewDesc("lockproxy_quorum_repairs_pending",
		"Keys waiting to be repaired on a node: a late write, or a call whose connection broke unanswered (docs/quorum.md).", nil, nil)
	descLoopOps = prometheus.NewDesc("lockproxy_quorum_loop_operations_total",
		"Operations started on the front end's event loops (acquires and release scripts, undos included); the others ran on quorum's own loops for blocking callers.", nil, nil)
	descMajority = prometheus.NewDesc("lockproxy_quorum_majority",
		"Nodes that must agree (N/2+1).", nil, nil)
)

// replyBuckets span a node's reply time from a loopback round trip to the
// default node timeout and beyond.
var replyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

func newReplyHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lockproxy_quorum_node_reply_seconds",
		Help:    "Time from sending an operation's commands to a node to its reply, per node.",
		Buckets: replyBuckets,
	}, []string{"node"})
}

// Describe implements prometheus.Collector.
func (b *Backend) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeUp, descNodeQuarantined, descNodeQuarantineLeft, descHorizon, descNodeWarnings, descNodeCheck,
		descNodeKeys, descNodeExpired, descNodeFailures, descMajority, descLoopOps, descRepairs} {
		ch <- d
	}
	b.replies.Describe(ch)
}

// Collect implements prometheus.Collector.
func (b *Backend) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, node string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, node)
	}
	now := time.Now()
	for i, n := range b.nodes {
		h := &b.health[i]
		h.mu.Lock()
		gauge(descNodeUp, bool01(h.reachable), n.addr)
		gauge(descNodeQuarantined, bool01(h.quarantinedAt(now)), n.addr)
		gauge(descNodeQuarantineLeft, h.remaining(now).Seconds(), n.addr)
		gauge(descNodeWarnings, float64(len(h.warnings)), n.addr)
		gauge(descNodeCheck, h.checkRTT.Seconds(), n.addr)
		gauge(descNodeKeys, float64(h.keys), n.addr)
		ch <- prometheus.MustNewConstMetric(descNodeExpired, prometheus.CounterValue, float64(h.expiredTotal), n.addr)
		h.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descNodeFailures, prometheus.CounterValue, float64(n.failures.Load()), n.addr)
	}
	ch <- prometheus.MustNewConstMetric(descMajority, prometheus.GaugeValue, float64(b.q))
	ch <- prometheus.MustNewConstMetric(descHorizon, prometheus.GaugeValue, float64(b.hz.known.Load())/1000)
	ch <- prometheus.MustNewConstMetric(descLoopOps, prometheus.CounterValue, float64(b.LoopOps()))
	ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.GaugeValue, float64(b.repairs.len()))
	b.replies.Collect(ch)
}

// remaining is the time until the node votes again: 0 when it votes, +Inf
// while it has not been read (unvetted).
func (h *health) remaining(now time.Time) time.Duration {
	if h.unvetted.Load() {
		return time.Duration(math.MaxInt64)
	}
	return max(0, time.Duration(h.qUntil.Load()-now.UnixNano()))
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// majorityOf returns the count that a majority of nodes reaches: the Q-th
// largest of the per-node counts (a node that did not answer counts 0).
func (b *Backend) majorityOf(f func(h *health) int64) int64 {
	vals := make([]int64, len(b.health))
	for i := range b.health {
		h := &b.health[i]
		h.mu.Lock()
		if h.reachable {
			vals[i] = f(h)
		}
		h.mu.Unlock()
	}
	slices.Sort(vals)
	return vals[len(vals)-b.q]
}

// HeldLocks estimates the locks held as the key count a majority of nodes
// reaches, from their INFO at the last health check (proxy.HeldLocksCounter):
// a lock exists when a majority holds it. Every key on the nodes counts, so
// it is the number of locks only on nodes dedicated to locks.
func (b *Backend) HeldLocks() int64 {
	return b.majorityOf(func(h *health) int64 { return h.keys })
}

// ExpiredLocks estimates the locks that ended by their TTL as the expiry
// count a majority of nodes reaches since this proxy started
// (proxy.ExpiryCounter). It never decreases: each node's count only grows.
func (b *Backend) ExpiredLocks() uint64 {
	return uint64(b.majorityOf(func(h *health) int64 { return int64(h.expiredTotal) }))
}

// InfoLines are the quorum lines of INFO's lockproxy section: the nodes,
// the majority, the horizon (the longest TTL recorded on a majority of
// nodes, and the longest known), and each node's state as /metrics has it
// (proxy.InfoReporter): quarantined_until_ms is the Unix time its
// quarantine ends (0: it votes; -1: not read yet, no vote until it is),
// horizon_ms its marker's ttl_ms (-1: absent or not read).
func (b *Backend) InfoLines() []string {
	lines := []string{
		"lockproxy_quorum_nodes:" + strconv.Itoa(len(b.nodes)),
		"lockproxy_quorum_majority:" + strconv.Itoa(b.q),
		"lockproxy_quorum_horizon_ms:" + strconv.FormatInt(b.hz.known.Load(), 10),
		"lockproxy_quorum_longest_ttl_ms:" + strconv.FormatInt(b.horizonTTL().Milliseconds(), 10),
	}
	now := time.Now()
	var up, quarantined, warnings int
	var nodes []string
	for i, n := range b.nodes {
		h := &b.health[i]
		h.mu.Lock()
		r, q := h.reachable, h.quarantinedAt(now)
		w, rtt := len(h.warnings), h.checkRTT
		until := int64(-1) // not read yet: out of votes until it is
		if !h.unvetted.Load() {
			until = 0
			if q {
				until = time.Unix(0, h.qUntil.Load()).UnixMilli()
			}
		}
		hz := h.horizon
		h.mu.Unlock()
		up += int(bool01(r))
		quarantined += int(bool01(q))
		warnings += w
		nodes = append(nodes, fmt.Sprintf("lockproxy_quorum_node%d:addr=%s,up=%d,quarantined=%d,quarantined_until_ms=%d,horizon_ms=%d,safety_warnings=%d,check_ms=%.3f,failures=%d",
			i, n.addr, int(bool01(r)), int(bool01(q)), until, hz, w, float64(rtt.Microseconds())/1000, n.failures.Load()))
	}
	lines = append(lines,
		"lockproxy_quorum_nodes_up:"+strconv.Itoa(up),
		"lockproxy_quorum_nodes_quarantined:"+strconv.Itoa(quarantined),
		"lockproxy_quorum_safety_warnings:"+strconv.Itoa(warnings))
	return append(lines, nodes...)
}
