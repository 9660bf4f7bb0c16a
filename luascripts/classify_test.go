package luascripts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// clientScript is one script of tests/testdata/scripts with the arguments
// its library sends, and the class it must get.
type clientScript struct {
	file string
	args []string
	want Class
}

// ClientScripts are the scripts every library of the compatibility
// matrix (README.md) sends (the files
// are the libraries' own, captured byte for byte), with the arguments
// each sends. Also used by quorum's tests through the same file names.
var clientScripts = []clientScript{
	{"redis-py-release", []string{"tok"}, Release},
	{"redis-py-extend", []string{"tok", "5000", "0"}, Extend},
	{"redis-py-reacquire", []string{"tok", "5000"}, Extend},
	{"redis-semaphore-mutex-release", []string{"tok"}, Release},
	{"redis-semaphore-mutex-refresh", []string{"tok", "5000"}, Extend},
	{"redislock-release", []string{"tok"}, Release},
	{"redislock-refresh", []string{"tok", "5000"}, Extend},
	{"redislock-pttl", []string{"tok"}, ReadOnly},
	{"redislock-obtain", []string{"tok", "3", "5000"}, Acquire},
	{"redislock094-release", []string{"tok"}, Release},
	{"redislock094-refresh", []string{"tok", "5000"}, Extend},
	{"redislock094-pttl", []string{"tok"}, ReadOnly},
	{"redislock094-obtain", []string{"tok", "3", "5000"}, Acquire},
	{"redlock4-release", []string{"tok"}, Release},
	{"redlock4-acquire", []string{"tok", "5000"}, Acquire},
	{"redlock5-release", []string{"tok"}, Release},
	{"redlock5-acquire", []string{"tok", "5000"}, Acquire},
	{"redsync-release", []string{"tok"}, Release},
	{"redsync-touch", []string{"tok", "5000"}, Extend},
	{"redsync-touch-setnx", []string{"tok", "5000"}, Acquire},
	// node redlock's extend rewrites its keys with SET … PX after
	// checking they hold its token: SET can create, so each call with one
	// key is checked on the model (Guarded); with several it is watched.
	{"redlock4-extend", []string{"tok", "5000"}, Guarded},
	{"redlock5-extend", []string{"tok", "5000"}, Guarded},
}

func bytesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// TestClassifyClientScripts classifies every script the client libraries
// send, with one key and with two (bsm/redislock and node redlock take
// several), and checks that every file is in the table.
func TestClassifyClientScripts(t *testing.T) {
	r := New(Config{})
	seen := map[string]bool{}
	for _, cs := range clientScripts {
		seen[cs.file] = true
		src, err := os.ReadFile("../tests/testdata/scripts/" + cs.file + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		var c Classes
		for _, keys := range [][]string{{"k1"}, {"k1", "k2"}} {
			want, wantCall := cs.want, cs.want
			if want == Guarded {
				wantCall = Extend // its check passes: it creates nothing from an absent key
				if len(keys) > 1 {
					want, wantCall = Other, Other
				}
			}
			s := backend.Script{Src: string(src)}
			if got := Classify(t.Context(), r, s, keys, bytesOf(cs.args)); got != want {
				t.Errorf("Classify(%s, %d keys, %q) = %s; want %s", cs.file, len(keys), cs.args, got, want)
			}
			if got := c.Of(t.Context(), s, keys, bytesOf(cs.args)); got != wantCall {
				t.Errorf("Classes.Of(%s, %d keys, %q) = %s; want %s", cs.file, len(keys), cs.args, got, wantCall)
			}
		}
	}
	files, _ := filepath.Glob("../tests/testdata/scripts/*.lua")
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".lua"); !seen[name] {
			t.Errorf("%s is not in clientScripts: give it its expected class", name)
		}
	}
}

// TestClassifyNewRelease: a release no catalogue has seen — reworded, other
// variable names, UNLINK instead of DEL, another reply — is recognised by
// what it does.
func TestClassifyNewRelease(t *testing.T) {
	r := New(Config{})
	for name, src := range map[string]string{
		"reworded": `local current = redis.call('GET', KEYS[1])
			if current ~= false and current == ARGV[1] then
				redis.call('UNLINK', KEYS[1]) return 'released'
			end
			return nil`,
		"delifeq":           `return redis.call('delifeq', KEYS[1], ARGV[1])`,
		"all keys":          `local n = 0 for _, k in ipairs(KEYS) do if redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end end return n`,
		"extend in seconds": `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0`,
	} {
		want := Release
		if strings.Contains(src, "expire") {
			want = Extend
		}
		for _, keys := range [][]string{{"a"}, {"a", "b"}} {
			if got := Classify(t.Context(), r, backend.Script{Src: src}, keys, bytesOf([]string{"tok", "30"})); got != want {
				t.Errorf("%s with %d keys: %s; want %s", name, len(keys), got, want)
			}
		}
	}
}

// TestClassifyAdversarial: scripts that create a key, or could, or do
// something the probes cannot vouch for, are never classified as creating
// nothing, whatever ARGV the classifying call had.
func TestClassifyAdversarial(t *testing.T) {
	release := `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end `
	cases := map[string]string{
		"acquire only when ARGV[2] is x":    release + `if ARGV[2] == 'x' then redis.call('set', KEYS[1], ARGV[1], 'PX', 1000) end return 0`,
		"acquire on the second key":         release + `if KEYS[2] then redis.call('set', KEYS[2], ARGV[1], 'NX') end return 0`,
		"SET without NX":                    `if redis.call('get', KEYS[1]) ~= ARGV[1] then redis.call('set', KEYS[1], ARGV[1]) end return 1`,
		"SET XX":                            `return redis.call('set', KEYS[1], ARGV[1], 'XX')`,
		"SETNX":                             `return redis.call('setnx', KEYS[1], ARGV[1])`,
		"MSETNX":                            `return redis.call('msetnx', KEYS[1], ARGV[1])`,
		"EXPIRE of a foreign key":           `return redis.call('pexpire', KEYS[1], 100000)`,
		"DEL of a foreign key":              `return redis.call('del', KEYS[1])`,
		"DEL of a key not given":            release + `redis.call('del', 'other') return 0`,
		"error mid-way":                     `redis.call('del', KEYS[1]) return redis.call('incr', KEYS[1])`,
		"raises an error":                   release + `error('no')`,
		"error reply caught by pcall":       release + `local r = redis.pcall('pexpire', KEYS[1], 'x') return 0`,
		"pcall of redis.call":               release + `local ok = pcall(redis.call, 'set', KEYS[1], ARGV[1]) return 0`,
		"command in a variable":             `local c = ARGV[2] or 'del' return redis.call(c, KEYS[1], ARGV[1])`,
		"command from unpack":               `return redis.call(unpack(ARGV))`,
		"redis aliased":                     `local r = redis return r.call('set', KEYS[1], ARGV[1])`,
		"redis indexed":                     `return redis['ca' .. 'll']('set', KEYS[1], ARGV[1])`,
		"method call":                       `return redis:call('set', KEYS[1], ARGV[1])`,
		"_G":                                `return _G.redis.call('set', KEYS[1], ARGV[1])`,
		"loadstring (Redis 7.0 has it)":     `return loadstring("return redis.call('set', KEYS[1], ARGV[1])")()`,
		"rawget":                            `return rawget(_G, 'redis').call('set', KEYS[1], ARGV[1])`,
		"shadowed local out of scope":       `do local loadstring = 1 end return loadstring("return 1")()`,
		"TIME":                              release + `local t = redis.call('TIME') return 0`,
		"SELECT":                            `redis.call('select', 1) if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`,
		"math.random":                       `if math.random() < 2 then return redis.call('set', KEYS[1], ARGV[1]) end return 0`,
		"endless loop":                      `while true do end`,
		"does not compile":                  `if then`,
		"SET after reading a key not given": `if redis.call('get', 'other') == false then return redis.call('set', KEYS[1], ARGV[1]) end return 0`,
		"SET when PTTL says absent":         `if redis.call('pttl', KEYS[1]) == -2 then return redis.call('set', KEYS[1], ARGV[1]) end return 0`,
		"SET after TIME":                    `local t = redis.call('time') if t then redis.call('set', KEYS[1], ARGV[1]) end return 0`,
		"SET from an ARGV loop":             `for _, a in ipairs(ARGV) do if a == 'x' then redis.call('set', KEYS[1], a) end end return 0`,
		"SET when DBSIZE is not 0":          `if redis.call('dbsize') ~= 0 and redis.call('get', KEYS[1]) == false then return redis.call('set', KEYS[1], ARGV[1], 'PX', 1000) end return 0`,
		"GETSET":                            `return redis.call('getset', KEYS[1], ARGV[1])`,
		"COPY":                              `return redis.call('copy', KEYS[1], KEYS[2])`,
	}
	// Two of them create only in some calls; their other calls really
	// create nothing, and with one key go unwatched (checked below).
	canCreate := map[string]func(keys, args []string) bool{
		"acquire only when ARGV[2] is x": func(_, args []string) bool { return len(args) > 1 && args[1] == "x" },
		"acquire on the second key":      func(keys, _ []string) bool { return len(keys) > 1 },
		"SET from an ARGV loop":          func(_, args []string) bool { return len(args) > 1 && args[1] == "x" },
	}
	rl := New(Config{TimeLimit: 20 * time.Millisecond}) // the endless loop
	for name, src := range cases {
		for _, args := range [][]string{{"tok", "y"}, {"tok", "x"}, {"tok"}, {}} {
			for _, keys := range [][]string{{"a"}, {"a", "b"}} {
				if f := canCreate[name]; f != nil && !f(keys, args) {
					var c Classes // a one-key call is checked on the model; more keys are watched
					if got := c.Of(t.Context(), backend.Script{Src: src}, keys, bytesOf(args)); len(keys) == 1 && !got.CreatesNothing() {
						t.Errorf("%s (%d keys, ARGV %q) cannot create: call class %s; want unwatched", name, len(keys), args, got)
					}
					continue
				}
				if got := Classify(t.Context(), rl, backend.Script{Src: src}, keys, bytesOf(args)); got.CreatesNothing() {
					t.Errorf("%s (%d keys, ARGV %q): %s; must be watched", name, len(keys), args, got)
				}
				// The cache first meets the script with harmless ARGV ("y"),
				// then with the ARGV that make it acquire.
				for _, first := range [][]string{{"tok", "y"}, args} {
					var c Classes
					c.Runner = rl
					c.Of(t.Context(), backend.Script{Src: src}, keys, bytesOf(first))
					if got := c.Of(t.Context(), backend.Script{Src: src}, keys, bytesOf(args)); got.CreatesNothing() {
						t.Errorf("%s (%d keys, ARGV %q after %q): call class %s; must be watched", name, len(keys), args, first, got)
					}
				}
			}
		}
	}
}

// TestClassesCacheByCounts: the cache keeps a class per SHA1 and numbers
// of KEYS and ARGV, and a script that acquires on its second key is not
// taken for a release because it was first seen with one key.
func TestClassesCacheByCounts(t *testing.T) {
	var c Classes
	src := `if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
		if KEYS[2] then redis.call('set', KEYS[2], ARGV[1], 'NX') end return 0`
	s := backend.Script{Src: src, SHA1: SHA1(src)}
	// With one key it cannot create (KEYS[2] is nil): a Guarded script
	// whose call passes its check.
	if got := c.Of(t.Context(), s, []string{"a"}, bytesOf([]string{"tok"})); got != Extend {
		t.Errorf("one key: %s; want extend", got)
	}
	if got := c.Of(t.Context(), s, []string{"a", "b"}, bytesOf([]string{"tok"})); got != Acquire {
		t.Errorf("two keys: %s; want acquire", got)
	}
	rel := `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`
	rs := backend.Script{Src: rel, SHA1: SHA1(rel)}
	for range 3 {
		if got := c.Of(t.Context(), rs, []string{"a"}, bytesOf([]string{"tok"})); got != Release {
			t.Errorf("release: %s", got)
		}
	}
	if n := len(c.known); n != 3 {
		t.Errorf("%d cache entries; want 3", n)
	}
}

// TestStaticReadsWhatRedisRuns: the static half parses with gopher-lua,
// while the nodes run Redis's Lua. For sources where lexers could part —
// long brackets and comments of every level, escapes, line ends — a real
// redis-server runs each, and whenever it created the key the static half
// must not have found the script unable to create one.
func TestStaticReadsWhatRedisRuns(t *testing.T) {
	c := dialRESP(t, startRedis(t))
	set := "redis.call('set', KEYS[1], 'x')"
	for _, src := range []string{
		"--[==[ x ]] " + set + " --]==] return 0",
		"--[[ x ]==] " + set + " --]] return 0",
		"--[ " + set + " ]] return 0",
		"--[=[ x ]=] " + set + " return 0",
		"local s = [[ ]] " + set + " --]] return 0",
		"local s = [==[ ]] " + set + " ]==] return 0",
		"local s = \"a\\\n\" " + set + " return 0",
		"local s = \"\\z  \" " + set + " return 0",
		"local s = '\\'' " + set + " return 0",
		"local s = \"\\\"\" " + set + " return 0",
		"local s = \"\\\\\" " + set + " return 0",
		"-- comment \\\n" + set + " return 0",
		"local s = 1--[[\n" + set + " --]] return 0",
		"local s = [=[]=]" + set + " return 0",
		"local s = [[\n]]" + set + " return 0",
		"--[[\n]]" + set + " return 0",
		"--[==[\n]=]\n" + set + "\n]==] return 0",
		"local s = \"\\0\" " + set + " return 0",
		"local s = '\\x41' " + set + " return 0",
		"local s = '\\9999' " + set + " return 0",
		"#!/bin/lua\n" + set + " return 0",
		"goto x ::x:: " + set + " return 0",
		"local s = [[ ]]--[[ ]] " + set + " return 0",
		"local s = \"--\" " + set + " return 0",
		"local s = '\\\r\n' " + set + " return 0",
		"--\r" + set + " return 0",
		"--\f" + set + " return 0",
		"--\v" + set + " return 0",
		"-- x\r\n" + set + " return 0",
	} {
		c.mustDo(t, "DEL", "k")
		c.do([]byte("EVAL"), []byte(src), []byte("1"), []byte("k"))
		v, err := c.do([]byte("EXISTS"), []byte("k"))
		if err != nil {
			t.Fatal(err)
		}
		cmds, ok := staticCommands(src)
		create := true
		if ok {
			create, _ = cmds.reach()
		}
		if v.Int == 1 && !create {
			t.Errorf("%q: Redis created the key; the static half found no command that could (%v)", src, cmds)
		}
	}
}

// TestClassesTimeoutNotCached: a classification cut short by time says
// nothing about the script: that call is watched, and nothing is cached.
func TestClassesTimeoutNotCached(t *testing.T) {
	c := Classes{Runner: New(Config{TimeLimit: time.Millisecond})}
	src := `local n = 0 while n >= 0 do n = n + 1 end return redis.call('del', KEYS[1])`
	if got := c.Of(t.Context(), backend.Script{Src: src}, []string{"a"}, nil); got.CreatesNothing() {
		t.Errorf("a script that ran out of time: %s; must be watched", got)
	}
	if n := len(c.known); n != 0 {
		t.Errorf("%d cache entries after a timed-out classification; want 0", n)
	}
}

// TestClassifyWritesValues: a script whose text can write a hash, a sorted
// set, a set or a list (or move a key whole, or whose commands cannot be
// read) is marked WritesValues, whatever else its class says; one that
// only reads them, or writes strings and counters, is not.
func TestClassifyWritesValues(t *testing.T) {
	r := New(Config{})
	c := &Classes{Runner: r}
	for _, tc := range []struct {
		name, src string
		keys      int
		want      bool
	}{
		{"semaphore acquire", `redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[1]) if redis.call('zcard', KEYS[1]) < 3 then redis.call('zadd', KEYS[1], ARGV[1], ARGV[2]) redis.call('pexpire', KEYS[1], 5000) return 1 end return 0`, 1, true},
		{"hash lock", `if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil end return redis.call('pttl', KEYS[1])`, 1, true},
		{"hash re-entry only", `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then redis.call('hincrby', KEYS[1], ARGV[1], 1) end return 0`, 1, true},
		{"rename", `return redis.call('rename', KEYS[1], KEYS[2])`, 2, true},
		{"command named at run time", `return redis.call(ARGV[1], KEYS[1])`, 1, true},
		{"hash renewal", `if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then redis.call('pexpire', KEYS[1], ARGV[1]) return 1 end return 0`, 1, false},
		{"string acquire", `if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`, 1, false},
		{"fencing counter", `return redis.call('incr', KEYS[1])`, 1, false},
		{"string release", `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`, 1, false},
	} {
		keys := []string{"a", "b"}[:tc.keys]
		args := bytesOf([]string{"5000", "tok"})
		s := backend.Script{Src: tc.src, SHA1: SHA1(tc.src)}
		if got := Classify(t.Context(), r, s, keys, args); got.WritesValues() != tc.want {
			t.Errorf("%s: class %s; want WritesValues %v", tc.name, got, tc.want)
		}
		if got := c.Of(t.Context(), s, keys, args); got.WritesValues() != tc.want {
			t.Errorf("%s: call's class %s; want WritesValues %v", tc.name, got, tc.want)
		}
	}
}

// TestClassesLock: every acquire the lock libraries send is a lock's by
// its shape (the quorum backend's one-round-trip path), with one key and
// with two; counters and scripts that write values of their own making
// are not, whatever their class.
func TestClassesLock(t *testing.T) {
	for _, cs := range clientScripts {
		src, err := os.ReadFile("../tests/testdata/scripts/" + cs.file + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		var c Classes
		for _, keys := range [][]string{{"k1"}, {"k1", "k2"}} {
			s := backend.Script{Src: string(src), SHA1: SHA1(string(src))}
			cl, lock := c.Lock(t.Context(), s, keys, bytesOf(cs.args))
			if want := cs.want == Acquire; lock != want {
				t.Errorf("Lock(%s, %d keys) = %s, %v; want lock %v", cs.file, len(keys), cl, lock, want)
			}
			if ccl, clock, ok := c.CachedLock(s, keys, bytesOf(cs.args)); ok && (ccl != cl || clock != lock) {
				t.Errorf("CachedLock(%s, %d keys) = %s, %v; Lock said %s, %v", cs.file, len(keys), ccl, clock, cl, lock)
			}
		}
	}
	for _, src := range []string{
		`local v = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return v`,
		`local v = tonumber(redis.call('GET', KEYS[1]) or '0') + 1 redis.call('SET', KEYS[1], v, 'PX', ARGV[1]) return v`,
		`local v = tonumber(redis.call('GET', KEYS[1]) or '0') + 1 redis.call('SET', KEYS[1], v) return v`,
		`redis.call('SET', KEYS[1], ARGV[1], 'NX') return redis.call('INCRBY', KEYS[1], ARGV[2])`,
		`redis.call('HSET', KEYS[1], ARGV[1], 1) return 1`,
		`redis.call('SET', KEYS[1], redis.call('TIME')[1]) return 1`,
	} {
		var c Classes
		s := backend.Script{Src: src, SHA1: SHA1(src)}
		if cl, lock := c.Lock(t.Context(), s, []string{"k"}, bytesOf([]string{"1", "1"})); lock {
			t.Errorf("Lock(%q) = %s, true; want no lock", src, cl)
		}
		if got := Classify(t.Context(), New(Config{}), s, []string{"k"}, bytesOf([]string{"1", "1"})); got&lockBit != 0 {
			t.Errorf("Classify(%q) = %s: the lock mark leaked", src, got)
		}
	}
}
