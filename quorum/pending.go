package quorum

import (
	"sync"
	"sync/atomic"
)

// pendingUndos knows, per node, the owner-checked deletes (undos) whose
// outcome is not known yet: sent and not answered, or kept for a later
// connection (stream.redo). While one of key+token is pending on a node,
// no request that writes that key with that token is sent to that node
// (dispatch): it is answered errUndoPending there, a failure that counts
// as neither a write nor a refusal.
//
// Why. An undo and a later write of the same token may travel on two
// different connections to one node (the loops' own connections and the
// stream, or two loops), and then nothing orders them on the node: a
// client that retries an acquire with the same token (redsync, node
// redlock and redis-py all do) could get OK from a majority that includes
// a node where the stale undo then deletes the new lock, leaving it on
// fewer than Q nodes while its holder believes it holds it. On one
// connection the order is kept (and a broken connection is killed and
// its undos sent again before a new one carries anything, stream.connect),
// so only the cross-connection case needs this, but the rule is kept
// simple: pending anywhere on the node blocks the write to that node.
//
// What it costs. Nothing while no undo is pending (one atomic load per
// write); an acquire that retried before its own undo was answered is
// sent to the other nodes only, and still succeeds with a majority of
// them. While a node is down, its undos stay pending until it is back,
// and a retry with the same token needs a majority of the others, as any
// acquire does then.
type pendingUndos struct {
	n  atomic.Int64 // entries in m
	mu sync.Mutex
	m  map[pendingKey]int
}

type pendingKey struct {
	node, db   int
	key, token string
}

// add counts d more (or, negative, fewer) pending deletes of us on node's
// database db.
func (p *pendingUndos) add(node, db int, us []undoRec, d int) {
	if len(us) == 0 || p == nil {
		return
	}
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[pendingKey]int)
	}
	for _, u := range us {
		k := pendingKey{node, db, u.key, u.token}
		switch c := p.m[k] + d; {
		case c > 0:
			p.m[k] = c
		default:
			delete(p.m, k)
		}
	}
	p.n.Store(int64(len(p.m)))
	p.mu.Unlock()
}

// blocks reports whether a delete of one of ws (key and token pairs a
// request may write) may still run on node's database db.
func (p *pendingUndos) blocks(node, db int, ws []undoRec) bool {
	if len(ws) == 0 || p == nil || p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range ws {
		if p.m[pendingKey{node, db, w.key, w.token}] > 0 {
			return true
		}
	}
	return false
}
