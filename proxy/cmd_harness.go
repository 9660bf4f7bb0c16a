package proxy

import (
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// What test harnesses send besides the commands they test (Redis's own
// suite, applications' integration tests): the encoding settings of
// CONFIG SET, MEMORY USAGE, DEBUG. They are answered as Redis answers
// them; none changes what lockproxy does.

// tunable is one of Redis's memory-encoding settings: CONFIG SET accepts
// it within Redis's range and CONFIG GET answers what was set, under both
// of Redis 7.0's names. lockproxy has no such encodings: the value has no
// effect.
type tunable struct {
	name, alias string
	def         int64
	min, max    int64
}

var tunables = []tunable{
	{"hash-max-listpack-entries", "hash-max-ziplist-entries", 512, 0, math.MaxInt64},
	{"hash-max-listpack-value", "hash-max-ziplist-value", 64, 0, math.MaxInt64},
	{"zset-max-listpack-entries", "zset-max-ziplist-entries", 128, 0, math.MaxInt64},
	{"zset-max-listpack-value", "zset-max-ziplist-value", 64, 0, math.MaxInt64},
	{"set-max-intset-entries", "", 512, 0, math.MaxInt64},
	{"list-max-listpack-size", "list-max-ziplist-size", -2, math.MinInt32, math.MaxInt32},
	{"list-compress-depth", "", 0, 0, math.MaxInt32},
	{"stream-node-max-entries", "", 100, 0, math.MaxInt64},
}

// tuned holds the values CONFIG SET gave the tunables. Safe for
// concurrent use.
type tuned struct {
	mu     sync.Mutex
	values map[string]int64
}

// lookupTunable finds a tunable by either of its names.
func lookupTunable(name string) *tunable {
	for i := range tunables {
		if t := &tunables[i]; t.name == name || (t.alias != "" && t.alias == name) {
			return t
		}
	}
	return nil
}

// params are the tunables as CONFIG GET lists them, with their values.
func (tu *tuned) params() [][2]string {
	tu.mu.Lock()
	defer tu.mu.Unlock()
	var out [][2]string
	for _, t := range tunables {
		v, ok := tu.values[t.name]
		if !ok {
			v = t.def
		}
		s := strconv.FormatInt(v, 10)
		out = append(out, [2]string{t.name, s})
		if t.alias != "" {
			out = append(out, [2]string{t.alias, s})
		}
	}
	return out
}

// set is CONFIG SET's name value pairs: every one is checked, then all are
// applied, as Redis applies them (all or none).
func (tu *tuned) set(pairs [][]byte) backend.Value {
	if len(pairs)%2 != 0 {
		return backend.ErrorValue(backend.ErrWrongArgs("config|set"))
	}
	next, given := map[string]int64{}, map[string]bool{}
	for i := 0; i < len(pairs); i += 2 {
		name := lower(pairs[i])
		t := lookupTunable(name)
		if t == nil {
			return backend.ErrorValue(backend.ErrConfigSetOption(string(pairs[i])))
		}
		if given[name] { // by the name given: a name and its alias both pass, the later wins
			return backend.ErrorValue(configSetFailed(name, "duplicate parameter"))
		}
		given[name] = true
		v, err := strconv.ParseInt(string(pairs[i+1]), 10, 64)
		switch {
		case err != nil:
			return backend.ErrorValue(configSetFailed(name, "argument couldn't be parsed into an integer"))
		case v < t.min || v > t.max:
			return backend.ErrorValue(configSetFailed(name, "argument must be between "+strconv.FormatInt(t.min, 10)+" and "+strconv.FormatInt(t.max, 10)+" inclusive"))
		}
		next[t.name] = v
	}
	tu.mu.Lock()
	defer tu.mu.Unlock()
	if tu.values == nil {
		tu.values = map[string]int64{}
	}
	for k, v := range next {
		tu.values[k] = v
	}
	return backend.OKValue
}

// configSetFailed is Redis's CONFIG SET error for a value it refuses.
func configSetFailed(name, why string) string {
	return "ERR CONFIG SET failed (possibly related to argument '" + name + "') - " + why
}

// msgDebugNotAllowed is Redis 7's reply to DEBUG with its default
// enable-debug-command no: lockproxy serves none of DEBUG's subcommands.
const msgDebugNotAllowed = `ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.`

func cmdDebug(cl *client, args [][]byte) backend.Value {
	return backend.ErrorValue(msgDebugNotAllowed)
}

// cmdMemory is MEMORY USAGE key [SAMPLES n] (an estimate in Redis's
// terms: the key, the value and an object's overhead), MEMORY PURGE
// (memory given back to the system, as jemalloc's purge does) and MEMORY
// HELP.
func cmdMemory(cl *client, args [][]byte) backend.Value {
	switch sub := lower(args[1]); sub {
	case "usage":
		if len(args) < 3 {
			return backend.ErrorValue(backend.ErrWrongArgs("memory|usage"))
		}
		for i := 3; i < len(args); i += 2 {
			if lower(args[i]) != "samples" || i+1 >= len(args) {
				return backend.ErrorValue(backend.MsgSyntax)
			}
			if _, ok := backend.ParseInt(args[i+1]); !ok {
				return backend.ErrorValue(backend.MsgNotInteger)
			}
		}
		return cl.memoryUsage(args[2])
	case "purge":
		if cl.s.cfg.Freed != nil {
			cl.s.cfg.Freed(math.MaxInt32)
		}
		return backend.OKValue
	case "help":
		return backend.Array(backend.Status("MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
			backend.Status("USAGE <key> [SAMPLES <count>]"),
			backend.Status("    Return memory in bytes used by <key> and its value (an estimate)."),
			backend.Status("PURGE"),
			backend.Status("    Give freed memory back to the system."))
	}
	return backend.ErrorValue(backend.ErrUnknownSubcommand("memory", string(args[1])))
}

// memoryUsage estimates the bytes key takes, Redis-like: 56 bytes of
// object and entry, the key, and the value (a string's length; 24 bytes
// an element otherwise); nil for an absent key.
func (cl *client) memoryUsage(key []byte) backend.Value {
	run := func(args ...string) (backend.Value, bool) {
		ctx, cancel := cl.commandCtx()
		defer cancel()
		a := make([][]byte, len(args))
		for i, s := range args {
			a[i] = []byte(s)
		}
		v, err := keycmd.Lookup(a[0]).Exec(ctx, cl.store(), cl.db, a)
		if err != nil {
			return cl.errorValue("memory", err), false
		}
		return v, v.Kind != backend.KindError
	}
	k := string(key)
	t, ok := run("type", k)
	if !ok {
		return t
	}
	size := map[string]string{"string": "strlen", "hash": "hlen", "set": "scard", "zset": "zcard", "list": "llen"}[string(t.Str)]
	if size == "" {
		return backend.NilValue // none
	}
	n, ok := run(size, k)
	if !ok {
		return n
	}
	bytes := 56 + int64(len(key))
	if string(t.Str) == "string" {
		bytes += n.Int
	} else {
		bytes += 24 * n.Int
	}
	return backend.Int((bytes + 7) &^ 7)
}

// configSet is CONFIG SET: the tunables (cmd_harness.go), or Redis's error
// for any other parameter.
func (cl *client) configSet(args [][]byte) backend.Value {
	if lookupTunable(strings.ToLower(string(args[2]))) == nil {
		return backend.ErrorValue(backend.ErrConfigSetOption(string(args[2])))
	}
	return cl.s.tuned.set(args[2:])
}
