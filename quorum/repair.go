package quorum

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Read repair after a lost connection. A lock operation whose connection
// to a node broke before the node answered may still have run there (a
// paused node runs what waits in its socket when it resumes; a partition
// may drop the reply and not the command): an acquire the client was told
// it did not get, or a release the node never confirmed, can leave a key
// on that node that no majority holds. It costs that node's vote for the
// key until its TTL ends — with another node down, the key's
// availability — but it cannot be deleted blind: values are not always
// unique (npm redis-lock's deadline, a bare "1"), and an owner-checked
// delete of the caller's value could remove another holder's lock.
//
// So the keys of those operations are repaired instead, each under its
// stripe (this proxy's operations on the key wait meanwhile): the key is
// read on every node, and the value the node holds is deleted there
// (owner-checked) only when the nodes that hold it and those that did not
// answer are fewer than Q together: then no majority holds it, and no
// majority read can return it, so its deletion changes nothing a client
// can see. The repair waits for the node to be reachable again, retrying
// for a minute at most.
//
// What it does not cover: another lockproxy instance, or a client talking
// to the nodes directly, granting the same key with the same value between
// the repair's read and its delete (a few milliseconds).

// repairQueue holds the keys to repair, by node and database.
type repairQueue struct {
	mu    sync.Mutex
	nodes map[int]map[repairKey]time.Time // by node: when each key was first asked for
	n     int                             // keys in nodes
	busy  int                             // taken by a pass and not done yet
	swept time.Time                       // the last look for keys given up (take)
	wake  chan struct{}
}

type repairKey struct {
	node, db int
	key      string
}

const repairFor = time.Minute // how long a repair waits for its node to be reachable

// add asks for the keys to be repaired on node's database db. It never
// waits: a loop's failing connection calls it.
func (q *repairQueue) add(node, db int, keys []string) {
	if len(keys) == 0 || q == nil {
		return
	}
	q.mu.Lock()
	now := time.Now()
	for _, k := range keys {
		q.put(repairKey{node, db, k}, now)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// put queues rk, asked for since then, unless it is queued. Under q.mu.
func (q *repairQueue) put(rk repairKey, since time.Time) {
	if q.nodes == nil {
		q.nodes = make(map[int]map[repairKey]time.Time)
	}
	m := q.nodes[rk.node]
	if m == nil {
		m = make(map[repairKey]time.Time)
		q.nodes[rk.node] = m
	}
	if _, ok := m[rk]; !ok {
		m[rk] = since
		q.n++
	}
}

// take returns every key asked for so far, but those of the nodes skip
// names, and empties the queue of them; each is pending (len) until done.
// The keys of a skipped node stay, untouched but for those that waited
// repairFor, given up (looked for once a second): with a node down for
// long, thousands of keys can wait for it, and taking and putting each
// back every pass took a tenth of the CPU.
func (q *repairQueue) take(skip []bool) map[repairKey]time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	sweep := now.Sub(q.swept) >= time.Second
	if sweep {
		q.swept = now
	}
	var out map[repairKey]time.Time
	for node, m := range q.nodes {
		if node < len(skip) && skip[node] {
			if sweep {
				for rk, since := range m {
					if now.Sub(since) >= repairFor {
						delete(m, rk)
						q.n--
					}
				}
			}
			continue
		}
		if out == nil {
			out = m
		} else {
			maps.Copy(out, m)
		}
		q.n -= len(m)
		delete(q.nodes, node)
	}
	q.busy += len(out)
	return out
}

// done says a key taken is repaired, requeued or given up.
func (q *repairQueue) done() {
	q.mu.Lock()
	q.busy--
	q.mu.Unlock()
}

// len is how many keys wait for a repair, those under way included.
func (q *repairQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n + q.busy
}

// requeue puts back a key whose node could not be read yet.
func (q *repairQueue) requeue(rk repairKey, since time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.put(rk, since)
}

// repairLoop repairs the keys asked for until Close (stop), a pass at
// each wake-up and, while some wait for their node, every 100ms.
func (b *Backend) repairLoop(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-b.repairs.wake:
		case <-t.C:
		}
		// The keys of a node the health checks cannot reach wait in the
		// queue; whether a loop's connection is up is asked once per pass.
		seen := map[linkOf]bool{}
		for rk, since := range b.repairs.take(b.unreachable()) {
			if !b.repairKey(rk, seen) && time.Since(since) < repairFor {
				b.repairs.requeue(rk, since)
			}
			b.repairs.done()
		}
	}
}

// repairKey repairs one key (see the top of this file); false when the
// node, or too many others, could not be read yet.
func (b *Backend) repairKey(rk repairKey, seen map[linkOf]bool) bool {
	if !b.linkUp(rk.node, rk.db, rk.key, seen) {
		// Not reachable yet (a dial is under way, or it keeps failing):
		// no read to spend, and no failure to count against the node.
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*b.cfg.NodeTimeout)
	defer cancel()
	defer b.lockKeys(rk.key)()
	if b.order.busy(rk.node, rk.key) {
		return false // its writes of the key not answered yet: read after them (order.go)
	}
	r := &req{quiet: true}
	r.cmds.Strs("get", rk.key)
	replies := b.fanout(ctx, rk.db, rk.key, same(r), nil)
	held, ok := one(replies[rk.node])
	if !ok {
		return false
	}
	if held.Kind == backend.KindError && string(held.Str) == backend.MsgWrongType {
		return b.repairValue(ctx, rk) // a hash, a sorted set …: values.go's
	}
	if held.Kind != backend.KindBulk {
		return true // absent: nothing a lock left
	}
	// The nodes that hold it, and those that did not answer and might:
	// fewer than Q together, and no majority can hold it or see it.
	holders, unknown := 0, 0
	for _, nr := range replies {
		v, ok := one(nr)
		switch {
		case !ok:
			unknown++
		case v.Kind == backend.KindBulk && string(v.Str) == string(held.Str):
			holders++
		}
	}
	if holders >= b.q {
		return true // a majority holds it: a lock, kept
	}
	if holders+unknown >= b.q {
		return false // it might be one: asked again later
	}
	ur, again := undoRequest(rk.key, held.Str)
	ur.quiet = true
	b.fanout(ctx, rk.db, rk.key, only(rk.node, ur), again)
	return true
}

// linkOf is one loop's connection to one database of one node.
type linkOf struct {
	ql       *qloop
	node, db int
}

// linkUp reports whether key's own loop, where its repair runs, has its
// connection to node i's database db up (setting it up if it was never
// used); seen remembers the answers of this pass.
func (b *Backend) linkUp(i, db int, key string, seen map[linkOf]bool) bool {
	ql := b.ownLoop(key)
	lo := linkOf{ql, i, db}
	if v, ok := seen[lo]; ok {
		return v
	}
	isUp := make(chan bool, 1)
	if ql.l.Execute(func() { isUp <- ql.node(i, db).state == up }) != nil {
		return false
	}
	seen[lo] = <-isUp
	return seen[lo]
}

// unreachable reports, by node, whether the last health check failed to
// reach it.
func (b *Backend) unreachable() []bool {
	out := make([]bool, len(b.health))
	for i := range b.health {
		h := &b.health[i]
		h.mu.Lock()
		out[i] = h.checked && !h.reachable
		h.mu.Unlock()
	}
	return out
}
