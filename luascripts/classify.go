package luascripts

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	// keycmd's ScriptCaller runs a probe's redis.call on the model with
	// the command table every backend uses. Layout decision: keycmd and
	// model are leaves above backend (they import nothing else of
	// lockproxy), so luascripts may use them without a cycle.
	"github.com/lockproxy/lockproxy/keycmd"
)

// Scripts recognised by what they do: the argument behind Classify.
//
// Classify tells whether a script can create a key, which is
// what the quorum backend needs to know: a script that may create one is
// watched on every node (its keys read before and after it, for the undo
// of a minority acquire and Redlock's validity check); one that cannot is
// sent alone. It works from the script's behaviour, not its text or SHA1,
// so a new library version needs no change here. Its answer has two
// halves, and only the first carries safety.
//
// The static half (static.go) reads, off the script's syntax tree, every
// command the script can send. That is sound for every run, whatever its
// KEYS, ARGV, the keys' contents, TIME or random numbers, and whatever Lua
// computes on the node (where real Redis runs it, not this package):
//
//   - a script reaches Redis only through the global redis, or through
//     names that could lead to it or compile code (_G; loadstring, which
//     Redis 7.0 still offers; rawget, getfenv …). The walker accepts
//     only scripts that name no global outside a short list of harmless
//     ones (KEYS, ARGV, string, table, math, tonumber, tostring, type,
//     ipairs, pairs, next, unpack, select, pcall, error, assert,
//     rawequal), a local shadowing a name counting only inside its scope,
//     and that mention redis only as redis.call(…)/redis.pcall(…) with a
//     string literal as the command, or redis.<other field>;
//   - so the literals are all the commands the script can send. When each
//     is one that cannot create a key (GET MGET EXISTS PTTL TTL GETRANGE
//     PING ECHO; DEL UNLINK DELIFEQ DELEX; PEXPIRE EXPIRE PEXPIREAT
//     EXPIREAT PERSIST, which do nothing on an absent key), no run of
//     the script can create a key on any node. When none changes an
//     expiry either, no run can lengthen a TTL, which the quorum backend's
//     restart quarantine would need to learn.
//
// The one thing the static half assumes is that gopher-lua's parser reads
// the same program as Redis's Lua 5.1 (comments, long brackets, escapes):
// TestStaticReadsWhatRedisRuns holds the two side by side on the sources
// where lexers part ways.
//
// Everything else — SET in every form, SETNX, MSET, SELECT, TIME, a
// command named at run time, redis passed as a value, a syntax the walker
// does not know — leaves the script watched, with one exception:
//
// Guarded scripts. Node redlock's extend rewrites its key with SET … PX
// once it found its token there; SET can create, and the walker does not
// follow the check. Such a script is Guarded when it was given one key,
// no probe saw it create or misbehave, and it keeps to a core subset of
// Lua (static.go: locals, control statements, functions, literals, ==
// and ~=, not/and/or, # and indexing of KEYS and ARGV, ipairs, redis.call
// with a literal command; no tables of its own, no arithmetic, ordering,
// concatenation, libraries, pcall or redis.pcall). Each call of it is
// then run once more on the model, with the call's own KEYS and ARGV,
// from its key absent, and goes unwatched (as an extend) only if that run
// creates nothing, meets no error, and sends only key commands on that
// one key. Why that is enough: a script creates its key only on a node
// where the key was absent before it. From that state the node's run and
// the model's see the same replies (the model answers as Redis does,
// which the differential tests hold it to), and in the core subset Lua
// computes the same on both, so they send the same commands in the same
// order; an error ends a run on both sides (nothing can catch it), and a
// command the node refuses where the model did not only cuts the node's
// run shorter. (The model's clock stands at a fixed past instant, so an
// absolute expiry the model finds past, the node finds past too.) So the
// node's run creates at most what the model's did: nothing. The argument rests on the model's conformance and on gopher-lua
// agreeing with Lua 5.1 on that small subset, where the static half rests
// on neither; a call with more keys, or any doubt, is watched.
//
// The dynamic half runs the script, with the call's own KEYS and ARGV, on
// the lock model (backend/model) at a stopped clock, in probe states
// per key (absent; holding each of the first ARGV; holding a foreign
// token; with and without a TTL). It can only make the answer more
// cautious: a probe that raises or meets an error, sends a command outside
// the key commands, names a key it was not given, or changes a key that
// did not hold one of its ARGV (an EXPIRE or DEL of someone else's lock)
// makes the script Other; a probe that creates a key labels it Acquire.
// The probes cannot prove anything about states or ARGV they did not try,
// which is why they never decide alone that a script is safe to leave
// unwatched (a Guarded call's own run, argued above, is about the one
// state that matters, with that call's ARGV).
//
// Values. A script that may create a key (Acquire, Guarded, Other) and
// whose text can write a hash, a sorted set, a set or a list (or move a
// key whole, or whose commands cannot be read off its text) gets the
// WritesValues mark beside its class, from the static half alone. Such a
// script can change a key that exists without creating it (a semaphore
// adds its member beside the others'), which no class here speaks of: the
// quorum backend watches it by value. A script that creates nothing (an
// extend, a release) gets no mark and keeps its class's watch, as a
// string one does: its lost attempt is not put back, even one that
// changed a value that existed (a refresh's new score).
//
// Caching (Classes) is by SHA1 and the numbers of KEYS and ARGV, bounded
// at 4096 entries (then it starts over). The static half depends on the
// text alone, so a cached "creates nothing" holds for every later call; the
// probes ran with the first call's ARGV, so a later call may behave
// differently, but only in ways the static half already allows. A cached
// Guarded is never an answer by itself: every call is checked. A script
// is classified once per entry, at the cost of one parse and up to 64
// short probe runs (the first failure ends them; each gets 250ms, all
// together 1s, and one cut short by time is not cached).

// Class is what a script does to its keys, as Classify found it. The zero
// Class is Other: whoever cannot tell treats a script as one that may do
// anything.
type Class uint8

const (
	// Other: the script may create keys, or could not be told apart from
	// one that does (its commands cannot be read off its text, a probe
	// failed, it touched a key it was not given or one holding a token it
	// was not given). Watch it.
	Other Class = iota
	// Acquire: a probe saw it create a key. Watch it.
	Acquire
	// Guarded: its text may create a key (node redlock's extend rewrites
	// its key with SET … PX once it found its token there), but no probe
	// saw it do so, it was given one key, and it keeps to the core subset
	// of Lua (static.go). Whether a call can create its key is decided
	// per call by one run on the model from the key absent (Classes.Of,
	// the comment at the top of this file): the class of a call is never Guarded.
	Guarded
	// ReadOnly: it can send only commands that read.
	ReadOnly
	// Release: it can send only commands that read or delete, and in
	// every probe deleted only keys holding a value among its ARGV.
	Release
	// Extend: it can send only commands that read, delete or change a
	// live key's expiry, and in every probe changed only keys holding a
	// value among its ARGV. It may leave a key with a longer TTL than
	// any granted so far.
	Extend
)

// valuesBit marks a class whose script may write a value of a type
// beyond strings (WritesValues). It is a mark on the class, not a class
// of its own: such a script is Other, Acquire or Guarded besides.
const valuesBit Class = 0x80

var classNames = [...]string{"other", "acquire", "guarded", "read-only", "release", "extend"}

func (c Class) String() string {
	k, suffix := c.kind(), ""
	if c.WritesValues() {
		suffix = "+values"
	}
	if int(k) < len(classNames) {
		return classNames[k] + suffix
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// kind is c without its values mark.
func (c Class) kind() Class { return c &^ (valuesBit | lockBit) }

// CreatesNothing reports whether no run of the script, in any key space,
// with any KEYS and ARGV, can create a key: ReadOnly, Release and Extend.
func (c Class) CreatesNothing() bool { return c.kind() >= ReadOnly }

// SetsNoExpiry reports whether no run of the script can create a key or
// change an expiry (it reads, or deletes): ReadOnly and Release.
func (c Class) SetsNoExpiry() bool { return c.kind() == ReadOnly || c.kind() == Release }

// WritesValues reports whether the script may write a value of a type
// beyond strings (a hash, a sorted set, a set or a list): its text can
// send a command of those types that writes (HSET, HINCRBY, ZADD,
// ZREMRANGEBYSCORE, SADD, LPUSH …) or that moves a key whole (RENAME,
// COPY), or its commands cannot be read off its text. Counters (INCR …)
// are strings and do not count. A script that may, can change a key that
// already exists without creating it (a semaphore adds its member to the
// others'): the quorum backend watches such a script's values. Only the
// classes that may create a key carry the mark (see the top of this
// file).
func (c Class) WritesValues() bool { return c&valuesBit != 0 }

// probeNow is the probes' stopped clock, and probeTTL the TTL a probe
// key has when it has one.
const (
	probeNow = int64(1_700_000_000_000)
	probeTTL = int64(10_000)
)

// lockBit marks, in the Classes' cache only, an Acquire that is a lock's
// acquire by its shape (Classes.Lock); Classify and Of never return it.
const lockBit Class = 0x40

// lockCommands are the commands a lock's acquire sends: it reads its keys,
// writes tokens (SET, SETNX, MSET, MSETNX) and expiries, and deletes. No
// counter (INCR …), no APPEND or SETRANGE, no value of another type.
var lockCommands = map[string]bool{
	"get": true, "mget": true, "exists": true, "pttl": true, "ttl": true, "getrange": true, "strlen": true,
	"set": true, "setnx": true, "mset": true, "msetnx": true,
	"pexpire": true, "expire": true, "pexpireat": true, "expireat": true, "persist": true,
	"del": true, "unlink": true, "delifeq": true, "delex": true, "ping": true, "echo": true,
}

// lockOnly reports whether every command in cmds is a lock's (lockCommands).
func (cmds commandSet) lockOnly() bool {
	for c := range cmds {
		if !lockCommands[c] {
			return false
		}
	}
	return true
}

// tokensOnly reports whether, in every probe state, the script leaves each
// key it writes absent or holding one of its ARGV: what it writes is a
// token the caller chose, never a value computed from what it read (a
// counter kept with GET and SET, which from "1" writes "2").
func tokensOnly(ctx context.Context, r *Runner, s backend.Script, keys []string, args [][]byte) bool {
	for _, st := range probeStates(len(keys), args) {
		sp := &model.Space{}
		for i, e := range st {
			if e != nil {
				sp.Put(0, keys[i], *e)
			}
		}
		rc := &probeCaller{keys: keys, inner: keycmd.ScriptCaller{KS: &model.View{Now: probeNow, Spaces: []*model.Space{sp}}}}
		if _, err := r.Run(ctx, s, keys, args, rc); err != nil || !rc.ok() {
			return false
		}
		for i, k := range keys {
			after, live := sp.Get(0, k, probeNow)
			before := st[i]
			unchanged := before != nil && live && bytes.Equal(after.Token, before.Token)
			if live && !unchanged && !isArg(after.Token, args) {
				return false
			}
		}
	}
	return true
}

// probeForeign is the token of a lock held by someone else in a probe.
var probeForeign = []byte("lockproxy:probe:foreign-token")

// maxProbeKeys bounds the KEYS a script is probed with; a call with more
// is Other (watched).
const maxProbeKeys = 8

// Classify tells what s does to the keys it is given: the commands it can
// send, read off its syntax tree (static.go), decide whether it can
// create a key or change an expiry at all; runs on the lock model in
// probe states (every key absent, holding one of args, holding a foreign
// token; with and without a TTL) then check that it touches only its keys
// and changes only those holding a value among args, and raises no error.
// keys and args are the call's own (the probes run with them). r runs the
// probes; their time limit is r's. See the top of this file for why a script Classify
// calls ReadOnly, Release or Extend cannot create a key, whatever its
// KEYS, ARGV and the keys' contents.
func Classify(ctx context.Context, r *Runner, s backend.Script, keys []string, args [][]byte) Class {
	c, _ := classify(ctx, r, s, keys, args)
	return c &^ lockBit
}

// classify is Classify; timedOut reports that a probe ran out of time (its
// own limit, or ctx), which says nothing about the script: not cached.
func classify(ctx context.Context, r *Runner, s backend.Script, keys []string, args [][]byte) (c Class, timedOut bool) {
	cmds, known, core := analyse(s.Src)
	create, expire := true, true
	if known {
		create, expire = cmds.reach()
	}
	if len(keys) == 0 || len(keys) > maxProbeKeys {
		return Other, false
	}
	clean, created := true, false
	for _, st := range probeStates(len(keys), args) {
		ok, made, late := probe(ctx, r, s, keys, args, st)
		clean, created, timedOut = clean && ok, created || made, late
		if !clean {
			break // Acquire or Other: watched either way
		}
	}
	var values Class
	if !known || cmds.writesValues() {
		values = valuesBit
	}
	switch {
	case created && !timedOut && values == 0 && known && cmds.lockOnly() && tokensOnly(ctx, r, s, keys, args):
		return Acquire | lockBit, false
	case created:
		return Acquire | values, false
	case !clean:
		return Other | values, timedOut
	case create && known && core && len(keys) == 1:
		return Guarded | values, false
	case create:
		return Other | values, false
	case expire:
		return Extend, false
	case cmds.deletes():
		return Release, false
	}
	return ReadOnly, false
}

// deletes reports whether cmds has a command that deletes.
func (cmds commandSet) deletes() bool {
	for c := range cmds {
		if deleteCommands[c] {
			return true
		}
	}
	return false
}

// probeState is the initial state of each key of a probe: nil is absent.
type probeState []*model.Entry

// probeStates lists the states a script with n keys is probed in: each
// key absent, holding each of the first three args, or holding a foreign
// token, with a TTL or without one; every combination when there are at
// most 64, else every key in the same state, and each key in each state
// with the others holding args[0] or absent.
func probeStates(n int, args [][]byte) []probeState {
	var one []*model.Entry
	one = append(one, nil)
	vals := [][]byte{probeForeign}
	for i, a := range args {
		if i == 3 {
			break
		}
		vals = append(vals, a)
	}
	for _, v := range vals {
		one = append(one, &model.Entry{Token: v, Deadline: probeNow + probeTTL}, &model.Entry{Token: v})
	}
	total := 1
	for range n {
		total *= len(one)
		if total > 64 {
			break
		}
	}
	var out []probeState
	if total <= 64 {
		for i := range total {
			st := make(probeState, n)
			for k := range n {
				st[k] = one[i%len(one)]
				i /= len(one)
			}
			out = append(out, st)
		}
		return out
	}
	for _, e := range one {
		st := make(probeState, n)
		for k := range st {
			st[k] = e
		}
		out = append(out, st)
	}
	others := []*model.Entry{nil}
	if len(args) > 0 {
		others = append(others, &model.Entry{Token: args[0], Deadline: probeNow + probeTTL})
	}
	for k := range n {
		for _, e := range one {
			for _, o := range others {
				st := make(probeState, n)
				for j := range st {
					st[j] = o
				}
				st[k] = e
				out = append(out, st)
			}
		}
	}
	return out
}

// probe runs s once on the model in state st. ok is false when the run
// raised an error, sent a command outside the key commands (ping and echo
// aside), named a key it was not given, or changed a key that did not
// hold one of args; created reports a key absent before and live after.
func probe(ctx context.Context, r *Runner, s backend.Script, keys []string, args [][]byte, st probeState) (ok, created, timedOut bool) {
	sp := &model.Space{}
	for i, e := range st {
		if e != nil {
			sp.Put(0, keys[i], *e)
		}
	}
	rc := &probeCaller{keys: keys, inner: keycmd.ScriptCaller{KS: &model.View{Now: probeNow, Spaces: []*model.Space{sp}}}}
	_, err := r.Run(ctx, s, keys, args, rc)
	ok = err == nil && rc.ok()
	timedOut = errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	for i, k := range keys {
		after, live := sp.Get(0, k, probeNow)
		before := st[i]
		switch {
		case before == nil && live:
			created = true
			ok = false
		case before == nil:
		case !live || !bytes.Equal(after.Token, before.Token) || after.Deadline != before.Deadline:
			if !isArg(before.Token, args) {
				ok = false // it changed someone else's lock
			}
		}
	}
	return ok, created, timedOut
}

func isArg(v []byte, args [][]byte) bool {
	for _, a := range args {
		if bytes.Equal(v, a) {
			return true
		}
	}
	return false
}

// probeCaller runs a probe's commands on the model and notes any that
// make the probe unfit: a command other than a key command (ping and echo
// aside: SELECT, TIME and the like make a run depend on more than its
// keys), or a key the script was not given.
type probeCaller struct {
	keys  []string
	inner keycmd.ScriptCaller
	bad   bool
}

func (c *probeCaller) ok() bool { return !c.bad }

func (c *probeCaller) Call(ctx context.Context, args [][]byte) (backend.Value, error) {
	if len(args) > 0 {
		n := string(bytes.ToLower(args[0]))
		if n == "publish" && len(args) == 3 {
			// What a node answers a script the quorum backend sends
			// (quorum/scriptpub.go): the message is held back until the
			// vote, and touches no key.
			return backend.Int(0), nil
		}
		if cmd := keycmd.Lookup(args[0]); cmd != nil {
			keys := cmd.Keys(args)
			if len(keys) == 0 && n != "ping" && n != "echo" {
				// DBSIZE and the like: the reply depends on keys a probe
				// does not have, so a probe's run says nothing of a
				// node's (a script could create only when DBSIZE > 0).
				c.bad = true
			}
			for _, k := range keys {
				if !c.given(k) {
					c.bad = true
				}
			}
		} else if n != "ping" && n != "echo" {
			c.bad = true
		}
	}
	v, err := c.inner.Call(ctx, args)
	if err != nil {
		c.bad = true // a failing command: what the script makes of it is not a lock's usual path
	}
	return v, err
}

func (c *probeCaller) given(k []byte) bool {
	for _, g := range c.keys {
		if g == string(k) {
			return true
		}
	}
	return false
}

// Classes remembers Classify by the script's SHA1 and its numbers of KEYS
// and ARGV, for at most maxClasses calls' worth of kinds; past that it
// starts over. The zero value is ready and safe for concurrent use. What
// makes caching sound is the static half of Classify, which holds for any
// KEYS and ARGV (top of this file); the probes, which use the first call's, only
// ever make a class more cautious.
type Classes struct {
	// Runner runs the probes. nil: one of the Classes' own, made on first
	// use, with a probe time limit of 250ms.
	Runner *Runner

	once  sync.Once
	made  atomic.Pointer[Runner] // runner's, once made: read on hot paths without once.Do
	mu    sync.RWMutex
	known map[classKey]Class
	// By SHA1, for Lock: scripts whose text rules out a lock script, and
	// those whose text does not.
	others, lockish map[string]struct{}
}

type classKey struct {
	sha        string
	keys, args int
}

const maxClasses = 4096

// classifyBudget bounds one classification, all its probes together. A
// classification cut short by it, or by a probe's time limit, is not
// cached (a loaded machine says nothing about the script): that call is
// watched and the next classifies again.
const classifyBudget = time.Second

// Of returns the class of this call: Classify(s, keys, args), from the
// cache when a call of the same script with as many KEYS and ARGV was
// classified before, and for a Guarded script the outcome of this call's
// own check on the model (never Guarded itself). The probes
// run under ctx without its cancellation (bounded by classifyBudget), so
// that one client giving up cannot leave a script classified Other for
// everyone.
func (c *Classes) Of(ctx context.Context, s backend.Script, keys []string, args [][]byte) Class {
	cl, _ := c.of(ctx, s, keys, args)
	return cl
}

// Lock is Of, and reports besides whether the call is a lock's acquire by
// its shape: an Acquire whose text sends only lock commands (GET, SET,
// MSETNX, PEXPIRE, DEL and the like: no counter, no value of another type)
// and that, in every probe state, leaves each key it writes absent or
// holding one of its ARGV. Node redlock's and bsm/redislock's acquires
// are; a counter (INCR, or GET then SET of a sum) is not. The quorum
// backend keeps its one-round-trip path for these (quorum/classify.go).
//
// A script whose text can send a command no lock script sends (INCR,
// HSET, TIME …), or whose commands cannot be read off its text, is
// answered Other at once, without probes: its class would not make it a
// lock script, and the quorum backend runs it on the model either way.
func (c *Classes) Lock(ctx context.Context, s backend.Script, keys []string, args [][]byte) (_ Class, lock bool) {
	if s.Src == "" {
		return Other, false
	}
	if s.SHA1 == "" {
		s.SHA1 = SHA1(s.Src)
	}
	if c.notLock(s) {
		return Other, false
	}
	return c.of(ctx, s, keys, args)
}

// of is Of with Lock's second answer.
func (c *Classes) of(ctx context.Context, s backend.Script, keys []string, args [][]byte) (_ Class, lock bool) {
	if s.Src == "" {
		return Other, false
	}
	if s.SHA1 == "" {
		s.SHA1 = SHA1(s.Src)
	}
	k := classKey{s.SHA1, len(keys), len(args)}
	c.mu.RLock()
	cl, ok := c.known[k]
	c.mu.RUnlock()
	if ok {
		return c.call(ctx, cl&^lockBit, s, keys, args), cl&lockBit != 0
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), classifyBudget)
	cl, timedOut := classify(cctx, c.runner(), s, keys, args)
	cancel()
	if timedOut {
		return Other, false // this call is watched; the next one classifies again
	}
	c.mu.Lock()
	if c.known == nil || len(c.known) >= maxClasses {
		c.known = make(map[classKey]Class)
	}
	c.known[k] = cl
	c.mu.Unlock()
	return c.call(ctx, cl&^lockBit, s, keys, args), cl&lockBit != 0
}

// Cached returns the class of this call as Of would, when that needs no
// run of the script: its class is cached and is not Guarded (a Guarded
// call is checked on the model). For callers that must not run Lua in
// place, such as an event loop; ok false sends them to Of.
func (c *Classes) Cached(s backend.Script, keys []string, args [][]byte) (Class, bool) {
	cl, _, ok := c.cached(s, keys, args, false)
	return cl, ok
}

// CachedLock is Lock from the cache, as Cached is Of.
func (c *Classes) CachedLock(s backend.Script, keys []string, args [][]byte) (_ Class, lock, ok bool) {
	return c.cached(s, keys, args, true)
}

func (c *Classes) cached(s backend.Script, keys []string, args [][]byte, forLock bool) (_ Class, lock, ok bool) {
	if s.Src == "" || s.SHA1 == "" {
		return Other, false, false
	}
	c.mu.RLock()
	cl, ok := c.known[classKey{s.SHA1, len(keys), len(args)}]
	_, other := c.others[s.SHA1]
	c.mu.RUnlock()
	if forLock && other {
		return Other, false, true
	}
	if !ok || cl.kind() == Guarded {
		return Other, false, false
	}
	return cl &^ lockBit, cl&lockBit != 0, true
}

// notLock reports whether s's text rules out a lock script (Lock),
// remembering the answer by SHA1.
func (c *Classes) notLock(s backend.Script) bool {
	c.mu.RLock()
	_, other := c.others[s.SHA1]
	_, seen := c.lockish[s.SHA1]
	c.mu.RUnlock()
	if other || seen {
		return other
	}
	cmds, known, _ := analyse(s.Src)
	other = !known
	for name := range cmds {
		if !lockCommands[name] && name != "publish" {
			other = true
		}
	}
	c.mu.Lock()
	if c.others == nil || len(c.others)+len(c.lockish) >= maxClasses {
		c.others, c.lockish = make(map[string]struct{}), make(map[string]struct{})
	}
	if other {
		c.others[s.SHA1] = struct{}{}
	} else {
		c.lockish[s.SHA1] = struct{}{}
	}
	c.mu.Unlock()
	return other
}

// runner returns c.Runner, made on first use when nil. (Not on a cache
// hit's path: sync.Once.Do with a closure costs an allocation.)
func (c *Classes) runner() *Runner {
	c.once.Do(func() {
		if c.Runner == nil {
			c.Runner = New(Config{TimeLimit: 250 * time.Millisecond})
		}
		c.made.Store(c.Runner)
	})
	return c.Runner
}

// call is the class of one call of a script of class cl: a Guarded
// script's call is Extend when its run on the model, from its one key
// absent (the only state in which it can create that key), creates
// nothing, touches no other key and meets no error; else Other.
func (c *Classes) call(ctx context.Context, cl Class, s backend.Script, keys []string, args [][]byte) Class {
	if cl.kind() != Guarded {
		return cl
	}
	values := cl & valuesBit
	if len(keys) == 1 {
		if ok, created, _ := probe(ctx, c.runner(), s, keys, args, probeState{nil}); ok && !created {
			return Extend | values
		}
	}
	return Other | values
}
