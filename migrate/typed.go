package migrate

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
)

// The commands a backend runs whole (Do): hashes, sets, sorted sets,
// lists, TYPE, counters (counter.go), the key space as a whole.
//
//   - A read answers from the inner backend when it has one of the keys,
//     else from the legacy Redis (a lock taken there directly), as GET
//     does.
//   - A write runs on the legacy Redis, then on the inner backend; the
//     reply is the inner backend's, except when none of the keys was live
//     there and one was on the legacy Redis, as for scripts. A write
//     outside a script is not an acquire: it is not undone on one side
//     when the other refuses (the lock libraries acquire by script, and
//     SET NX is one).
//   - KEYS, SCAN and RANDOMKEY list the inner backend's keys (as DBSIZE
//     counts them); FLUSHDB and FLUSHALL empty both sides.
//
// The legacy Redis's reply is not read off its wire: the command runs
// there in a MULTI after a copy of its keys (legacySnapshot), and the
// reply is the lock model's for the command on that copy — the same
// reply, in the client's protocol and with Redis's exact shapes (a RESP3
// map, a double), which a RESP2 connection to the legacy Redis does not
// carry. A key of a type the model does not hold (a stream) falls back to
// the reply as read.

// snapshotScript copies each of KEYS: its type, PTTL and contents (a
// string's value, a hash's fields and values, a sorted set's members and
// scores, a set's members, a list's items).
var snapshotScript = redis.NewScript(`local out = {}
for i, k in ipairs(KEYS) do
  local t = redis.call('type', k).ok
  local v = {}
  if t == 'string' then v = {redis.call('get', k)}
  elseif t == 'hash' then v = redis.call('hgetall', k)
  elseif t == 'zset' then v = redis.call('zrange', k, 0, -1, 'withscores')
  elseif t == 'set' then v = redis.call('smembers', k)
  elseif t == 'list' then v = redis.call('lrange', k, 0, -1) end
  out[i] = {t, redis.call('pttl', k), v}
end
return out`)

// Do implements backend.KeySpace (the top of this file).
func (b *Backend) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	name := strings.ToLower(string(args[0]))
	switch name {
	case "incr", "incrby", "decr", "decrby":
		return b.counter(ctx, db, keys[0], name, args)
	case "flushdb", "flushall":
		return b.flush(ctx, db, args)
	case "lockproxy":
		// Fences are the backend's: a lock only the legacy Redis holds
		// (taken there by a client not yet moved) has none (holder.go).
		return b.lockproxyLock(ctx, db, keys, args)
	}
	if c := keycmd.Lookup(args[0]); c != nil && c.Write {
		return b.write(ctx, db, keys, args)
	}
	if len(keys) > 0 {
		switch n, err := b.inner.Exists(ctx, db, keys); {
		case err != nil:
			return backend.Value{}, err
		case n == 0:
			v, verr, _, err := b.legacyDo(ctx, db, keys, args)
			if err != nil {
				return backend.Value{}, b.failed(err)
			}
			return v, verr
		}
	}
	return b.inner.Do(ctx, db, keys, args)
}

// write runs a command that writes on both sides (the top of this file).
func (b *Backend) write(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	lv, lerr, live, err := b.legacyDo(ctx, db, keys, args)
	if err != nil {
		return backend.Value{}, b.failed(err)
	}
	liveInner := int64(0)
	if live {
		if liveInner, err = b.inner.Exists(ctx, db, keys); err != nil {
			return backend.Value{}, err
		}
	}
	v, err := b.inner.Do(ctx, db, keys, args)
	if err != nil && !isReply(err) {
		return v, err
	}
	if live && liveInner == 0 {
		return lv, lerr
	}
	return v, err
}

// flush is FLUSHDB or FLUSHALL: the legacy Redis, then the inner backend.
func (b *Backend) flush(ctx context.Context, db int, args [][]byte) (backend.Value, error) {
	if err := model.CheckFlush(args); err != nil {
		return backend.Value{}, err
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	if err := b.client(db).Do(lctx, anys(args)...).Err(); err != nil {
		return backend.Value{}, b.failed(err)
	}
	return b.inner.Do(ctx, db, nil, args)
}

// legacyDo runs args on the legacy Redis after a copy of keys, in one
// MULTI, and answers the command's reply (or the error it answered) and
// whether one of keys was live before it. err is a failure of the legacy
// Redis.
func (b *Backend) legacyDo(ctx context.Context, db int, keys []string, args [][]byte) (v backend.Value, verr error, live bool, err error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	pipe := b.client(db).TxPipeline()
	snap := snapshotScript.Eval(lctx, pipe, keys)
	cmd := pipe.Do(lctx, anys(args)...)
	_, err = pipe.Exec(lctx)
	var re redis.Error
	if err != nil && !errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return v, nil, false, err
	}
	if snap.Err() != nil {
		return v, nil, false, snap.Err()
	}
	view := &model.View{Now: time.Now().UnixMilli(), Spaces: []*model.Space{{}}}
	live, known := loadSnapshot(ctx, view, db, keys, snap.Val())
	if known {
		v, verr = view.Do(ctx, db, keys, args)
		return v, verr, live, nil
	}
	switch x, cerr := cmd.Result(); {
	case errors.Is(cerr, redis.Nil):
		return backend.NilValue, nil, live, nil
	case errors.As(cerr, &re):
		return v, backend.Reply(re.Error()), live, nil
	case cerr != nil:
		return v, nil, false, cerr
	default:
		return toValue(x), nil, live, nil
	}
}

// loadSnapshot writes snapshotScript's copy of keys (reply) into view's
// database db: live reports whether one of them was there, known whether
// each was of a type the model holds (or absent).
func loadSnapshot(ctx context.Context, view *model.View, db int, keys []string, reply any) (live, known bool) {
	all, _ := reply.([]any)
	if len(all) != len(keys) {
		return false, false
	}
	known = true
	for i, k := range keys {
		kv, _ := all[i].([]any)
		if len(kv) != 3 {
			return live, false
		}
		typ, _ := kv[0].(string)
		pttl, _ := kv[1].(int64)
		vals, _ := kv[2].([]any)
		if typ == "none" {
			continue
		}
		live = true
		cmd := map[string]string{"hash": "hset", "set": "sadd", "list": "rpush", "zset": "zadd"}[typ]
		switch {
		case typ == "string" && len(vals) == 1:
			s, _ := vals[0].(string)
			view.Spaces[0].Put(db, k, model.Entry{Token: []byte(s)})
		case cmd != "" && len(vals) > 0:
			args := [][]byte{[]byte(cmd), []byte(k)}
			strs := make([]string, len(vals))
			for j, x := range vals {
				strs[j], _ = x.(string)
			}
			for j := 0; j < len(strs); j++ {
				if typ == "zset" && j+1 < len(strs) { // member, score: ZADD takes score, member
					args = append(args, []byte(strs[j+1]), []byte(strs[j]))
					j++
					continue
				}
				args = append(args, []byte(strs[j]))
			}
			if _, err := view.Do(ctx, db, []string{k}, args); err != nil {
				return live, false
			}
		default:
			known = false
			continue
		}
		if pttl > 0 {
			view.Expire(ctx, db, k, backend.Expiry{TTL: time.Duration(pttl) * time.Millisecond}, backend.ExpireAlways)
		}
	}
	return live, known
}

// anys is args as go-redis's Do takes them.
func anys(args [][]byte) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}
