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
	checkMu    sync.Mutex // one check of the node at a time, read to decision (checkNodes)
	runID      string
	persistent bool // appendonly yes with appendfsync always: it keeps what it acknowledged
	warnings   []string
	checked    bool // a health check has run (reachable is meaningful)
	reachable  bool

	qUntil      atomic.Int64 // votes are ignored until then (Unix nanoseconds; read without mu)
	unvetted    atomic.Bool  // not read since New or since its last new run_id: no vote (marker.go)
	qLogged     bool         // the end of its last quarantine has been logged
	horizon     int64        // its marker's ttl_ms at the last read; -1: absent or unknown
	streamRunID string       // the run_id the node's stream connections last saw
	// restartRunID is the run_id of the last restart seen (quarantined for
	// once).
	restartRunID string
	// bornRun is the run_id the node had when read in a round where no
	// node had the marker (a new cluster: that process held nothing of
	// lockproxy's); markerRun, the run_id it last showed the marker in.
	bornRun, markerRun string

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
func (h *health) quarantinedAt(now time.Time) bool {
	return h.unvetted.Load() || now.UnixNano() < h.qUntil.Load()
}

// quarantine keeps node i out of votes for d from now, or longer when it
// already is (a quarantine is never shortened). Under h.mu.
func (b *Backend) quarantine(i int, d time.Duration, why string) {
	if d <= 0 {
		return
	}
	h := &b.health[i]
	end := time.Now().Add(d).UnixNano()
	if end <= h.qUntil.Load() {
		return
	}
	h.qUntil.Store(end)
	h.qLogged = false
	b.cfg.Logger.Warn("quorum node kept out of votes: it may have forgotten locks", "node", b.nodes[i].addr,
		"for", d.Round(time.Millisecond).String(), "why", why)
}

// restarted keeps node i, seen to restart, out of votes for the longest
// TTL granted: what it may have forgotten. Under its health's mu.
// It runs with h.mu held, once per new process (runID): each loop's new
// connection and the monitor all see a restart, and the first to see it
// starts the quarantine and says so.
func (b *Backend) restarted(i int, runID string) {
	h := &b.health[i]
	if runID == h.restartRunID {
		return
	}
	h.restartRunID = runID
	d := b.horizonTTL()
	if end := time.Now().Add(d).UnixNano(); end > h.qUntil.Load() {
		h.qUntil.Store(end)
	}
	h.qLogged = false
	b.cfg.Logger.Warn("quorum node restarted: kept out of votes for the longest TTL it may have forgotten",
		"node", b.nodes[i].addr, "for", d.String())
}

// logQuarantineEnd says once that a quarantined node votes again (the
// monitor calls it on each check, with h.mu held).
func (b *Backend) logQuarantineEnd(i int, now time.Time) {
	h := &b.health[i]
	if !h.qLogged && h.qUntil.Load() != 0 && !h.quarantinedAt(now) {
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
	if h.runID != runID { // never read, or a new process: read it now (marker.go)
		if h.runID != "" {
			h.unvetted.Store(true) // even one that persists: it may have lost its disk
		}
		b.vetSoon(i)
	}
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

// checkAll reads every node's persistence and eviction settings, run_id
// and horizon marker, and keeps out of votes a node that may have
// forgotten locks: Redlock's delayed restart (marker.go).
func (b *Backend) checkAll() {
	all := make([]int, len(b.nodes))
	for i := range all {
		all[i] = i
	}
	b.checkNodes(all)
}

// checkNodes reads the nodes idx (ascending), then decides on each with
// what all the readings say of the horizon, then writes the markers that
// are missing or behind. One check of a node at a time: a decision never
// rests on a reading older than the last one decided on.
func (b *Backend) checkNodes(idx []int) {
	for _, i := range idx {
		b.health[i].checkMu.Lock()
		defer b.health[i].checkMu.Unlock()
	}
	reads := make([]reading, len(b.nodes))
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(func() { reads[i] = b.read(i) })
	}
	wg.Wait()
	others := b.hz.any.Load() // a marker seen before: for a node met for the first time
	var round bool            // a node of this round has the marker
	for _, i := range idx {
		b.learn(reads[i])
		round = round || reads[i].err == nil && reads[i].has
	}
	writes := make([]*markerWrite, len(b.nodes))
	have := make([]int64, len(b.nodes))
	for i := range have {
		have[i] = -1
	}
	for _, i := range idx {
		writes[i] = b.check(i, reads[i], others || round, round)
		if r := reads[i]; r.err == nil && r.has {
			have[i] = r.ttl.Milliseconds()
		}
	}
	b.writeMarkers(writes, have)
}

// check takes in one node's reading: its settings and counters, a
// restart or first contact, and says what to write to its marker (nil:
// nothing). others says that another node has the marker (or had it when
// last read, for a node met for the first time); round, that one of the
// nodes just read has it.
func (b *Backend) check(i int, r reading, others, round bool) *markerWrite {
	n, h := b.nodes[i], &b.health[i]
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.err != nil {
		if h.reachable || !h.checked { // a node down from the start is said too, once
			b.cfg.Logger.Warn("quorum node unreachable", "node", n.addr, "err", r.err)
		}
		h.reachable, h.checked = false, true
		return nil
	}
	if h.checked && !h.reachable {
		b.cfg.Logger.Info("quorum node reachable again", "node", n.addr)
	}
	h.reachable, h.checked = true, true
	h.checkRTT = r.rtt
	runID, info, cfg := r.runID, r.info, r.cfg
	h.keys = infoKeys(info)
	h.horizon = -1
	if r.has {
		h.keys-- // the marker is no lock
		h.horizon = r.ttl.Milliseconds()
	}
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
	H := b.horizonTTL()
	var d time.Duration
	switch restart := h.runID != "" && runID != h.runID; {
	case h.runID == "" || restart || h.unvetted.Load():
		var why string
		d, why = firstContact(r, h.persistent, restart, others, H)
		if restart && !h.persistent {
			b.restarted(i, runID) // logged once, whoever sees it first
		} else {
			b.quarantine(i, d, why)
		}
	case !r.has && round && h.bornRun == runID && h.markerRun != runID:
		// Its process was there, empty, at the cluster's birth and never
		// showed the marker: the marker's first write did not reach it (a
		// timeout on a loaded machine). It forgot nothing.
		b.cfg.Logger.Info("quorum node: the horizon marker's first write did not reach it: writing it again", "node", n.addr)
	case !r.has && round: // the same process lost the marker the others have
		d = H
		b.quarantine(i, d, "it lacks the horizon marker other nodes have without having restarted: it lost its data (FLUSHALL?)")
	case !r.has:
		b.cfg.Logger.Warn("quorum: no node has the horizon marker any more (deleted through a client?): writing it again",
			"node", n.addr)
	}
	switch {
	case r.has:
		h.markerRun = runID
	case !others: // a new cluster (others covers this round too)
		h.bornRun = runID
	}
	h.runID = runID
	if h.streamRunID == "" || h.streamRunID == runID { // else a stream met a newer process: read again
		h.unvetted.Store(false)
	}
	b.logQuarantineEnd(i, time.Now())
	switch {
	case !r.has:
		w := &markerWrite{ttl: H.Milliseconds(), run: runID}
		if d > 0 { // it holds every lock it acknowledges from when its quarantine ends
			w.clean = (r.uptime + time.Second + d).Milliseconds()
		}
		return w
	case r.ttl < H:
		return &markerWrite{ttl: H.Milliseconds(), run: runID}
	}
	return nil
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
// reachable and not quarantined. Reachable is asked now (a PING of each
// node within NodeTimeout, as a vote would reach it), not taken from the
// monitor's last round, which is up to CheckInterval old: an acquire that
// finds no majority answers TRYAGAIN at once, and so must readiness.
func (b *Backend) Check(ctx context.Context) error {
	up := make([]bool, len(b.nodes))
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 4*b.cfg.NodeTimeout)
			defer cancel()
			up[i] = n.client.Ping(pctx).Err() == nil
		})
	}
	wg.Wait()
	ok := 0
	for i := range b.health {
		h := &b.health[i]
		h.mu.Lock()
		if up[i] && h.reachable && !h.quarantinedAt(time.Now()) {
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
