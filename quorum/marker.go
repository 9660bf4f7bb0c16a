package quorum

// The horizon marker: Redlock's delayed restart that survives lockproxy's
// own restarts.
//
// A node that restarts without persisting every write forgets the locks it
// held; until they would have expired it must not vote, or a second client
// wins it and a node that kept the first lock no longer outvotes them (two
// holders). The run_id rule (safety.go) sees a restart only while this
// instance watches; a node that restarted while no lockproxy was watching,
// or while this one was down, looks healthy on first contact. So every
// instance keeps a marker on every node:
//
//   - Where: the hash lockproxy:quorum-horizon in the nodes' database 15
//     (markerDB, the highest database SELECT reaches), fields ttl_ms (the
//     longest TTL ever granted through any instance, raised with a
//     max-merge script, never lowered, no expiry), run_id (the node process
//     the marker was created in) and clean_ms (that process's uptime from
//     which it holds every lock it acknowledged: 0 unless it was found
//     without the marker, then its uptime then plus its quarantine).
//
//   - Clients do not see it by accident: KEYS, SCAN, RANDOMKEY, FLUSHDB
//     and FLUSHALL (keyspace.go), DBSIZE of database 15 (dbsizeArgs) and
//     the held lock count (INFO keyspace) leave it out, and the value-type
//     commands refuse it (HSET could lower it). It is reachable by name
//     only (SELECT 15, then GET/DEL lockproxy:quorum-horizon), a reserved
//     key a client must not write: a client that deletes it everywhere
//     makes the nodes look like a new cluster until the monitor writes it
//     again (one CheckInterval), and growing TTLs answer TRYAGAIN
//     meanwhile.
//
//   - Raising: before a write with TTL d is answered OK, the marker must
//     cover d on a majority (coverTTL; a round trip only when the longest
//     TTL grows). Every later reader of all nodes then finds d on at least
//     one node that kept its data, as long as a minority loses its data at a
//     time (Redlock's own bound).
//
//   - First contact (New, the monitor reaching a node for the first time,
//     a new run_id): a node is out of votes until it has been read once
//     (unvetted). The monitor reads its marker, run_id and uptime in one
//     MULTI, with its persistence settings, and:
//     it lacks the marker while another node has it: it lost its data;
//     out of votes for the longest TTL known (H), from now, even when it
//     persists (its disk did not keep the marker either) — unless this
//     instance read its process, empty, when no node had the marker (a
//     new cluster) and never saw the marker there since: then the
//     marker's first write did not reach it, and it forgot nothing;
//     its run_id changed while watched and it does not persist every
//     write: H from now (the rule of safety.go);
//     it persists every write (appendonly yes, appendfsync always): votes;
//     the marker was created in its current process: votes once its uptime
//     reaches clean_ms (0: at once — a node up since the cluster's first
//     grant forgot nothing);
//     otherwise (the marker came from its disk, or from a process before a
//     restart): out of votes until its uptime reaches H.
//     No node has the marker: a new cluster; nobody votes out, and the
//     markers are written. Assumption: a total loss of every node's data
//     at once looks like a new cluster and is not detected.
//
//   - H, the longest TTL known, is the largest of this instance's own
//     grants (maxTTL) and every marker it has read. Locks without an
//     expiry are bounded by no TTL: they do not raise the horizon, and a
//     node that forgot one is not detected (as before: such a lock lives
//     until released, and no quarantine could cover it).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

const (
	markerKey = "lockproxy:quorum-horizon"
	markerDB  = backend.Databases - 1
)

// markerScript creates the marker (ARGV: ttl_ms, run_id, clean_ms) when it
// is absent and run_id is not empty, else raises ttl_ms to ARGV[1] when
// that is larger. It returns ttl_ms as the node now has it, -1 when absent.
var markerScript = redis.NewScript(`
local cur = redis.call('hget', KEYS[1], 'ttl_ms')
if not cur then
  if ARGV[2] == '' then return -1 end
  redis.call('hset', KEYS[1], 'ttl_ms', ARGV[1], 'run_id', ARGV[2], 'clean_ms', ARGV[3])
  return tonumber(ARGV[1])
end
cur = tonumber(cur) or 0
local n = tonumber(ARGV[1])
if n > cur then
  redis.call('hset', KEYS[1], 'ttl_ms', ARGV[1])
  return n
end
return cur`)

// dbsizeMarker is DBSIZE of markerDB, the marker left out.
const dbsizeMarker = `return redis.call('dbsize') - redis.call('exists', KEYS[1]) - redis.call('exists', KEYS[2])`

// dbsizeArgs is the command DBSIZE of db sends each node: markerDB's
// count leaves the marker and the leases' hash (evalmodel.go) out.
func dbsizeArgs(db int) []string {
	if db == markerDB {
		return []string{"eval", dbsizeMarker, "2", markerKey, leasesKey}
	}
	return []string{"dbsize"}
}

// horizon is the Backend's state of the markers.
type horizon struct {
	clients []*redis.Client // per node, on markerDB
	known   atomic.Int64    // ms: the ttl_ms known to be on a majority
	seen    atomic.Int64    // ms: the largest ttl_ms read on any node
	any     atomic.Bool     // a marker was read on some node
	ready   atomic.Bool     // New has read every node once
	raiseMu sync.Mutex      // one raise at a time
	vetting []atomic.Bool   // a vet of node i is under way
	mu      sync.Mutex      // orders vetSoon's wg.Go before closeHorizon's Wait
	closed  bool            // under mu: no more vets
	wg      sync.WaitGroup  // the vets under way
}

// reading is what one read of a node found.
type reading struct {
	err    error
	info   string            // INFO (default sections)
	cfg    map[string]string // CONFIG GET *
	rtt    time.Duration     // how long the INFO took
	runID  string
	uptime time.Duration // truncated to the second, as INFO has it
	has    bool          // the marker is there
	ttl    time.Duration // its ttl_ms
	mrun   string        // its run_id
	clean  time.Duration // its clean_ms
}

// markerWrite is what the monitor writes to a node after reading it.
type markerWrite struct {
	ttl   int64 // ms
	run   string
	clean int64 // ms
}

// initHorizon sets up the markers' clients; every node starts unvetted.
func (b *Backend) initHorizon() {
	b.hz.vetting = make([]atomic.Bool, len(b.nodes))
	for i, n := range b.nodes {
		opt := *n.opt
		opt.DB = markerDB
		opt.PoolSize = 2
		b.hz.clients = append(b.hz.clients, redis.NewClient(&opt))
		b.health[i].unvetted.Store(true)
		b.health[i].horizon = -1
	}
}

// closeHorizon waits for the vets under way and closes the clients.
func (b *Backend) closeHorizon() error {
	b.hz.mu.Lock()
	b.hz.closed = true
	b.hz.mu.Unlock()
	b.hz.wg.Wait()
	var errs []error
	for _, c := range b.hz.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// horizonTTL is H: the longest TTL granted that this instance knows of,
// by itself or by any instance (a marker it read).
func (b *Backend) horizonTTL() time.Duration {
	seen := time.Duration(b.hz.seen.Load()) * time.Millisecond
	if b.cfg.MaxTTL > 0 {
		// Longer TTLs are refused (coverTTL): a marker's longer one is
		// from before the setting. This instance's own grants count
		// whole (a lock script's extend past it is answered the error
		// but keeps its TTL, as a failed script keeps its writes).
		seen = min(seen, b.cfg.MaxTTL)
	}
	return max(time.Duration(b.maxTTL.Load()), seen)
}

// read reads node i: INFO, its marker (in one MULTI, so that run_id,
// uptime and marker are one process's), and its settings.
func (b *Backend) read(i int) reading {
	ctx, cancel := context.WithTimeout(context.Background(), 4*b.cfg.NodeTimeout)
	defer cancel()
	var r reading
	var info *redis.StringCmd
	var mk *redis.SliceCmd
	start := time.Now()
	_, r.err = b.hz.clients[i].TxPipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx) // the default sections: server, stats, keyspace (Redis 6 takes one section name at most)
		mk = p.HMGet(ctx, markerKey, "ttl_ms", "run_id", "clean_ms")
		return nil
	})
	r.rtt = time.Since(start)
	if r.err != nil {
		return r
	}
	r.info = info.Val()
	if r.cfg, r.err = b.nodes[i].client.ConfigGet(ctx, "*").Result(); r.err != nil {
		return r
	}
	r.runID = infoField(r.info, "run_id")
	up, _ := strconv.ParseInt(infoField(r.info, "uptime_in_seconds"), 10, 64)
	r.uptime = time.Duration(up) * time.Second
	v := mk.Val()
	if s, ok := v[0].(string); ok {
		ms, _ := strconv.ParseInt(s, 10, 64)
		r.has, r.ttl = true, time.Duration(ms)*time.Millisecond
		r.mrun, _ = v[1].(string)
		c, _ := v[2].(string)
		ms, _ = strconv.ParseInt(c, 10, 64)
		r.clean = time.Duration(ms) * time.Millisecond
	}
	return r
}

// learn takes in what a reading says of the horizon.
func (b *Backend) learn(r reading) {
	if r.err != nil || !r.has {
		return
	}
	b.hz.any.Store(true)
	raise(&b.hz.seen, r.ttl.Milliseconds())
}

// raise sets v to n when n is larger.
func raise(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// firstContact decides how long a node read for the first time, or seen
// with a new run_id (restart), stays out of votes, and why. others says
// that another node has the marker; h is H.
func firstContact(r reading, persistent, restart, others bool, h time.Duration) (time.Duration, string) {
	switch {
	case !r.has && others:
		return h, "it lacks the horizon marker other nodes have: it lost its data"
	case restart && !persistent:
		return h, "its run_id changed: it restarted"
	case !r.has, persistent: // a new cluster; or a node that keeps every write
		return 0, ""
	case r.mrun == r.runID:
		return r.clean - r.uptime, "it was found without the horizon marker less than the longest TTL ago"
	default:
		return h - r.uptime, "it started less than the longest TTL ago and does not persist every write"
	}
}

// vetSoon reads the nodes soon, in the background, to vet node i: a
// stream reached it unvetted or with a new run_id. Every node is read:
// whether it lacks a marker the others have needs their readings too.
// Before New's first reading, that reading does it.
func (b *Backend) vetSoon(i int) {
	if !b.hz.ready.Load() || !b.hz.vetting[i].CompareAndSwap(false, true) {
		return
	}
	b.hz.mu.Lock()
	defer b.hz.mu.Unlock()
	if b.hz.closed {
		b.hz.vetting[i].Store(false)
		return
	}
	b.hz.wg.Go(func() {
		defer b.hz.vetting[i].Store(false)
		b.checkAll()
	})
}

// writeMarkers runs the monitor's marker writes and updates what is known
// to be on a majority; have are the ttl_ms the nodes were read with (-1:
// absent or unknown).
func (b *Backend) writeMarkers(writes []*markerWrite, have []int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*b.cfg.NodeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, w := range writes {
		if w == nil {
			continue
		}
		wg.Go(func() {
			v, err := markerScript.Run(ctx, b.hz.clients[i], []string{markerKey}, w.ttl, w.run, w.clean).Int64()
			if err != nil {
				b.cfg.Logger.Warn("quorum node: the horizon marker could not be written", "node", b.nodes[i].addr, "err", err)
				v = -1
			}
			have[i] = v
		})
	}
	wg.Wait()
	b.noteKnown(have)
}

// noteKnown raises the horizon known on a majority to the Q-th largest of
// the nodes' ttl_ms.
func (b *Backend) noteKnown(have []int64) {
	if len(have) < b.q {
		return
	}
	s := slices.Clone(have)
	slices.Sort(s)
	raise(&b.hz.known, s[len(s)-b.q])
}

// needsCover reports whether a write with TTL d must first raise the
// marker (coverTTL): d exceeds what a majority of markers records.
func (b *Backend) needsCover(d time.Duration) bool {
	return d > 0 && ceilMs(d) > b.hz.known.Load()
}

// overMax reports whether d is longer than Config.MaxTTL allows.
func (b *Backend) overMax(d time.Duration) bool { return b.cfg.MaxTTL > 0 && d > b.cfg.MaxTTL }

// errOverMax is the refusal of a TTL d longer than Config.MaxTTL.
func (b *Backend) errOverMax(d time.Duration) error {
	return backend.Reply(fmt.Sprintf("ERR lockproxy: a TTL of %dms is longer than quorum-max-ttl (%dms)",
		ceilMs(d), b.cfg.MaxTTL.Milliseconds()))
}

func ceilMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// coverTTL makes the marker cover d on a majority of nodes before a write
// with TTL d is answered OK. It returns at once when it already does
// (always but when the longest TTL grows); otherwise it raises the marker
// on every node and waits for a majority, or answers TRYAGAIN. A TTL
// longer than Config.MaxTTL is refused. It blocks:
// not for an event loop (see needsCover).
func (b *Backend) coverTTL(ctx context.Context, d time.Duration) error {
	if b.overMax(d) {
		return b.errOverMax(d)
	}
	if !b.needsCover(d) {
		return nil
	}
	b.hz.raiseMu.Lock()
	defer b.hz.raiseMu.Unlock()
	if !b.needsCover(d) {
		return nil
	}
	absent, err := b.raiseMarkers(ctx, ceilMs(d))
	if absent {
		// Deleted everywhere (FLUSHALL on the nodes, a client's DEL) or
		// never written: the monitor's rules decide where to write them
		// again (a node that lacks the marker others have is quarantined
		// first); then once more.
		b.checkAll()
		_, err = b.raiseMarkers(ctx, ceilMs(d))
	}
	return err
}

// raiseMarkers raises the marker to want ms on every node and waits until
// a majority has it; absent says that enough nodes answered, but without
// the marker.
func (b *Backend) raiseMarkers(ctx context.Context, want int64) (absent bool, _ error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*b.cfg.NodeTimeout)
	defer cancel()
	type result struct {
		i int
		v int64
	}
	results := make(chan result, len(b.nodes)) // buffered: the slower nodes finish alone
	for i := range b.nodes {
		go func() {
			v, err := markerScript.Run(ctx, b.hz.clients[i], []string{markerKey}, want, "", 0).Int64()
			if err != nil {
				v = -2 // no answer
			}
			results <- result{i, v}
		}()
	}
	have := make([]int64, len(b.nodes))
	covered, answered := 0, 0
	for range b.nodes {
		r := <-results
		have[r.i] = r.v
		if r.v >= -1 {
			answered++
		}
		if r.v >= want {
			if covered++; covered == b.q {
				break
			}
		}
	}
	b.noteKnown(have)
	switch {
	case answered < b.q: // as any operation says it
		return false, &backend.ReplyError{Reply: fmt.Sprintf("TRYAGAIN quorum not reached: %d of %d nodes answered", answered, len(b.nodes))}
	case covered < b.q:
		return true, &backend.ReplyError{Reply: fmt.Sprintf("TRYAGAIN quorum not reached: %d of %d nodes recorded the longest TTL (%dms)",
			covered, len(b.nodes), want)}
	}
	return false, nil
}

// NodeAddr validates one entry of Config.Nodes (host:port, or a redis://,
// rediss:// or unix:// URL) and returns the address it reaches in a form
// two entries that reach the same address share: host in lower case, an
// IP address in its canonical form, the port as a number in 1..65535
// (unix:path for a socket).
func NodeAddr(node string) (string, error) {
	addr := node
	if strings.Contains(node, "://") {
		opt, err := redis.ParseURL(node)
		if err != nil {
			var ue interface{ Unwrap() error } // a *url.Error repeats the URL, password included: keep the reason
			if errors.As(err, &ue) && ue.Unwrap() != nil {
				err = ue.Unwrap()
			}
			return "", fmt.Errorf("not a valid redis://, rediss:// or unix:// URL: %w", err)
		}
		if opt.Network == "unix" {
			return "unix:" + opt.Addr, nil
		}
		addr = opt.Addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("port %q of %q is not in 1..65535", port, addr)
	}
	host = strings.ToLower(host)
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// checkNodeList refuses a node list with an invalid entry or one address
// twice (one Redis must not cast two votes).
func checkNodeList(nodes []string) error {
	seen := map[string]int{}
	for i, n := range nodes {
		a, err := NodeAddr(n)
		if err != nil {
			return fmt.Errorf("quorum: node %d: %w", i+1, err)
		}
		if j, dup := seen[a]; dup {
			return fmt.Errorf("quorum: nodes %d and %d are both %s: one Redis would cast two votes", j+1, i+1, a)
		}
		seen[a] = i
	}
	return nil
}

// checkRunIDs refuses two nodes that answered with one run_id: two
// addresses of one Redis (a port forward, a second interface), which
// would cast two votes.
func (b *Backend) checkRunIDs() error {
	by := map[string]int{}
	for i := range b.health {
		h := &b.health[i]
		h.mu.Lock()
		id := h.runID
		h.mu.Unlock()
		if id == "" {
			continue
		}
		if j, dup := by[id]; dup {
			return fmt.Errorf("quorum: nodes %s and %s are one Redis (run_id %s): it would cast two votes; list each node once",
				b.nodes[j].addr, b.nodes[i].addr, id)
		}
		by[id] = i
	}
	return nil
}
