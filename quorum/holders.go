package quorum

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Holders (docs/operations.md, "Who holds what"). The nodes keep a lock's
// token and TTL only; who took it and when is known to the instance that
// granted it, which keeps it in process for the grants it made: recorded
// when an acquire (SET, or a script that created the key on a majority)
// is granted, dropped when the key is deleted through this instance, and
// shown only while the key still holds the grant's token (a grant by
// another instance over an expired one reads as unknown). The table is
// bounded: past maxGrants records, those past their TTL go, then an
// eighth of the rest; a grant not recorded reads as unknown.

const maxGrants = 1 << 18

type grantKey struct {
	db  int
	key string
}

type grantRec struct {
	token []byte // nil: a value of another type (a hash lock), not told by a token
	g     backend.Grant
	until int64 // Unix ms the grant's TTL ends; 0: none
}

type grants struct {
	mu sync.Mutex
	m  map[grantKey]grantRec
}

// record notes a grant of key made now for h; ttl 0 is none.
func (gs *grants) record(db int, key string, token []byte, h *backend.Holder, ttl time.Duration) {
	now := time.Now().UnixMilli()
	if token != nil {
		token = append([]byte{}, token...)
	}
	r := grantRec{token: token, g: backend.Grant{At: now, Holder: h}}
	if ttl > 0 {
		r.until = now + ttl.Milliseconds()
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.m == nil {
		gs.m = make(map[grantKey]grantRec)
	}
	if len(gs.m) >= maxGrants {
		gs.shrink(now)
	}
	gs.m[grantKey{db, key}] = r
}

// shrink drops the records past their TTL, then, if that freed too
// little, an eighth of the others (map order: arbitrary ones).
func (gs *grants) shrink(now int64) {
	for k, r := range gs.m {
		if r.until != 0 && r.until <= now {
			delete(gs.m, k)
		}
	}
	drop := len(gs.m) - maxGrants + maxGrants/8
	for k := range gs.m {
		if drop <= 0 {
			break
		}
		delete(gs.m, k)
		drop--
	}
}

// forget drops the records of keys (deleted).
func (gs *grants) forget(db int, keys ...string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, k := range keys {
		delete(gs.m, grantKey{db, k})
	}
}

// lookup returns the grant of key when it is the one recorded: the key
// holds tok (nil: a value of another type, whose record says so too).
func (gs *grants) lookup(db int, key string, tok []byte) backend.Grant {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	r, ok := gs.m[grantKey{db, key}]
	if !ok {
		return backend.Grant{}
	}
	if (r.token == nil) != (tok == nil) || !bytes.Equal(r.token, tok) {
		delete(gs.m, grantKey{db, key}) // overwritten: another grant now
		return backend.Grant{}
	}
	return r.g
}

// nodeHoldsScript answers a node's view of KEYS[1]: its value for a
// string, 1 for a key of another type, nil when absent.
var nodeHoldsScript = newNodeScript(`local t = redis.call('type', KEYS[1]).ok
if t == 'string' then return redis.call('get', KEYS[1]) end
if t == 'none' then return false end
return 1`)

// nodesHolding reads on every node whether it holds key with tok (nil:
// a value of another type, held where the key exists): a map of each
// node's address to 1 or 0 (0 too for a node that did not answer).
func (b *Backend) nodesHolding(ctx context.Context, db int, key string, tok []byte) []backend.Value {
	r := &req{load: nodeHoldsScript.ref()}
	runScript(&r.cmds, nodeHoldsScript, false, []string{key})
	defer b.rlockKeys(key)()
	replies := b.fanout(ctx, db, key, same(r), scriptFallback(nodeHoldsScript, []string{key}))
	out := make([]backend.Value, 0, 2*len(replies))
	for i, rep := range replies {
		v, ok := one(rep)
		held := ok && (tok == nil && v.Kind == backend.KindInt || tok != nil && v.Kind == backend.KindBulk && bytes.Equal(v.Str, tok))
		out = append(out, backend.BulkString(b.nodes[i].addr), backend.Bool(held))
	}
	return out
}
