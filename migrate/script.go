package migrate

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	// keycmd's ScriptCaller runs a script's redis.call against the sandbox
	// with the proxy's own command table (as quorum and memory do): the
	// only way to learn what a script does without a table of SHA1s.
	"github.com/lockproxy/lockproxy/keycmd"
)

// How scripts are told apart and run on both sides.
//
// Scripts are recognised by what they do, never by a table of SHA1s.
// Each call first runs the script in process on an empty key space (a
// sandbox; keycmd.ScriptCaller and luascripts.Runner run it): a script
// that creates a key from nothing is an acquire, one that creates none is
// not (release, extend, reacquire). This runs per call rather than once
// per SHA1 because what a script does depends on its ARGV (lockproxy's own
// MULTI/EXEC script carries its commands in ARGV and declares no KEYS);
// it costs one in-process run, microseconds next to the legacy round
// trip. The keys the sandbox run names, after the declared KEYS, are the
// script's watched keys.
//
// The release scripts of luascripts' catalogue (recognised by their whole
// text, whitespace aside: the Redis docs' and redis-py's) skip all this:
// they read their key and delete it when it holds the token, answering
// how many they deleted, so they run on both sides as they are and the
// side that held the lock answers. Every unlock saves the watch.
//
// On the legacy Redis a script runs atomically with its watch: MULTI, MGET
// of the watched keys, EVALSHA (EVAL after NOSCRIPT), the same MGET, EXEC,
// which gives the exact before and after values of its keys there.
//
//   - An acquiring script that wrote none of its keys on the legacy Redis
//     was refused there: the legacy reply is returned, the inner backend is
//     not touched. Otherwise it runs on the inner backend, which granted
//     when every key the legacy run wrote now holds there the value the
//     legacy run wrote (tokens are per-client random: another client's lock
//     cannot look like this one). Both granted: the inner backend's reply.
//     The inner backend refused: the keys this run created on the legacy
//     Redis are removed again (owner checked), and the client gets the
//     inner backend's reply.
//   - Any other script runs on both. The reply is the inner backend's,
//     except when none of the watched keys was live there before and one
//     was live on the legacy Redis: then the lock was taken directly on
//     the legacy Redis and the legacy reply is the one the library expects.

// plan is what a script does from an empty key space: the keys it would
// create (with the value it writes: a lock's token, one of its ARGV) and
// every key of its database it names, its declared KEYS first.
type plan struct {
	creates map[string][]byte
	watch   []string
}

// classify runs s once on an empty sandbox. It runs per call, not per
// SHA1: what a script does depends on its ARGV (lockproxy's own MULTI/EXEC
// script takes its commands as ARGV and declares no KEYS). A script that
// fails on an empty key space still tells what it did before failing.
func (b *Backend) classify(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) plan {
	sb := newSandbox(db)
	for _, k := range keys {
		sb.name(db, k) // declared keys are watched even when the run never names them
	}
	b.cfg.Runner.Run(ctx, s, keys, args, &keycmd.ScriptCaller{KS: sb, DB: db, RO: ro})
	p := plan{watch: sb.touched}
	if !ro {
		p.creates = sb.created()
	}
	return p
}

// legacyRun is a script's run on the legacy Redis: its reply (or the
// error it raised) and the values of the watched keys just before and
// just after it, read in the same MULTI/EXEC (nil: absent).
type legacyRun struct {
	reply         backend.Value
	replyErr      error // a *backend.ReplyError the script raised
	before, after []*string
}

// legacyEval runs s on the legacy Redis between two MGETs of watch, in one
// MULTI/EXEC, with EVALSHA, or EVAL when the legacy Redis answers
// NOSCRIPT. An error is a failure of the legacy Redis (no reply).
func (b *Backend) legacyEval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool, watch []string) (legacyRun, error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	c := b.client(db)
	for _, useEval := range []bool{false, true} {
		var pre, post *redis.SliceCmd
		pipe := c.TxPipeline()
		if len(watch) > 0 {
			pre = pipe.MGet(lctx, watch...)
		}
		var ev *redis.Cmd
		switch {
		case useEval && ro:
			ev = pipe.EvalRO(lctx, s.Src, keys, argv...)
		case useEval:
			ev = pipe.Eval(lctx, s.Src, keys, argv...)
		case ro:
			ev = pipe.EvalShaRO(lctx, s.SHA1, keys, argv...)
		default:
			ev = pipe.EvalSha(lctx, s.SHA1, keys, argv...)
		}
		if len(watch) > 0 {
			post = pipe.MGet(lctx, watch...)
		}
		_, err := pipe.Exec(lctx)
		var re redis.Error
		if err != nil && !errors.As(err, &re) && !errors.Is(err, redis.Nil) {
			return legacyRun{}, err
		}
		if !useEval && redis.HasErrorPrefix(ev.Err(), "NOSCRIPT") {
			continue
		}
		var r legacyRun
		if pre != nil {
			if pre.Err() != nil || post.Err() != nil {
				return legacyRun{}, errors.Join(pre.Err(), post.Err())
			}
			r.before, r.after = strs(pre.Val()), strs(post.Val())
		}
		switch v, err := ev.Result(); {
		case errors.Is(err, redis.Nil):
		case errors.As(err, &re):
			r.replyErr = backend.Reply(re.Error())
		case err != nil:
			return legacyRun{}, err
		default:
			r.reply = toValue(v)
		}
		return r, nil
	}
	return legacyRun{}, errors.New("migrate: NOSCRIPT after EVAL") // unreachable: EVAL never answers NOSCRIPT
}

// result is the legacy run's reply as Eval returns it.
func (r legacyRun) result() (backend.Value, error) {
	if r.replyErr != nil {
		return backend.Value{}, r.replyErr
	}
	return r.reply, nil
}

// Eval implements backend.Backend (package doc, "Scripts"): a script that
// creates keys from an empty key space is an acquire, granted only when
// both sides grant; any other script runs on both sides.
func (b *Backend) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	if !ro && b.releases.Is(s) {
		return b.evalRelease(ctx, db, s, keys, args)
	}
	if err := b.cfg.Runner.StringsRefusal(s); err != nil {
		return backend.Value{}, err // string values only, for now (Do)
	}
	p := b.classify(ctx, db, s, keys, args, ro)
	lr, err := b.legacyEval(ctx, db, s, keys, args, ro, p.watch)
	if err != nil {
		if len(p.creates) > 0 { // the script may have run
			b.undoLegacy(ctx, db, pairsOf(p.creates))
		}
		return backend.Value{}, b.failed(err)
	}
	if len(p.creates) > 0 {
		return b.evalAcquire(ctx, db, s, keys, args, p, lr)
	}
	// A lock the inner backend does not have, taken directly on the
	// legacy Redis, is released or extended there: its reply is the one
	// the client's library expects. Asked only when the legacy Redis had
	// one of the keys (one read less per release of a lock it lacked).
	legacyLive := slices.ContainsFunc(lr.before, func(s *string) bool { return s != nil })
	liveInner := int64(0)
	if legacyLive {
		if liveInner, err = b.inner.Exists(ctx, db, p.watch); err != nil {
			return backend.Value{}, err
		}
	}
	v, err := b.inner.Eval(ctx, db, s, keys, args, ro)
	if err != nil && !isReply(err) {
		return v, err
	}
	if legacyLive && liveInner == 0 {
		return lr.result()
	}
	return v, err
}

// evalAcquire finishes an acquiring script once it ran on the legacy
// Redis (lr). The script holds a key on a side when the key holds there
// the value the script writes when it creates it (p.creates: its token).
func (b *Backend) evalAcquire(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, p plan, lr legacyRun) (backend.Value, error) {
	var held, created []backend.KV // keys the legacy Redis now holds with the token; those this run brought into being
	for i, k := range p.watch {
		tok, ok := p.creates[k]
		if !ok || i >= len(lr.after) || lr.after[i] == nil || *lr.after[i] != string(tok) {
			continue
		}
		held = append(held, backend.KV{Key: k, Value: tok})
		if lr.before[i] == nil {
			created = append(created, backend.KV{Key: k, Value: tok})
		}
	}
	if len(held) == 0 { // refused on the legacy Redis: its own reply
		b.st.refusedLegacy.Add(1)
		return lr.result()
	}
	v, err := b.inner.Eval(ctx, db, s, keys, args, false)
	if err != nil && !isReply(err) {
		b.undoLegacy(ctx, db, created)
		return v, err
	}
	// The inner backend granted when every key the legacy Redis holds for
	// the script holds the same token there: tokens are per-client random,
	// so no other client's lock can look like this one.
	var mine []backend.KV
	granted := true
	for _, kv := range held {
		tok, ok, gerr := b.inner.Get(ctx, db, kv.Key)
		if gerr != nil {
			b.undoLegacy(ctx, db, created)
			return backend.Value{}, gerr
		}
		if ok && bytes.Equal(tok, kv.Value) {
			mine = append(mine, kv)
		} else {
			granted = false
		}
	}
	if !granted {
		b.st.refusedInner.Add(1)
		b.undoLegacy(ctx, db, created)
		b.undoInner(ctx, db, mine)
	}
	return v, err
}

// evalRelease runs a catalogued release script (luascripts.IsRelease:
// known by its whole text to read its key and delete it when it holds the
// token, answering how many it deleted) on both sides without the watch:
// the side that held the lock answers. It spares every unlock the MULTI,
// two MGETs and a read of the inner backend.
func (b *Backend) evalRelease(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte) (backend.Value, error) {
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	c := b.client(db)
	lv, err := c.EvalSha(lctx, s.SHA1, keys, argv...).Result()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		lv, err = c.Eval(lctx, s.Src, keys, argv...).Result()
	}
	var re redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &re) {
		return backend.Value{}, b.failed(err)
	}
	v, ierr := b.inner.Eval(ctx, db, s, keys, args, false)
	if ierr != nil {
		return v, ierr
	}
	if n, ok := lv.(int64); ok && n > 0 && err == nil && v.Kind == backend.KindInt && v.Int == 0 {
		return backend.Int(n), nil // held only on the legacy Redis
	}
	return v, nil
}

// isReply reports whether err is a reply for the client (a script's
// error), not a failure.
func isReply(err error) bool {
	var re *backend.ReplyError
	return errors.As(err, &re)
}

// pairsOf lists m as KVs.
func pairsOf(m map[string][]byte) []backend.KV {
	out := make([]backend.KV, 0, len(m))
	for k, v := range m {
		out = append(out, backend.KV{Key: k, Value: v})
	}
	return out
}

// strs reads an MGET reply.
func strs(v []any) []*string {
	out := make([]*string, len(v))
	for i, x := range v {
		if s, ok := x.(string); ok {
			out[i] = &s
		}
	}
	return out
}

// toValue converts a go-redis reply (RESP2) to a Value. RESP2 does not
// tell a status reply from a bulk string once go-redis has read it: a
// script's status reply from the legacy Redis comes back as a bulk string.
func toValue(v any) backend.Value {
	switch x := v.(type) {
	case nil:
		return backend.NilValue
	case string:
		return backend.BulkString(x)
	case int64:
		return backend.Int(x)
	case []any:
		out := make([]backend.Value, len(x))
		for i, e := range x {
			out[i] = toValue(e)
		}
		return backend.Array(out...)
	case error:
		return backend.ErrorValue(x.Error())
	}
	return backend.NilValue
}
