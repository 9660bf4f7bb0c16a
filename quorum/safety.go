package quorum

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// health is what the monitor knows of one node.
type health struct {
	mu         sync.Mutex
	runID      string
	persistent bool // appendonly yes with appendfsync always: it keeps what it acknowledged
	warnings   []string
	checked    bool // a health check has run (reachable is meaningful)
	reachable  bool

	qUntil      atomic.Int64 // votes are ignored until then (Unix nanoseconds; read without mu)
	streamRunID string       // the run_id the node's stream connections last saw
	// restartRunID is the run_id of the last restart seen (quarantined for
	// once); qLogged says that its quarantine's end has been logged.
	restartRunID string
	qLogged      bool

	// From the node's INFO at the last check that reached it.
	checkRTT     time.Duration // how long that INFO took
	keys         int64         // keys in every database
	expiredRaw   uint64        // its expired_keys (since its start)
	expiredTotal uint64        // expired_keys summed over its restarts since this proxy started
	seen         bool          // expiredRaw holds a reading
}

// quarantined reports whether node i is kept out of votes now.
func (b *Backend) quarantined(i int) bool { return b.health[i].quarantinedAt(time.Now()) }

// quarantinedAt reports whether the node is kept out of votes at now.
func (h *health) quarantinedAt(now time.Time) bool { return now.UnixNano() < h.qUntil.Load() }

// restarted keeps node i, seen to restart, out of votes for the longest
// TTL granted: what it may have forgotten. Under its health's mu.
// It runs with h.mu held, once per new process (runID): the stream's new
// connection and the monitor both see a restart, and the first to see it
// starts the quarantine and says so.
func (b *Backend) restarted(i int, runID string) {
	h := &b.health[i]
	if runID == h.restartRunID {
		return
	}
	h.restartRunID = runID
	d := time.Duration(b.maxTTL.Load())
	h.qUntil.Store(time.Now().Add(d).UnixNano())
	h.qLogged = false
	b.cfg.Logger.Warn("quorum node restarted: kept out of votes for the longest TTL it may have forgotten",
		"node", b.nodes[i].addr, "for", d.String())
}

// logQuarantineEnd says once that a quarantined node votes again (the
// monitor calls it on each check, with h.mu held).
func (b *Backend) logQuarantineEnd(i int, now time.Time) {
	h := &b.health[i]
	if h.restartRunID != "" && !h.qLogged && !h.quarantinedAt(now) {
		h.qLogged = true
		b.cfg.Logger.Info("quorum node's quarantine ended: it votes again", "node", b.nodes[i].addr)
	}
}

// noteRunID is told the run_id of each new stream connection to node i,
// before that connection carries anything: a node that restarted is
// quarantined at once, not at the monitor's next check, which could come
// after it had voted with an empty memory (two holders).
func (b *Backend) noteRunID(i int, runID string) {
	h := &b.health[i]
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streamRunID != "" && runID != h.streamRunID && !h.persistent {
		b.restarted(i, runID)
	}
	h.streamRunID = runID
}

// noteTTL records the longest TTL granted, which bounds what a restarted
// node may have forgotten.
func (b *Backend) noteTTL(ttl time.Duration) {
	for {
		cur := b.maxTTL.Load()
		if int64(ttl) <= cur || b.maxTTL.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}

// monitor checks every node each CheckInterval until Close.
func (b *Backend) monitor() {
	defer close(b.done)
	t := time.NewTicker(b.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.checkAll()
		}
	}
}

// checkAll reads every node's persistence and eviction settings and its
// run_id, and quarantines a node seen to restart: Redlock's delayed
// restart, for as long as the longest TTL granted, unless the node persists
// every write (appendfsync always).
func (b *Backend) checkAll() {
	var wg sync.WaitGroup
	for i := range b.nodes {
		wg.Go(func() { b.check(i) })
	}
	wg.Wait()
}

func (b *Backend) check(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*b.cfg.NodeTimeout)
	defer cancel()
	n, h := b.nodes[i], &b.health[i]
	c := n.client
	start := time.Now()
	info, err := c.Info(ctx).Result() // the default sections: server, stats, keyspace (Redis 6 takes one section name at most)
	rtt := time.Since(start)
	var cfg map[string]string
	if err == nil {
		cfg, err = c.ConfigGet(ctx, "*").Result()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if h.reachable || !h.checked { // a node down from the start is said too, once
			b.cfg.Logger.Warn("quorum node unreachable", "node", n.addr, "err", err)
		}
		h.reachable, h.checked = false, true
		return
	}
	h.reachable, h.checked = true, true
	h.checkRTT = rtt
	runID := infoField(info, "run_id")
	h.keys = infoKeys(info)
	if raw, err := strconv.ParseUint(infoField(info, "expired_keys"), 10, 64); err == nil {
		switch {
		case !h.seen:
		case runID == h.runID && raw >= h.expiredRaw:
			h.expiredTotal += raw - h.expiredRaw
		default: // a new process counts from 0
			h.expiredTotal += raw
		}
		h.expiredRaw, h.seen = raw, true
	}
	h.persistent = cfg["appendonly"] == "yes" && cfg["appendfsync"] == "always"
	var warn []string
	if cfg["appendonly"] != "yes" {
		warn = append(warn, fmt.Sprintf("node %s: appendonly %s: a restart forgets every lock it holds", n.addr, cfg["appendonly"]))
	} else if cfg["appendfsync"] != "always" {
		warn = append(warn, fmt.Sprintf("node %s: appendfsync %s: a crash can forget the last second of locks", n.addr, cfg["appendfsync"]))
	}
	if p := cfg["maxmemory-policy"]; p != "" && p != "noeviction" {
		warn = append(warn, fmt.Sprintf("node %s: maxmemory-policy %s: the node may evict held locks (use noeviction)", n.addr, p))
	}
	h.warnings = warn
	if h.runID != "" && runID != h.runID && !h.persistent {
		b.restarted(i, runID)
	}
	h.runID = runID
	b.logQuarantineEnd(i, time.Now())
}

// infoKeys sums the keys of every database in an INFO keyspace section
// (lines such as db0:keys=3,expires=3,avg_ttl=0).
func infoKeys(info string) int64 {
	var n int64
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "db") {
			continue
		}
		_, kv, ok := strings.Cut(l, ":keys=")
		if !ok {
			continue
		}
		kv, _, _ = strings.Cut(kv, ",")
		if k, err := strconv.ParseInt(kv, 10, 64); err == nil {
			n += k
		}
	}
	return n
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}

// Warnings returns the nodes' current safety warnings (persistence,
// eviction), for the start line and INFO.
func (b *Backend) Warnings() []string {
	var out []string
	for i := range b.health {
		h := &b.health[i]
		h.mu.Lock()
		if h.checked && !h.reachable {
			out = append(out, fmt.Sprintf("node %s: unreachable: it cannot vote, and its persistence settings are unknown", b.nodes[i].addr))
		}
		out = append(out, h.warnings...)
		h.mu.Unlock()
	}
	return out
}

// Check implements backend.Checker: ready when a majority of nodes is
// reachable and not quarantined.
func (b *Backend) Check(context.Context) error {
	ok := 0
	for i := range b.health {
		h := &b.health[i]
		h.mu.Lock()
		if h.reachable && !h.quarantinedAt(time.Now()) {
			ok++
		}
		h.mu.Unlock()
	}
	if ok < b.q {
		return fmt.Errorf("quorum: %d of %d nodes usable, %d needed", ok, len(b.nodes), b.q)
	}
	return nil
}

// Quarantined returns the nodes kept out of votes now.
func (b *Backend) Quarantined() []string {
	var out []string
	for i, n := range b.nodes {
		if b.quarantined(i) {
			out = append(out, n.addr)
		}
	}
	return out
}
