package quorum

import (
	"context"
	"slices"
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
)

// applyScript writes new states to KEYS on one node, but only when the
// operation still holds its lease on every key there (readScript) and
// every key still has the check value read there: the SHA1 of its DUMP
// ("" for absent) and its PEXPIRETIME. Otherwise it writes nothing and
// answers 0. ARGV: the operation's nonce, its mode ("0" a commit; "1" a
// put-back, which releases the operation's leases afterwards, written or
// not; "2" the write of a decided commit to a node read late, which
// needs no lease — it writes no state a reader could see put back — and
// releases the operation's), the leases' database and hash; then per
// key in turn: its database (SELECTed by the script alone), the check
// digest, the check expiry, the new type ("none" deletes, "keep" only
// checks), the expiry's mode ("n" none, "p" relative ms, "a" absolute
// Unix ms), its value, the number of parts, and the parts (readScript's
// form; a sorted set's as score, member). It answers {1, digest, expiry,
// …}: each key's check values as it left them, for a put-back. Its work
// is O(keys + the states it writes).
var applyScript = newNodeScript(`local mine = ARGV[1] .. ':'
local p, spec, ok = 5, {}, true
redis.call('select', ARGV[3])
for i = 1, #KEYS do
  local cur = redis.call('hget', ARGV[4], ARGV[p] .. ':' .. KEYS[i])
  if ARGV[2] ~= '2' and (not cur or string.sub(cur, 1, #mine) ~= mine) then ok = false end
  spec[i] = p + 1
  p = p + 7 + tonumber(ARGV[p+6])
end
for i = 1, #KEYS do
  if not ok then break end
  local k, q = KEYS[i], spec[i]
  redis.call('select', ARGV[q-1])
  local d = redis.call('dump', k)
  if (d and redis.sha1hex(d) or '') ~= ARGV[q] or redis.call('pexpiretime', k) ~= tonumber(ARGV[q+1]) then
    ok = false
  end
end
local out = 0
if ok then
  local cmds = {hash = 'hset', set = 'sadd', list = 'rpush', zset = 'zadd'}
  out = {1}
  for i = 1, #KEYS do
    local k, q = KEYS[i], spec[i]
    local t, mode = ARGV[q+2], ARGV[q+3]
    redis.call('select', ARGV[q-1])
    if t ~= 'keep' then redis.call('del', k) end
    if t == 'string' then
      redis.call('set', k, ARGV[q+6])
    elseif t ~= 'none' and t ~= 'keep' then
      local s = q + 6
      local e = s + tonumber(ARGV[q+5]) - 1
      while s <= e do
        local l = math.min(s + 511, e)
        redis.call(cmds[t], k, unpack(ARGV, s, l))
        s = l + 1
      end
    end
    if t ~= 'none' and t ~= 'keep' then
      if mode == 'p' then redis.call('pexpire', k, ARGV[q+4])
      elseif mode == 'a' then redis.call('pexpireat', k, ARGV[q+4]) end
    end
    local d = redis.call('dump', k)
    out[2*i] = d and redis.sha1hex(d) or ''
    out[2*i+1] = redis.call('pexpiretime', k)
  end
end
if ARGV[2] ~= '0' then
  redis.call('select', ARGV[3])
  for i = 1, #KEYS do
    local f = ARGV[spec[i]-1] .. ':' .. KEYS[i]
    local cur = redis.call('hget', ARGV[4], f)
    if cur and string.sub(cur, 1, #mine) == mine then redis.call('hdel', ARGV[4], f) end
  end
end
return out`)

// releaseScript ends an operation's leases on one node (readScript):
// ARGV the nonce, the leases' database and hash, then the fields
// ("<db>:<key>"); a field another operation took over is left alone.
var releaseScript = newNodeScript(`local mine = ARGV[1] .. ':'
redis.call('select', ARGV[2])
for i = 4, #ARGV do
  local cur = redis.call('hget', ARGV[3], ARGV[i])
  if cur and string.sub(cur, 1, #mine) == mine then redis.call('hdel', ARGV[3], ARGV[i]) end
end
return 1`)

// releaseRequest is releaseScript's call over keys for nonce (EVAL for
// eval).
func releaseRequest(keys []dbKey, nonce string, eval bool) *req {
	r := &req{}
	if !eval {
		r.load = releaseScript.ref()
	}
	args := [][]byte{[]byte(nonce), strconv.AppendInt(nil, markerDB, 10), []byte(leasesKey)}
	for _, k := range keys {
		args = append(args, []byte(strconv.Itoa(k.db)+":"+k.key))
	}
	runScript(&r.cmds, releaseScript, eval, nil, args...)
	return r
}

// keyWrite is one key's new state on one node, and the check value it is
// written over.
type keyWrite struct {
	db     int
	key    string
	digest string // the check: the node's DUMP digest ("" absent)
	at     int64  // and its PEXPIRETIME
	st     keyState
	mode   byte  // 'n' no expiry, 'p' relative, 'a' absolute
	exp    int64 // ms: relative for 'p', Unix ms for 'a'
}

// applyMode is applyScript's second argument.
type applyMode uint8

const (
	applyCommit  applyMode = iota // under the lease, which stays
	applyPutBack                  // under the lease, which ends
	applyLate                     // a decided commit's write to a node read late: no lease needed; ours ends
)

// applyRequest is applyScript's call for ws on one node for the
// operation nonce, in mode: EVALSHA, the script loaded ahead of it on a
// connection's first use; EVAL for eval.
func applyRequest(ws []keyWrite, nonce string, mode applyMode, eval bool) *req {
	keys := make([]string, len(ws))
	rel := string('0' + byte(mode))
	args := [][]byte{[]byte(nonce), []byte(rel), strconv.AppendInt(nil, markerDB, 10), []byte(leasesKey)}
	for i, w := range ws {
		keys[i] = w.key
		parts := w.st.parts
		if w.st.typ == "zset" { // ZADD takes score, member
			parts = make([][]byte, len(w.st.parts))
			for j := 0; j+1 < len(parts); j += 2 {
				parts[j], parts[j+1] = w.st.parts[j+1], w.st.parts[j]
			}
		}
		if w.st.typ == "none" || w.st.typ == "keep" {
			parts = nil
		}
		args = append(args, strconv.AppendInt(nil, int64(w.db), 10), []byte(w.digest), strconv.AppendInt(nil, w.at, 10), []byte(w.st.typ), []byte{w.mode},
			strconv.AppendInt(nil, w.exp, 10), strconv.AppendInt(nil, int64(len(parts)), 10))
		args = append(args, parts...)
	}
	r := &req{}
	if !eval {
		r.load = applyScript.ref()
	}
	runScript(&r.cmds, applyScript, eval, keys, args...)
	return r
}

// nodeFinish is what one node is sent when an operation ends there: a
// commit, a put-back (writes, with release) or a release alone (keys).
type nodeFinish struct {
	ws   []keyWrite
	keys []dbKey
	mode applyMode
}

func (f *nodeFinish) request(nonce string, eval bool) *req {
	if f.ws != nil {
		return applyRequest(f.ws, nonce, f.mode, eval)
	}
	return releaseRequest(f.keys, nonce, eval)
}

// finishFallback sends a node that did not know lockproxy's script (NOSCRIPT:
// it did nothing) the same call by EVAL.
func finishFallback(fs []*nodeFinish, nonce string) func(int, nodeReply) *req {
	return func(i int, r nodeReply) *req {
		if r.err != nil || len(r.vals) != 1 || !noScript(r.vals[0]) || fs[i] == nil {
			return nil
		}
		return fs[i].request(nonce, true)
	}
}

// parseApplied reads a node's reply to applyRequest over n keys: done when it
// wrote, with each key's check values as it left them (for a put-back);
// refused when a key no longer had its check value there; neither when
// the node failed or answered something else (its outcome is unknown).
func parseApplied(r nodeReply, n int) (done, refused bool, after []keyWrite) {
	if r.err != nil || len(r.vals) != 1 {
		return false, false, nil
	}
	v := r.vals[0]
	if v.Kind == backend.KindInt && v.Int == 0 {
		return false, true, nil
	}
	if v.Kind != backend.KindArray || len(v.Elems) != 1+2*n || v.Elems[0].Kind != backend.KindInt || v.Elems[0].Int != 1 {
		return false, false, nil
	}
	after = make([]keyWrite, n)
	for j := range n {
		d, at := v.Elems[1+2*j], v.Elems[2+2*j]
		if !isStr(d) || at.Kind != backend.KindInt {
			return false, false, nil
		}
		after[j] = keyWrite{digest: string(d.Str), at: at.Int}
	}
	return true, false, after
}

// putBack is the compare-and-set that undoes a commit on one node: each
// key goes back to what the node showed before it (old, by key, with its
// own absolute expiry), only while it still has the check values the
// commit left (after).
func putBack(ws []keyWrite, after []keyWrite, old []nodeKey) []keyWrite {
	out := make([]keyWrite, len(ws))
	for j, w := range ws {
		o := old[j]
		out[j] = keyWrite{db: w.db, key: w.key, digest: after[j].digest, at: after[j].at, st: o.keyState, mode: 'n'}
		if w.st.typ == "keep" {
			out[j].st = w.st // only checked: nothing to put back
		} else if o.at > 0 {
			out[j].mode, out[j].exp = 'a', o.at
		}
	}
	return out
}

// finish sends each node its nodeFinish (nil: none) and waits for them,
// whatever ctx says: they end what the operation began on the nodes.
func (b *Backend) finish(ctx context.Context, db int, key, nonce string, fs []*nodeFinish) []nodeReply {
	if !slices.ContainsFunc(fs, func(f *nodeFinish) bool { return f != nil }) {
		return nil
	}
	return b.fanout(context.WithoutCancel(ctx), db, key, func(i int) *req {
		if fs[i] == nil {
			return nil
		}
		return fs[i].request(nonce, false)
	}, finishFallback(fs, nonce))
}

// finishLater is finish off the caller's path (a release after a commit
// that succeeded, or from a loop's late reply).
func (b *Backend) finishLater(db int, key, nonce string, fs []*nodeFinish) {
	b.late.Go(func() { b.finish(context.Background(), db, key, nonce, fs) })
}
