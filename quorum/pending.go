package quorum

import (
	"sync"
	"sync/atomic"
)

// pendingUndos knows, per node, the owner-checked deletes (undos) whose
// outcome is not known yet: sent and not answered, or kept for a later
// connection (link.redo), and on which line of connections to the node
// each one travels: each loop's connection to the node is one (its link
// keeps its own redo). While one of key+token is pending on a node on one
// line, no request that writes that key with that token is sent to that
// node on another line: it is answered errUndoPending there, a failure
// that counts as neither a write nor a refusal.
//
// Why. One line keeps its order on the node: a later write runs after the
// undo, and a broken connection is killed and its undos sent again before
// the next one carries anything (link.connect). Two lines do not: a
// client that retries an acquire with the same token (redsync, node
// redlock and redis-py all do) through another loop could get OK from a majority that includes a node where its old
// attempt's undo runs afterwards, deleting the new lock there and leaving
// it on fewer than Q nodes while its holder believes it holds it.
//
// What it costs. One atomic load per write while no undo is pending; a
// retry on the same line as its undo (one loop: the usual case) is not
// held back; a retry on another line is sent to the other nodes only, and
// needs a majority of them. While a node is down its undos stay pending
// until it is back, which holds back only writes to that node.
type pendingUndos struct {
	n  atomic.Int64 // entries in m
	mu sync.Mutex
	m  map[pendingKey][]lineCount
}

type pendingKey struct {
	node, db   int
	key, token string
}

// lineCount is how many deletes of one key and token are pending on one
// line of connections.
type lineCount struct {
	line *link
	n    int
}

// add counts d more (or, negative, fewer) pending deletes of us on line,
// node's database db.
func (p *pendingUndos) add(line *link, node, db int, us []undoRec, d int) {
	if len(us) == 0 || p == nil {
		return
	}
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[pendingKey][]lineCount)
	}
	for _, u := range us {
		k := pendingKey{node, db, u.key, u.token} // a restore's token is valuesToken: a values write holds back for each (values.go)
		lines := p.m[k]
		j := 0
		for j < len(lines) && lines[j].line != line {
			j++
		}
		if j == len(lines) {
			lines = append(lines, lineCount{line: line})
		}
		lines[j].n += d
		if lines[j].n <= 0 {
			lines = append(lines[:j], lines[j+1:]...)
		}
		if len(lines) == 0 {
			delete(p.m, k)
		} else {
			p.m[k] = lines
		}
	}
	p.n.Store(int64(len(p.m)))
	p.mu.Unlock()
}

// blocks reports whether a delete of one of ws (key and token pairs a
// request may write) may still run on node's database db on a line other
// than line.
func (p *pendingUndos) blocks(line *link, node, db int, ws []undoRec) bool {
	if len(ws) == 0 || p == nil || p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range ws {
		for _, lc := range p.m[pendingKey{node, db, w.key, w.token}] {
			if lc.line != line {
				return true
			}
		}
	}
	return false
}
