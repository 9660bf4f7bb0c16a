package proxy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// HeldLocksCounter is implemented by a Backend that can count the live
// keys (held locks) it stores without scanning them; the proxy then
// exports lockproxy_locks_held. A Backend need not import proxy to
// implement it.
type HeldLocksCounter interface {
	HeldLocks() int64
}

// ExpiryCounter is implemented by a Backend that knows how many keys
// reached their expiry (locks that ended by TTL rather than by release);
// the proxy then exports lockproxy_lock_expiries_total.
type ExpiryCounter interface {
	ExpiredLocks() uint64
}

// InfoReporter is implemented by a Backend with its own lines for the
// lockproxy section of INFO (name:value, names prefixed by the backend).
type InfoReporter interface {
	InfoLines() []string
}

// lockMetrics count acquisitions seen as commands: SET … NX and SETNX,
// outside MULTI. Acquisitions inside scripts (node redlock,
// bsm/redislock, redis-semaphore) are a script's business and are counted
// only by lockproxy_commands_total.
type lockMetrics struct {
	counts [numOutcomes]atomic.Int64 // by outcome; /metrics and INFO read them
	held   *heldCache                // nil when the backend cannot count
}

// The outcomes of an acquire command, as lockproxy_lock_acquisitions_total
// labels them.
const (
	outcomeAcquired = iota
	outcomeContended
	outcomeFailed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"acquired", "contended", "failed"}

// heldCache asks a HeldLocksCounter at most once a second, whoever asks
// (scrapes, INFO from every new ioredis connection): counting may scan
// every key (memory) or the lease table (postgres).
type heldCache struct {
	c  HeldLocksCounter
	mu sync.Mutex
	at time.Time
	n  int64
}

func (h *heldCache) get() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.at) >= time.Second {
		h.n, h.at = h.c.HeldLocks(), time.Now()
	}
	return h.n
}

func newLockMetrics(reg prometheus.Registerer, b backend.Backend) *lockMetrics {
	m := &lockMetrics{}
	for o, name := range outcomeNames {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "lockproxy_lock_acquisitions_total",
			Help:        "Acquire commands (SET … NX, SETNX) by outcome: acquired, contended (the lock is held: NX refused), failed (an error, TRYAGAIN included).",
			ConstLabels: prometheus.Labels{"outcome": name},
		}, func() float64 { return float64(m.counts[o].Load()) }))
	}
	var held *heldCache
	if c, ok := b.(HeldLocksCounter); ok {
		held = &heldCache{c: c}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockproxy_locks_held",
			Help: "Live keys (held locks) in the backend, every database (counted at most once a second).",
		}, func() float64 { return float64(held.get()) }))
	}
	if c, ok := b.(ExpiryCounter); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "lockproxy_lock_expiries_total",
			Help: "Keys (locks) that ended by reaching their expiry.",
		}, func() float64 { return float64(c.ExpiredLocks()) }))
	}
	m.held = held
	return m
}

// acquireOutcome classifies the reply v to the key command name with
// args: ok is false when it is not an acquisition.
func acquireOutcome(name string, args [][]byte, v backend.Value) (outcome int, ok bool) {
	switch name {
	case "setnx":
	case "set":
		nx := false
		for _, a := range args[3:] {
			switch {
			case keycmd.EqFold(a, "nx"):
				nx = true
			case keycmd.EqFold(a, "get"):
				return 0, false // SET … NX GET answers the old value: not an acquire reply
			}
		}
		if !nx {
			return 0, false
		}
	default:
		return 0, false
	}
	switch {
	case v.Kind == backend.KindError:
		return outcomeFailed, true
	case v.IsNil() || (v.Kind == backend.KindInt && v.Int == 0):
		return outcomeContended, true
	}
	return outcomeAcquired, true
}
