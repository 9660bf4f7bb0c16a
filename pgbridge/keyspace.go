package pgbridge

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
)

// The backend.KeySpace and Eval of a Backend. Writes run through write
// (engine.go); reads take the state from this process's leases or from the
// lease table. A write that meets a key held beyond reach goes to the
// strategy (strategy.route): the advisory strategy routes it to the
// instance holding it (routeReq), the lease strategy answers TRYAGAIN.

// wallNow is this process's wall clock: the clock of its leases' deadlines
// (their expiry timers, the deadlines SET computes, the lease rows).
func wallNow() time.Time {
	return time.Now().Add(time.Duration(clockSkew.Load()) * time.Millisecond)
}

// nowMS is wallNow in Unix ms.
func nowMS() int64 { return wallNow().UnixMilli() }

// clockSkew is set only by tests (export_test.go): it shifts wallNow, as
// on an instance whose clock differs from PostgreSQL's, and stays 0 in a
// running lockproxy.
var clockSkew atomic.Int64

// untilMS is how long from now (wallNow) until at, Unix ms. It saturates:
// a deadline centuries away (SET … EX 10000000000 is accepted) must not
// wrap to a negative duration, which made the expiry timer fire at once,
// find nothing due and re-arm itself in a loop.
func untilMS(at int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	switch left := at - nowMS(); {
	case left > most:
		return math.MaxInt64
	case left < -most:
		return math.MinInt64
	default:
		return time.Duration(left) * time.Millisecond
	}
}

// Set implements backend.KeySpace.
func (b *Backend) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if err := checkDB(db); err != nil {
		return backend.SetResult{}, err
	}
	k := dbKey{db, key}
	if o.Cond == backend.IfAbsent && !o.Get {
		if res, done, err := b.store.acquire(ctx, k, token, o); done {
			return res, err
		}
	}
	var res backend.SetResult
	err := b.write(ctx, []dbKey{k}, func(ks backend.KeySpace) (err error) {
		res, err = ks.Set(ctx, db, key, token, o)
		return err
	})
	var h *heldError
	if errors.As(err, &h) {
		if o.Cond == backend.IfAbsent && !o.Get {
			return backend.SetResult{}, nil // held: live somewhere
		}
		rep, err := b.store.route(ctx, h, &routeReq{Op: "set", DB: db, Key: []byte(key), Token: token, Opts: o})
		if err != nil {
			return backend.SetResult{}, err
		}
		return rep.Set, rep.error()
	}
	return res, err
}

// Get implements backend.KeySpace.
func (b *Backend) Get(ctx context.Context, db int, key string) ([]byte, bool, error) {
	if err := checkDB(db); err != nil {
		return nil, false, err
	}
	s, err := b.store.read(ctx, dbKey{db, key})
	if err != nil {
		return nil, false, tryAgain(err)
	}
	switch {
	case !s.live(nowMS()):
		return nil, false, nil
	case s.kind != model.KindString:
		return nil, false, backend.ErrWrongType
	}
	return s.token, true, nil
}

// PTTL implements backend.KeySpace.
func (b *Backend) PTTL(ctx context.Context, db int, key string) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	s, err := b.store.read(ctx, dbKey{db, key})
	if err != nil {
		return 0, tryAgain(err)
	}
	now := nowMS()
	switch {
	case !s.live(now):
		return -2, nil
	case s.deadline == 0:
		return -1, nil
	}
	return s.deadline - now, nil
}

// Exists implements backend.KeySpace. Each key is read on its own: a
// multi-key EXISTS is not one snapshot across instances.
func (b *Backend) Exists(ctx context.Context, db int, keys []string) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		s, err := b.store.read(ctx, dbKey{db, k})
		if err != nil {
			return 0, tryAgain(err)
		}
		if s.live(nowMS()) {
			n++
		}
	}
	return n, nil
}

// writeKey runs op on one key; when another instance holds the key, req
// goes to that instance and its answer is taken with reply.
func writeKey[T any](b *Backend, ctx context.Context, k dbKey, op func(ks backend.KeySpace) (T, error),
	req *routeReq, reply func(*routeReply) T) (T, error) {
	var v T
	err := b.write(ctx, []dbKey{k}, func(ks backend.KeySpace) (err error) {
		v, err = op(ks)
		return err
	})
	var h *heldError
	if !errors.As(err, &h) {
		return v, err
	}
	req.DB, req.Key = k.db, []byte(k.key)
	rep, err := b.store.route(ctx, h, req)
	if err != nil {
		return v, err
	}
	return reply(rep), rep.error()
}

func replyOK(r *routeReply) bool { return r.OK }

// Del implements backend.KeySpace. Each key is deleted on its own (a
// multi-key DEL is not atomic across its keys; no lock library relies on
// that).
func (b *Backend) Del(ctx context.Context, db int, keys []string) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var n int64
	for _, key := range keys {
		d, err := writeKey(b, ctx, dbKey{db, key}, func(ks backend.KeySpace) (int64, error) {
			return ks.Del(ctx, db, []string{key})
		}, &routeReq{Op: "del"}, func(r *routeReply) int64 { return r.N })
		if err != nil {
			return 0, err
		}
		n += d
	}
	return n, nil
}

// DelIf implements backend.KeySpace.
func (b *Backend) DelIf(ctx context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	return writeKey(b, ctx, dbKey{db, key}, func(ks backend.KeySpace) (bool, error) {
		return ks.DelIf(ctx, db, key, cond, match)
	}, &routeReq{Op: "delif", Cond: cond, Match: match}, replyOK)
}

// Expire implements backend.KeySpace.
func (b *Backend) Expire(ctx context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	return writeKey(b, ctx, dbKey{db, key}, func(ks backend.KeySpace) (bool, error) {
		return ks.Expire(ctx, db, key, e, cond)
	}, &routeReq{Op: "expire", Expiry: e, ECond: cond}, replyOK)
}

// Persist implements backend.KeySpace.
func (b *Backend) Persist(ctx context.Context, db int, key string) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	return writeKey(b, ctx, dbKey{db, key}, func(ks backend.KeySpace) (bool, error) {
		return ks.Persist(ctx, db, key)
	}, &routeReq{Op: "persist"}, replyOK)
}

// MSet implements backend.KeySpace. MSETNX over a key held elsewhere
// answers 0; MSET over such a key is not routed (TRYAGAIN).
func (b *Backend) MSet(ctx context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	keys := make([]dbKey, len(pairs))
	for i, p := range pairs {
		keys[i] = dbKey{db, p.Key}
	}
	var ok bool
	err := b.write(ctx, keys, func(ks backend.KeySpace) (err error) {
		ok, err = ks.MSet(ctx, db, pairs, nx)
		return err
	})
	var h *heldError
	if errors.As(err, &h) {
		if nx {
			return false, nil
		}
		return false, heldReply(h)
	}
	return ok, err
}

// DBSize implements backend.KeySpace: the live leases of db in the table.
func (b *Backend) DBSize(ctx context.Context, db int) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	n, err := b.dbSize(ctx, db, nil)
	if err != nil {
		return 0, tryAgain(err)
	}
	return n, nil
}

// dbSize counts the live keys of db in the lease table, leaving out the
// keys of except.
func (b *Backend) dbSize(ctx context.Context, db int, except [][]byte) (int64, error) {
	if except == nil {
		except = [][]byte{}
	}
	var n int64
	err := b.retryRead(ctx, func() (err error) {
		n, err = b.store.countLive(ctx, db, except)
		return err
	})
	return n, err
}

// Eval implements backend.Backend: the script runs on the round's model space
// over its prepared keys, atomically; a key it touches without declaring
// it in KEYS makes it run again with that key prepared.
func (b *Backend) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	if err := checkDB(db); err != nil {
		return backend.Value{}, err
	}
	dk := make([]dbKey, len(keys))
	for i, k := range keys {
		dk[i] = dbKey{db, k}
	}
	if v, done, err := b.store.evalFast(ctx, s, dk, args, ro); done {
		return v, err
	}
	var v backend.Value
	var c *keycmd.ScriptCaller
	err := b.write(ctx, dk, func(ks backend.KeySpace) (err error) {
		c = &keycmd.ScriptCaller{KS: partial{ks}, DB: db, RO: ro, Hub: b.hub} // a round that reruns starts over
		v, err = b.runner.Run(ctx, s, keys, args, c)
		return err
	})
	if err == nil && len(c.Published) > 0 {
		// Committed: its messages go out now (a script that fails after
		// publishing keeps its changes, as in Redis, but its messages are
		// not sent: the error may be the commit's).
		err = b.published(ctx, c.Published)
	}
	var h *heldError
	if errors.As(err, &h) {
		rep, err := b.store.route(ctx, h, &routeReq{Op: "eval", DB: db, Script: s, Keys: byteKeys(keys), Args: args, RO: ro})
		if err != nil {
			return backend.Value{}, err
		}
		return rep.V, rep.error()
	}
	return v, err
}

// Do implements backend.KeySpace: a command of keycmd's typed table (the
// value types, counters, TYPE, RENAME …) runs on the model over its keys
// like any operation (write), and a key held by another instance sends it
// there. The commands on the key space as a whole (KEYS, SCAN, RANDOMKEY,
// FLUSHDB, FLUSHALL) read or change the lease table (whole.go).
func (b *Backend) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	if err := checkDB(db); err != nil {
		return backend.Value{}, err
	}
	name := strings.ToLower(string(args[0]))
	if keycmd.WholeKeySpace(name) {
		return b.whole(ctx, db, args)
	}
	dk := make([]dbKey, len(keys))
	for i, k := range keys {
		dk[i] = dbKey{db, k}
	}
	var v backend.Value
	err := b.write(ctx, dk, func(ks backend.KeySpace) (err error) {
		v, err = ks.Do(ctx, db, keys, args)
		return err
	})
	var h *heldError
	if errors.As(err, &h) {
		if v, ok, err := b.sqlHolder(ctx, h, args); ok {
			return v, err
		}
		rep, err := b.store.route(ctx, h, &routeReq{Op: "do", DB: db, Keys: byteKeys(keys), Args: args})
		if err != nil {
			return backend.Value{}, err
		}
		return rep.V, rep.error()
	}
	return v, err
}

// partial is the KeySpace a script runs on: the round's model View, which
// holds the script's keys only, so the commands on the whole key space
// (which would answer from those keys alone) are refused.
type partial struct{ backend.KeySpace }

func (p partial) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	if name := strings.ToLower(string(args[0])); keycmd.WholeKeySpace(name) {
		return backend.Value{}, backend.Reply(keycmd.NotWholeMsg(name, "postgres backend"))
	}
	return p.KeySpace.Do(ctx, db, keys, args)
}

func byteKeys(keys []string) [][]byte {
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = []byte(k)
	}
	return bk
}
