package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// diffScriptCases runs every script captured from the client libraries
// (testdata/scripts/*.lua) with one and with two keys, against the states
// a lock can be in (absent, held by the caller's token, held by another
// token), and with three argument lists: the usual (token, TTL, TTL), one
// that takes the scripts' other branches (redis-py's additive extend,
// redislock's 0 TTL) and one whose TTL is not a number
// (the script's error text and line).
func diffScriptCases(t testing.TB) []diffCase {
	t.Helper()
	files, err := filepath.Glob("testdata/scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	states := []diffState{
		{"absent", nil},
		{"mine", []diffLine{diffL("SET", "lock:a", "tok", "PX", "20000"), diffL("SET", "lock:b", "tok", "PX", "20000")}},
		{"theirs", []diffLine{diffL("SET", "lock:a", "other", "PX", "20000")}},
		{"mine-no-ttl", []diffLine{diffL("SET", "lock:a", "tok"), diffL("SET", "lock:b", "tok")}},
	}
	// The bad-ttl run makes the Lua VM itself raise errors, whose wording
	// is gopher-lua's ("cannot perform sub operation between nil and
	// number" for Lua 5.1's "attempt to perform arithmetic on local …"):
	// compared up to "user_script:N:", like compile errors (luascripts doc).
	argLists := []struct {
		name string
		args []string
		mode byte
	}{
		{"", []string{"tok", "10000", "10000"}, '~'},
		{"/other-branches", []string{"tok", "20000", "0"}, '~'},
		{"/bad-ttl", []string{"tok", "abc", "x"}, '^'},
	}
	var cases []diffCase
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".lua")
		for _, st := range states {
			for _, al := range argLists {
				c := diffCase{name: "lib-script/" + name + "/" + st.name + al.name}
				c.lines = append(c.lines, st.setup...)
				// '~': a script may answer a TTL (redislock's pttl.lua).
				one := append([]string{"EVAL", string(src), "1", "lock:a"}, al.args...)
				two := append([]string{"EVAL", string(src), "2", "lock:a", "lock:b"}, al.args...)
				c.lines = append(c.lines,
					diffLine{mode: al.mode, args: one}, diffL("GET", "lock:a"), diffApprox("PTTL", "lock:a"),
					diffLine{mode: al.mode, args: two}, diffL("MGET", "lock:a", "lock:b"), diffApprox("PTTL", "lock:b"))
				cases = append(cases, c)
			}
		}
	}
	return cases
}

// diffAsFunctions returns the cases among cases that run a script with
// EVAL, with each such script run as a Redis 7 function instead, as
// Redis's own scripting tests run every case twice: the script becomes
// the body of a function test(KEYS, ARGV) of the library "diffscript",
// loaded (FUNCTION LOAD REPLACE) just before the FCALL that replaces the
// EVAL. A script with a shebang line, which cannot be a function's body,
// or one that calls what only EVAL has (redis.replicate_commands,
// breakpoint, debug: Redis's functions lack them, as Redis's scripting
// tests skip such cases for functions), and the other commands stay as
// they are. The load is compared as a Lua VM error ('^'): a body may not
// compile, in gopher-lua's words.
func diffAsFunctions(cases []diffCase) []diffCase {
	evalOnly := regexp.MustCompile(`redis\.(replicate_commands|breakpoint|debug)\b`)
	var out []diffCase
	for _, c := range cases {
		// Quorum's and postgres's runs share a proxy between cases: no
		// library of a case before may stand.
		fc := diffCase{name: "fcall/" + c.name, lines: []diffLine{diffL("FUNCTION", "FLUSH")}}
		evals := 0
		for _, l := range c.lines {
			if l.mode == '>' || len(l.args) < 3 || !strings.EqualFold(l.args[0], "EVAL") || strings.HasPrefix(l.args[1], "#!") || evalOnly.MatchString(l.args[1]) {
				fc.lines = append(fc.lines, l)
				continue
			}
			evals++
			lib := "#!lua name=diffscript\nredis.register_function('test', function(KEYS, ARGV)\n" + l.args[1] + "\nend)"
			fc.lines = append(fc.lines, diffLine{mode: '^', args: []string{"FUNCTION", "LOAD", "REPLACE", lib}},
				diffLine{mode: l.mode, args: append([]string{"FCALL", "test"}, l.args[2:]...)})
		}
		if evals > 0 {
			out = append(out, fc)
		}
	}
	return out
}
