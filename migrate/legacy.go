package migrate

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// The legacy Redis's side of each operation. Conditions newer than the
// legacy Redis may be (IFEQ and IFNE of Redis 8.4, DELIFEQ of Valkey 9)
// run as small scripts, which every Redis since 2.6 runs atomically.

// setIfScript is SET under a condition: ARGV[1] the token, ARGV[2] the
// condition (always, xx, eq, ne), ARGV[3] the value eq and ne compare
// with, ARGV[4] "get" for SET … GET, ARGV[5…] SET's expiry options. It
// answers the previous token (nil when absent or of another type) and 1
// when it wrote; a key of another type is WRONGTYPE to eq, ne and GET, as
// in Redis, and replaced by the others.
var setIfScript = redis.NewScript(`local t = redis.call('type', KEYS[1]).ok
local c = ARGV[2]
if t ~= 'string' and t ~= 'none' and (c == 'eq' or c == 'ne' or ARGV[4] == 'get') then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local cur = false
if t == 'string' then cur = redis.call('get', KEYS[1]) end
local ok = c == 'always' or (c == 'xx' and t ~= 'none') or (c == 'eq' and cur == ARGV[3]) or (c == 'ne' and cur ~= ARGV[3])
if ok then redis.call('set', KEYS[1], ARGV[1], unpack(ARGV, 5)) end
return {cur, ok and 1 or 0}`)

// delIfScript deletes each key of KEYS whose token is the ARGV of the same
// position and counts those deleted: the owner-checked delete of an undo.
var delIfScript = redis.NewScript(`local n = 0
for i, k in ipairs(KEYS) do
  if redis.call('type', k).ok == 'string' and redis.call('get', k) == ARGV[i] then n = n + redis.call('del', k) end
end
return n`)

// delCondScript is DELIFEQ and DELEX IFEQ|IFNE: ARGV[1] eq or ne, ARGV[2]
// the value; an absent key answers 0.
var delCondScript = redis.NewScript(`local cur = redis.call('get', KEYS[1])
if cur and ((ARGV[1] == 'eq' and cur == ARGV[2]) or (ARGV[1] == 'ne' and cur ~= ARGV[2])) then
  return redis.call('del', KEYS[1])
end
return 0`)

// delEachScript deletes each key and answers, per key, whether it was
// there (1) or not (0).
var delEachScript = redis.NewScript(`local r = {}
for i, k in ipairs(KEYS) do r[i] = redis.call('del', k) end
return r`)

// expiryArgs renders e as SET's options: a relative TTL is sent as is (PX),
// an absolute one stays absolute (PXAT).
func expiryArgs(e backend.Expiry, keepTTL bool) []any {
	switch {
	case !e.At.IsZero():
		return []any{"pxat", e.At.UnixMilli()}
	case e.TTL > 0:
		return []any{"px", e.TTL.Milliseconds()}
	case keepTTL:
		return []any{"keepttl"}
	}
	return nil
}

// legacySetNX is SET key token NX [expiry] [GET] on the legacy Redis.
func (b *Backend) legacySetNX(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	args := append([]any{"set", key, token, "nx"}, expiryArgs(o.Expiry, o.KeepTTL)...)
	if o.Get {
		args = append(args, "get")
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	v, err := b.client(db).Do(lctx, args...).Result()
	switch {
	case errors.Is(err, redis.Nil):
		// Without GET: refused. With GET: there was no previous value, so it wrote.
		return backend.SetResult{Written: o.Get}, nil
	case err != nil:
		return backend.SetResult{}, err
	}
	if o.Get {
		s, _ := v.(string)
		return backend.SetResult{HadPrev: true, Prev: []byte(s)}, nil
	}
	return backend.SetResult{Written: true}, nil
}

// legacySetIf is SET without NX (plain, XX, IFEQ, IFNE) on the legacy
// Redis; it always reports the previous token.
func (b *Backend) legacySetIf(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	cond := "always"
	switch o.Cond {
	case backend.IfPresent:
		cond = "xx"
	case backend.IfEqual:
		cond = "eq"
	case backend.IfNotEqual:
		cond = "ne"
	}
	get := ""
	if o.Get {
		get = "get"
	}
	args := append([]any{token, cond, o.Match, get}, expiryArgs(o.Expiry, o.KeepTTL)...)
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	v, err := setIfScript.Run(lctx, b.client(db), []string{key}, args...).Slice()
	if err != nil {
		return backend.SetResult{}, err
	}
	var res backend.SetResult
	if len(v) == 2 {
		if s, ok := v[0].(string); ok {
			res.HadPrev, res.Prev = true, []byte(s)
		}
		n, _ := v[1].(int64)
		res.Written = n == 1
	}
	return res, nil
}

// undoLegacy removes, with an owner-checked delete, each key that still
// holds the token this operation wrote. It runs under its own context
// (never the one that failed) and reports nothing: a failure leaves the
// key to its TTL, and is counted.
func (b *Backend) undoLegacy(ctx context.Context, db int, pairs []backend.KV) {
	if len(pairs) == 0 {
		return
	}
	keys := make([]string, len(pairs))
	args := make([]any, len(pairs))
	for i, p := range pairs {
		keys[i], args[i] = p.Key, p.Value
	}
	cctx, cancel := b.cleanupCtx(ctx)
	defer cancel()
	n, err := delIfScript.Run(cctx, b.client(db), keys, args...).Int64()
	if err != nil {
		b.st.undoFailed.Add(1)
		return
	}
	b.st.undoLegacy.Add(n)
}

// undoInner removes from the inner backend the keys this operation wrote
// there, owner-checked, under its own context.
func (b *Backend) undoInner(ctx context.Context, db int, pairs []backend.KV) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout*4)
	defer cancel()
	for _, p := range pairs {
		ok, err := b.inner.DelIf(cctx, db, p.Key, backend.IfEqual, p.Value)
		switch {
		case err != nil:
			b.st.undoFailed.Add(1)
		case ok:
			b.st.undoInner.Add(1)
		}
	}
}

// expireArgs renders an Expire as PEXPIRE or PEXPIREAT with its condition.
func expireArgs(key string, e backend.Expiry, cond backend.ExpireCond) []any {
	var args []any
	if !e.At.IsZero() {
		args = []any{"pexpireat", key, e.At.UnixMilli()}
	} else {
		args = []any{"pexpire", key, e.TTL.Milliseconds()}
	}
	for _, o := range cond.Options() {
		args = append(args, o)
	}
	return args
}

// condName is a DelIf condition as delCondScript spells it.
func condName(c backend.Cond) string {
	if c == backend.IfNotEqual {
		return "ne"
	}
	return "eq"
}

// ints reads an array reply of integers.
func ints(v []any) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i], _ = x.(int64)
	}
	return out
}
