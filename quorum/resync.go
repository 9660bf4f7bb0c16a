package quorum

// Resyncs: the nodes that hold another state of a script's keys than the
// majority's are brought level with it, off the client's path
// (evalmodel.go).

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// resyncLater brings the nodes that hold something else than a majority
// of keys level with it, off the caller's path (resync).
//
// At most one resync of a set of keys runs at a time, and at most one more
// is asked for meanwhile: a resync waits for every node, so with a slow or
// cut-off node each takes up to a node timeout or two under the keys'
// stripes, and one queued per operation (a contended semaphore's every
// acquire found that node behind) left the key's own operations no turn at
// all. The one asked for meanwhile runs once the running one ends, and
// reads the state after every operation before it.
func (b *Backend) resyncLater(db int, keys []dbKey) {
	id := resyncID(db, keys)
	if !b.resyncs.start(id) {
		return
	}
	b.late.Go(func() {
		for again := true; again; again = b.resyncs.end(id) {
			for attempt := 1; attempt <= commitAttempts && !b.resync(db, keys); attempt++ {
				select {
				case <-time.After(splitPause(attempt)):
				case <-b.stop:
					b.resyncs.stop(id)
					return
				}
			}
		}
	})
}

// pendingResyncs are the key sets a resync runs for, and whether another
// was asked for meanwhile. Safe for concurrent use.
type pendingResyncs struct {
	mu    sync.Mutex
	again map[string]bool // by key set: running; true: run again after
}

// start reports whether a resync of id is to run now; when one runs
// already, it is asked to run again after.
func (p *pendingResyncs) start(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, running := p.again[id]; running {
		p.again[id] = true
		return false
	}
	if p.again == nil {
		p.again = map[string]bool{}
	}
	p.again[id] = false
	return true
}

// end reports whether the resync of id is to run again; otherwise it is
// over.
func (p *pendingResyncs) end(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.again[id] {
		p.again[id] = false
		return true
	}
	delete(p.again, id)
	return false
}

// stop forgets id: the Backend is closing.
func (p *pendingResyncs) stop(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.again, id)
}

// resyncID names a set of keys of db.
func resyncID(db int, keys []dbKey) string {
	var sb strings.Builder
	sb.WriteString(strconv.Itoa(db))
	for _, k := range keys {
		sb.WriteString("\x00" + strconv.Itoa(k.db) + ":" + k.key)
	}
	return sb.String()
}

// resync reads keys on every node under leases and, on each node that
// answered with another state than the majority's, writes the majority's
// (compare-and-set against what that node showed, under the lease): a
// node a commit could not write (it changed between the read and the
// commit) is brought level, so that the nodes end equal. false when the
// read found no majority (another operation under way): tried again.
func (b *Backend) resync(db int, keys []dbKey) bool {
	names := make([]string, len(keys))
	for j, k := range keys {
		names[j] = k.key
	}
	defer b.lockKeys(names...)()
	ctx, cancel := context.WithTimeout(context.Background(), 4*b.cfg.NodeTimeout)
	defer cancel()
	nonce := b.newNonce()
	snap, leasedOn, err := b.readSnapshot(ctx, db, keys, nonce, b.lease(), true) // every node: the ones behind are the point
	fs := make([]*nodeFinish, len(b.nodes))
	for i := range fs {
		if leasedOn[i] {
			fs[i] = &nodeFinish{keys: keys}
		}
	}
	if err == nil {
		snap.late.take(func(i int, _ []nodeKey) {
			b.finishLater(db, names[0], nonce, onlyFinish(len(b.nodes), i, &nodeFinish{keys: keys}))
		}, false)
		for i, nk := range snap.nodes {
			if nk == nil || !leasedOn[i] {
				continue
			}
			var ws []keyWrite
			for j, k := range keys {
				if b.agrees(snap, j, nk[j]) {
					continue
				}
				if !puttable(nk[j].typ) {
					ws = nil
					break
				}
				kw := keyWrite{db: k.db, key: k.key, digest: nk[j].digest, at: nk[j].at, st: snap.state[j], mode: 'n'}
				if snap.state[j].typ != "none" && snap.ttl[j] > 0 {
					kw.mode, kw.exp = 'p', snap.ttl[j]
				}
				ws = append(ws, kw)
			}
			if ws != nil {
				fs[i] = &nodeFinish{ws: ws, mode: applyPutBack} // under the lease, which ends
			}
		}
	}
	b.finish(ctx, db, names[0], nonce, fs)
	return err == nil
}
