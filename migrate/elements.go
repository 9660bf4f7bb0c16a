package migrate

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// What an acquiring script created, looked at on each side (script.go):
// on the legacy Redis, each element's value and its key's PTTL just before
// and just after the script, in the script's MULTI; on the inner backend,
// whether each element is there once the script ran there. An undo puts
// back, element by element and owner-checked, what the run changed: a
// semaphore's other holders, who may have joined since, keep their
// members.

// elemLua reads one element (key k, kind, field or member name): a
// string's token, a field's value, a member's score, "1" for a set member;
// false when absent or of another type.
const elemLua = `local function elem(k, kind, name)
  local t = redis.call('type', k).ok
  if kind == 's' and t == 'string' then return redis.call('get', k)
  elseif kind == 'h' and t == 'hash' then return redis.call('hget', k, name)
  elseif kind == 'z' and t == 'zset' then return redis.call('zscore', k, name)
  elseif kind == 'S' and t == 'set' and redis.call('sismember', k, name) == 1 then return '1' end
  return false
end
`

// elemsScript reads, for each element (KEYS[i], kind ARGV[2i-1], field or
// member ARGV[2i]), its value (elemLua) and its key's PTTL.
var elemsScript = redis.NewScript(elemLua + `local out = {}
for i, k in ipairs(KEYS) do
  out[2*i-1] = elem(k, ARGV[2*i-1], ARGV[2*i])
  out[2*i] = redis.call('pttl', k)
end
return out`)

// undoElemsScript puts elements back as they were before a run, each only
// while it still holds what the run left (ARGV[6i-3]): KEYS[i] the key,
// ARGV[6i-5] the kind, ARGV[6i-4] the field or member, ARGV[6i-2] "1"
// when it was there before with the value ARGV[6i-1] (put back) and "0"
// when it was not (removed), ARGV[6i] the key's PTTL to put back (-1: no
// expiry; -2: the key was absent, left as it is). It answers how many it
// put back.
var undoElemsScript = redis.NewScript(elemLua + `local n = 0
for i, k in ipairs(KEYS) do
  local kind, name, after, had, before, ttl = ARGV[6*i-5], ARGV[6*i-4], ARGV[6*i-3], ARGV[6*i-2], ARGV[6*i-1], tonumber(ARGV[6*i])
  if elem(k, kind, name) == after then
    if had == '1' then
      if kind == 's' then redis.call('set', k, before)
      elseif kind == 'h' then redis.call('hset', k, name, before)
      elseif kind == 'z' then redis.call('zadd', k, before, name) end
    elseif kind == 's' then redis.call('del', k)
    elseif kind == 'h' then redis.call('hdel', k, name)
    elseif kind == 'z' then redis.call('zrem', k, name)
    else redis.call('srem', k, name) end
    if ttl > 0 and redis.call('exists', k) == 1 then redis.call('pexpire', k, ttl)
    elseif ttl == -1 then redis.call('persist', k) end
    n = n + 1
  end
end
return n`)

// elemCmds are the commands that read, remove and put back a field or a
// member, by element kind (a set member is put back by its presence).
var elemCmds = map[byte]struct{ read, remove, put string }{
	elemField:  {"hget", "hdel", "hset"},
	elemMember: {"zscore", "zrem", "zadd"},
	elemSetMem: {"sismember", "srem", ""},
}

// elemState is one element on the legacy Redis at one moment: its value
// (nil: absent) and its key's PTTL (-2 absent, -1 no expiry).
type elemState struct {
	val  *string
	pttl int64
}

// elemsArgs are elemsScript's KEYS and ARGV for elems.
func elemsArgs(elems []element) ([]string, []any) {
	keys := make([]string, len(elems))
	args := make([]any, 0, 2*len(elems))
	for i, e := range elems {
		keys[i] = e.key
		args = append(args, string(e.kind), e.name)
	}
	return keys, args
}

// readElems reads elemsScript's reply.
func readElems(v any, n int) ([]elemState, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 2*n {
		return nil, false
	}
	out := make([]elemState, n)
	for i := range out {
		if s, ok := a[2*i].(string); ok {
			out[i].val = &s
		}
		out[i].pttl, _ = a[2*i+1].(int64)
	}
	return out, true
}

// took reports whether a run took e on a side, from its states
// before and after the run: a string holding the token; a field or member
// there after the run and not there, or with another value, before it (a
// reentrant count raised, a permit's time renewed). A field or member that
// was there unchanged is somebody else's (Symfony's "__write__" member of
// another writer), or this client's from before: not this run's.
func (e element) took(before, after elemState) bool {
	if after.val == nil {
		return false
	}
	if e.kind == elemString {
		return *after.val == e.tok
	}
	return before.val == nil || *before.val != *after.val
}

// holds reports whether st is e held: the token for a string, presence
// for a field or a member (the values differ by side: a reentrant count,
// a time).
func (e element) holds(st elemState) bool {
	return st.val != nil && (e.kind != elemString || *st.val == e.tok)
}

// undoLegacyElems puts back on the legacy Redis what a run took of elems
// (the plan's elements at indexes took, before and after the run: lr),
// owner-checked, and restores their keys' expiry as it was (less the time
// since). Like undoLegacy it reports nothing: a failure leaves the
// elements to their TTL, and is counted.
func (b *Backend) undoLegacyElems(ctx context.Context, db int, elems []element, took []int, lr legacyRun) {
	var keys []string
	var args []any
	since := time.Since(lr.at).Milliseconds()
	for _, i := range took {
		e, before, after := elems[i], lr.before[i], lr.after[i]
		had, prev := "0", ""
		if before.val != nil {
			had, prev = "1", *before.val
		}
		ttl := before.pttl
		if ttl > 0 {
			ttl = max(ttl-since, 1)
		}
		keys = append(keys, e.key)
		args = append(args, string(e.kind), e.name, *after.val, had, prev, ttl)
	}
	if len(keys) == 0 {
		return
	}
	cctx, cancel := b.cleanupCtx(ctx)
	defer cancel()
	n, err := undoElemsScript.Run(cctx, b.client(db), keys, args...).Int64()
	if err != nil {
		b.st.undoFailed.Add(1)
		return
	}
	b.st.undoLegacy.Add(n)
}

// innerElems reads elems on the inner backend, each as elemsScript reads
// it on the legacy Redis (the value, nil when absent or of another type;
// no PTTL). Not atomic with anything: a field, member or token is the
// client's own, which nobody else writes meanwhile.
func (b *Backend) innerElems(ctx context.Context, db int, elems []element) ([]elemState, error) {
	out := make([]elemState, len(elems))
	for i, e := range elems {
		if e.kind == elemString {
			tok, ok, err := b.inner.Get(ctx, db, e.key)
			switch {
			case err != nil && !backend.IsWrongType(err):
				return nil, err
			case ok:
				out[i].val = strPtr(string(tok))
			}
			continue
		}
		v, err := b.inner.Do(ctx, db, []string{e.key}, [][]byte{[]byte(elemCmds[e.kind].read), []byte(e.key), []byte(e.name)})
		switch {
		case backend.IsWrongType(err):
		case err != nil:
			return nil, err
		case v.Kind == backend.KindInt: // SISMEMBER
			if v.Int == 1 {
				out[i].val = strPtr("1")
			}
		case v.Kind == backend.KindDouble: // ZSCORE in the model's reply kind
			out[i].val = strPtr(strconv.FormatFloat(v.Float, 'g', 17, 64))
		case !v.IsNil():
			out[i].val = strPtr(string(v.Str))
		}
	}
	return out, nil
}

func strPtr(s string) *string { return &s }

// undoInnerElems puts back on the inner backend what a run took of elems
// (indexes took, states before and after the run there), under its own
// context: a string only while it holds what the run left; a field or
// member by its name, the client's own.
func (b *Backend) undoInnerElems(ctx context.Context, db int, elems []element, took []int, before, after []elemState) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout*4)
	defer cancel()
	for _, i := range took {
		e, prev := elems[i], before[i].val
		var err error
		switch {
		case e.kind == elemString && prev == nil:
			_, err = b.inner.DelIf(cctx, db, e.key, backend.IfEqual, []byte(*after[i].val))
		case e.kind == elemString:
			_, err = b.inner.Set(cctx, db, e.key, []byte(*prev), backend.SetOptions{Cond: backend.IfEqual, Match: []byte(*after[i].val), KeepTTL: true})
		default:
			cmds := elemCmds[e.kind]
			args := [][]byte{[]byte(cmds.remove), []byte(e.key), []byte(e.name)}
			if prev != nil && cmds.put != "" { // there before: its value back
				args = [][]byte{[]byte(cmds.put), []byte(e.key), []byte(e.name), []byte(*prev)}
				if e.kind == elemMember {
					args[2], args[3] = args[3], args[2] // ZADD key score member
				}
			}
			_, err = b.inner.Do(cctx, db, []string{e.key}, args)
		}
		if err != nil {
			b.st.undoFailed.Add(1)
		} else {
			b.st.undoInner.Add(1)
		}
	}
}

// stringElems are the client's own string elements (mine) of elems as
// KVs (undoLegacy).
func stringElems(elems []element, mine []bool) []backend.KV {
	var out []backend.KV
	for i, e := range elems {
		if e.kind == elemString && mine[i] {
			out = append(out, backend.KV{Key: e.key, Value: []byte(e.tok)})
		}
	}
	return out
}
