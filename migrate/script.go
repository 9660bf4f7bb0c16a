package migrate

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

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
// sandbox: the lock model, sandbox.go): a script that creates something
// from nothing — a string key with its token, a hash field (Redisson's
// lock), a sorted-set or set member (a semaphore's permit, Symfony's
// token) — is an acquire, one that creates nothing is not (release,
// extend, reacquire, refresh). This runs per call rather than once per
// SHA1 because what a script does depends on its ARGV (lockproxy's own
// MULTI/EXEC script carries its commands in ARGV and declares no KEYS); it
// costs one in-process run, microseconds next to the legacy round trip.
// The keys the sandbox run names, after the declared KEYS, are the
// script's watched keys.
//
// The release scripts of luascripts' catalogue (recognised by their whole
// text, whitespace aside: the Redis docs' and redis-py's) skip all this:
// they read their key and delete it when it holds the token, answering
// how many they deleted, so they run on both sides as they are and the
// side that held the lock answers. Every unlock saves the watch.
//
// On the legacy Redis a script runs atomically with its watch: MULTI,
// EXISTS of the watched keys, the created elements' values and their
// keys' PTTLs (elements.go), EVALSHA (EVAL after NOSCRIPT), the elements
// again, EXEC.
//
//   - An acquiring script (one that creates something of the client's:
//     classify) took on a side the elements that hold what it writes
//     after the run (element.took): a string key its token, a field or
//     member that was not there, or changed (a reentrant lock's HINCRBY,
//     a semaphore's new time). Nothing taken on the legacy Redis, and the
//     client holding nothing there: refused, the legacy reply, the inner
//     backend not asked. Otherwise it runs on the inner backend between
//     two reads of its elements there (evalAcquire): held there too,
//     granted, the inner backend's reply; if not, what the run took is
//     put back on both sides, element by element and while each still
//     holds what the run left (another semaphore holder who joined
//     meanwhile keeps its member), with its key's expiry; the client gets
//     the inner backend's reply.
//   - Any other script runs on both. The reply is the inner backend's,
//     except when none of the watched keys was live there before and one
//     was live on the legacy Redis: then the lock was taken directly on
//     the legacy Redis and the legacy reply is the one the library expects.

// plan is what a script does from an empty key space: the elements it
// would create (a lock's key with its token, a hash field, a sorted-set or
// set member: sandbox.go) and every key of its database it names, its
// declared KEYS first.
type plan struct {
	creates []element
	mine    []bool // per element of creates: the client's own, made from its ARGV (classify)
	watch   []string
}

// classify runs s on an empty sandbox. It runs per call, not per SHA1:
// what a script does depends on its ARGV (lockproxy's own MULTI/EXEC
// script takes its commands as ARGV and declares no KEYS). A script that
// fails on an empty key space still tells what it did before failing.
//
// Only what comes from the caller's ARGV makes an acquire: a token, a
// client's field or member, a key named after the client (plan.mine). What
// a script writes whatever its ARGV — Redisson's unlock latch (0 or 1), its
// read-write lock's "mode" field, Symfony's "__write__" member — is no
// client's, so a second run with every ARGV changed (nextArgs) tells the
// two apart: an element that run creates too is not the client's; nor is
// a counter (INCR, INCRBY … by an ARGV: a semaphore's permits). A script
// that creates none of the client's is no acquire; an acquire's other
// elements are watched and put back with its own.
func (b *Backend) classify(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) plan {
	called := map[string]bool{}   // the commands the runs sent, by name
	counters := map[string]bool{} // the keys they counted on (INCR …): no lock's token
	run := func(args [][]byte) *sandbox {
		sb := newSandbox(db)
		for _, k := range keys {
			sb.name(k) // declared keys are watched even when the run never names them
		}
		c := &namingCaller{ScriptCaller: &keycmd.ScriptCaller{KS: sb, DB: db, RO: ro, Hub: sandboxHub{}}, names: called, counters: counters}
		b.cfg.Runner.Run(ctx, s, keys, args, c)
		c.names, c.counters = nil, nil
		return sb
	}
	sb := run(args)
	p := plan{watch: sb.touched}
	if ro {
		return p
	}
	created := sb.created(ctx)
	if len(created) == 0 {
		return p
	}
	literal := run(nextArgs(args, called)).created(ctx)
	mine := make([]bool, len(created))
	for i, e := range created {
		mine[i] = !slices.Contains(literal, e) && !(e.kind == elemString && counters[e.key])
	}
	if slices.Contains(mine, true) {
		p.creates, p.mine = created, mine
	}
	return p
}

// nextArgs is args with each one changed and kind kept: a number one digit
// longer (a TTL, a count or a time stays a number), anything else one byte
// longer, but for the names of commands the first run sent (called):
// Redisson passes PUBLISH in ARGV.
func nextArgs(args [][]byte, called map[string]bool) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		if called[strings.ToLower(string(a))] {
			out[i] = a
		} else if _, err := strconv.ParseFloat(string(a), 64); err == nil && len(a) > 0 {
			out[i] = append(bytes.Clone(a), '7')
		} else {
			out[i] = append(bytes.Clone(a), '~')
		}
	}
	return out
}

// namingCaller is the sandbox's Caller, noting the name of each command a
// run sends, and the keys of its counters (until names is nil).
type namingCaller struct {
	*keycmd.ScriptCaller
	names, counters map[string]bool
}

func (c *namingCaller) Call(ctx context.Context, args [][]byte) (backend.Value, error) {
	if c.names != nil && len(args) > 0 {
		name := strings.ToLower(string(args[0]))
		c.names[name] = true
		switch name {
		case "incr", "incrby", "decr", "decrby", "incrbyfloat":
			if len(args) > 1 {
				c.counters[string(args[1])] = true
			}
		}
	}
	return c.ScriptCaller.Call(ctx, args)
}

// legacyRun is a script's run on the legacy Redis: its reply (or the
// error it raised), whether one of the watched keys was live just before
// it, and the plan's elements just before and just after it (elemState),
// all read in the same MULTI/EXEC.
type legacyRun struct {
	reply         backend.Value
	replyErr      error // a *backend.ReplyError the script raised
	live          bool
	before, after []elemState
	at            time.Time // when the MULTI was sent
}

// legacyEval runs s on the legacy Redis in one MULTI/EXEC: EXISTS of the
// watched keys, the elements of p before, EVALSHA (EVAL when the legacy
// Redis answers NOSCRIPT), the elements after. An error is a failure of
// the legacy Redis (no reply).
func (b *Backend) legacyEval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool, p plan) (legacyRun, error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	argv := anys(args)
	ekeys, eargs := elemsArgs(p.creates)
	c := b.client(db)
	for _, useEval := range []bool{false, true} {
		var live *redis.IntCmd
		var pre, post *redis.Cmd
		pipe := c.TxPipeline()
		if len(p.watch) > 0 {
			live = pipe.Exists(lctx, p.watch...)
		}
		if len(ekeys) > 0 {
			pre = elemsScript.Eval(lctx, pipe, ekeys, eargs...)
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
		if len(ekeys) > 0 {
			post = elemsScript.Eval(lctx, pipe, ekeys, eargs...)
		}
		r := legacyRun{at: time.Now()}
		_, err := pipe.Exec(lctx)
		var re redis.Error
		if err != nil && !errors.As(err, &re) && !errors.Is(err, redis.Nil) {
			return legacyRun{}, err
		}
		if !useEval && redis.HasErrorPrefix(ev.Err(), "NOSCRIPT") {
			continue
		}
		if live != nil {
			if live.Err() != nil {
				return legacyRun{}, live.Err()
			}
			r.live = live.Val() > 0
		}
		if pre != nil {
			var ok1, ok2 bool
			r.before, ok1 = readElems(pre.Val(), len(ekeys))
			r.after, ok2 = readElems(post.Val(), len(ekeys))
			if !ok1 || !ok2 {
				return legacyRun{}, errors.Join(errors.New("migrate: unreadable watch of the script's elements"), pre.Err(), post.Err())
			}
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
// creates something from an empty key space is an acquire, granted only
// when both sides grant; any other script runs on both sides.
func (b *Backend) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	if s.Function != "" {
		// the legacy Redis does not have this instance's libraries
		return backend.Value{}, backend.Reply("ERR lockproxy does not run functions (FCALL) while it migrates from a legacy Redis")
	}
	defer b.evals.start()() // the bridge holds its messages meanwhile (pubsub.go)
	if !ro && b.releases.Is(s) {
		return b.evalRelease(ctx, db, s, keys, args)
	}
	if err, _ := b.cfg.Runner.Refusal(s); err != nil {
		return backend.Value{}, err // a command lockproxy does not serve: nowhere, not on the legacy Redis either
	}
	p := b.classify(ctx, db, s, keys, args, ro)
	lr, err := b.legacyEval(ctx, db, s, keys, args, ro, p)
	if err != nil {
		// The script may have run: a token of this call is removed; a
		// field or member is left to its key's TTL, as the state before
		// is unknown (a reentrant lock's field was there already).
		b.undoLegacy(ctx, db, stringElems(p.creates, p.mine))
		return backend.Value{}, b.failed(err)
	}
	if len(p.creates) > 0 {
		return b.evalAcquire(ctx, db, s, keys, args, p, lr)
	}
	// A lock the inner backend does not have, taken directly on the
	// legacy Redis, is released or extended there: its reply is the one
	// the client's library expects. Asked only when the legacy Redis had
	// one of the keys (one read less per release of a lock it lacked).
	liveInner := int64(0)
	if lr.live {
		if liveInner, err = b.inner.Exists(ctx, db, p.watch); err != nil {
			return backend.Value{}, err
		}
	}
	v, err := b.inner.Eval(ctx, db, s, keys, args, ro)
	if err != nil && !isReply(err) {
		return v, err
	}
	if lr.live && liveInner == 0 {
		return lr.result()
	}
	return v, err
}

// evalAcquire finishes an acquiring script once it ran on the legacy
// Redis (lr). A side took the elements that hold what the run writes after
// it (element.took).
//
//   - The legacy Redis took none, and holds none of the client's own
//     elements (plan.mine): refused there, its reply; the inner backend is
//     not asked. (Asking it anyway, to repeat what a refusal does besides
//     refusing, let every refused retry hold the inner backend for a
//     moment, and under contention the legacy Redis's winner kept meeting
//     those moments: bsm/redislock's 8 workers made 3 grants in 10 s.)
//   - Otherwise (taken, or held already: a re-acquire that changes only a
//     TTL) it runs on the inner backend between two reads of its elements
//     there, and is granted when the inner backend holds each of the
//     client's own elements that the legacy Redis holds after the run (a
//     promotion rewrites its token unchanged and takes Symfony's
//     "__write__"); if not, what the run took is put back on both sides,
//     the other elements with the client's.
func (b *Backend) evalAcquire(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, p plan, lr legacyRun) (backend.Value, error) {
	took := tookOf(p.creates, lr.before, lr.after)
	held := func(i int) bool { return p.mine[i] && p.creates[i].holds(lr.after[i]) }
	holds := false
	for i := range p.creates {
		holds = holds || held(i)
	}
	if len(took) == 0 && !holds {
		b.st.refusedLegacy.Add(1)
		return lr.result()
	}
	before, err := b.innerElems(ctx, db, p.creates)
	if err != nil {
		b.undoLegacyElems(ctx, db, p.creates, took, lr)
		return backend.Value{}, err
	}
	v, err := b.inner.Eval(ctx, db, s, keys, args, false)
	if err != nil && !isReply(err) {
		b.undoLegacyElems(ctx, db, p.creates, took, lr)
		return v, err
	}
	after, aerr := b.innerElems(ctx, db, p.creates)
	if aerr != nil {
		b.undoLegacyElems(ctx, db, p.creates, took, lr)
		return backend.Value{}, aerr
	}
	// Tokens, fields and members are per client, so no other client's
	// lock can look like this one there.
	for i, e := range p.creates {
		if held(i) && !e.holds(after[i]) {
			b.st.refusedInner.Add(1)
			b.undoLegacyElems(ctx, db, p.creates, took, lr)
			b.undoInnerElems(ctx, db, p.creates, tookOf(p.creates, before, after), before, after)
			break
		}
	}
	return v, err
}

// tookOf lists the indexes of the elements a run took, from their states
// before and after it.
func tookOf(elems []element, before, after []elemState) []int {
	var took []int
	for i, e := range elems {
		if e.took(before[i], after[i]) {
			took = append(took, i)
		}
	}
	return took
}

// evalRelease runs a catalogued release script (luascripts.IsRelease:
// known by its whole text to read its key and delete it when it holds the
// token, answering how many it deleted) on both sides without the watch:
// the side that held the lock answers. It spares every unlock the MULTI,
// two MGETs and a read of the inner backend.
func (b *Backend) evalRelease(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte) (backend.Value, error) {
	argv := anys(args)
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
