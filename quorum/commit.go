package quorum

import (
	"context"
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
)

// applyScript writes new states to KEYS on one node, but only when every
// key still has the check value read there: the SHA1 of its DUMP ("" for
// absent) and its PEXPIRETIME. Otherwise it writes nothing and answers 0.
// ARGV holds, per key in turn: the check digest, the check expiry, the
// new type ("none" deletes), the expiry's mode ("n" none, "p" relative
// ms, "a" absolute Unix ms), its value, the number of parts, and the
// parts (readScript's form; a sorted set's as score, member). It answers
// {1, digest, expiry, …}: each key's check values as it left them, for a
// put-back. Its work is O(keys + the states it writes).
var applyScript = newNodeScript(`local p, spec = 1, {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local d = redis.call('dump', k)
  if (d and redis.sha1hex(d) or '') ~= ARGV[p] or redis.call('pexpiretime', k) ~= tonumber(ARGV[p+1]) then
    return 0
  end
  spec[i] = p
  p = p + 6 + tonumber(ARGV[p+5])
end
local cmds = {hash = 'hset', set = 'sadd', list = 'rpush', zset = 'zadd'}
local out = {1}
for i = 1, #KEYS do
  local k, q = KEYS[i], spec[i]
  local t, mode = ARGV[q+2], ARGV[q+3]
  redis.call('del', k)
  if t == 'string' then
    redis.call('set', k, ARGV[q+6])
  elseif t ~= 'none' then
    local s = q + 6
    local e = s + tonumber(ARGV[q+5]) - 1
    while s <= e do
      local l = math.min(s + 511, e)
      redis.call(cmds[t], k, unpack(ARGV, s, l))
      s = l + 1
    end
  end
  if t ~= 'none' then
    if mode == 'p' then redis.call('pexpire', k, ARGV[q+4])
    elseif mode == 'a' then redis.call('pexpireat', k, ARGV[q+4]) end
  end
  local d = redis.call('dump', k)
  out[2*i] = d and redis.sha1hex(d) or ''
  out[2*i+1] = redis.call('pexpiretime', k)
end
return out`)

// keyWrite is one key's new state on one node, and the check value it is
// written over.
type keyWrite struct {
	key    string
	digest string // the check: the node's DUMP digest ("" absent)
	at     int64  // and its PEXPIRETIME
	st     keyState
	mode   byte  // 'n' no expiry, 'p' relative, 'a' absolute
	exp    int64 // ms: relative for 'p', Unix ms for 'a'
}

// applyRequest is applyScript's call for ws on one node: EVALSHA, the
// script loaded ahead of it on a connection's first use; EVAL for eval.
func applyRequest(ws []keyWrite, eval bool) *req {
	keys := make([]string, len(ws))
	var args [][]byte
	for i, w := range ws {
		keys[i] = w.key
		parts := w.st.parts
		if w.st.typ == "zset" { // ZADD takes score, member
			parts = make([][]byte, len(w.st.parts))
			for j := 0; j+1 < len(parts); j += 2 {
				parts[j], parts[j+1] = w.st.parts[j+1], w.st.parts[j]
			}
		}
		if w.st.typ == "none" {
			parts = nil
		}
		args = append(args, []byte(w.digest), strconv.AppendInt(nil, w.at, 10), []byte(w.st.typ), []byte{w.mode},
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

// applyFallback sends applyScript by EVAL to a node that did not know it
// (NOSCRIPT: it wrote nothing).
func applyFallback(ws [][]keyWrite) func(int, nodeReply) *req {
	return func(i int, r nodeReply) *req {
		if r.err != nil || len(r.vals) != 1 || !noScript(r.vals[0]) || ws[i] == nil {
			return nil
		}
		return applyRequest(ws[i], true)
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
		out[j] = keyWrite{key: w.key, digest: after[j].digest, at: after[j].at, st: o.keyState, mode: 'n'}
		if o.at > 0 {
			out[j].mode, out[j].exp = 'a', o.at
		}
	}
	return out
}

// runPutBacks sends the put-backs by node (nil: none) and waits for them.
func (b *Backend) runPutBacks(ctx context.Context, db int, pb [][]keyWrite) {
	reqs := make([]*req, len(pb))
	any := false
	for i, ws := range pb {
		if ws != nil {
			reqs[i], any = applyRequest(ws, false), true
		}
	}
	if !any {
		return
	}
	b.fanout(context.WithoutCancel(ctx), db, pb[firstSet(pb)][0].key, func(i int) *req { return reqs[i] }, applyFallback(pb))
}

func firstSet(pb [][]keyWrite) int {
	for i, ws := range pb {
		if ws != nil {
			return i
		}
	}
	return 0
}
