package luascripts

import (
	"context"
	"errors"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// allocated is what the process allocated so far (bytes).
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestMemoryLimit runs scripts that build more than their memory budget
// in each way a script can: each is stopped with the memory error, soon
// (far before the time limit), having allocated a few budgets at most.
func TestMemoryLimit(t *testing.T) {
	const limit = 16 << 20
	r := New(Config{TimeLimit: 20 * time.Second, MemoryLimit: limit})
	const want = "ERR Script killed by lockproxy: it used more memory than the script memory limit (16 MiB)"
	for _, tc := range []struct{ name, src string }{
		{"doubling", "local s = 'x' for i = 1, 28 do s = s .. s end return #s"},
		{"doubling under pcall", "local s = 'x' for i = 1, 28 do pcall(function() s = s .. s end) end return #s"},
		{"table of tables", "local t = {} for i = 1, 1e8 do t[i] = {i} end return #t"},
		{"table of strings", "local t = {} for i = 1, 1e7 do t[i] = string.rep('v', 1000) .. i end return #t"},
		{"string.rep", "return #string.rep('x', 2^28)"},
		{"string.rep under pcall", "local ok = pcall(string.rep, 'abc', 2^27) return #string.rep('x', 2^28)"},
		{"table.concat", "local t = {} for i = 1, 64 do t[i] = string.rep('x', 8e6) end return #table.concat(t)"},
		{"long chain", "local s = string.rep('x', 12e6) return #(s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s..s)"},
		{"redis.call argument", "local s = string.rep('x', 12e6) return redis.call('echo', s..'-'..s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, start := allocated(), time.Now()
			_, err := run(t, r, tc.src, nil)
			took, grew := time.Since(start), allocated()-before
			var re *backend.ReplyError
			if !errors.As(err, &re) || re.Reply != want {
				t.Fatalf("Run = %v; want %q", err, want)
			}
			if took > 5*time.Second {
				t.Errorf("stopped after %v; want it stopped soon after it passed the budget", took)
			}
			// A few budgets, and what the process allocates while the
			// check waits for a CPU on a busy machine.
			if grew > 32*limit {
				t.Errorf("the script allocated %d MiB; want a few times its budget at most", grew>>20)
			}
		})
	}
	// A script that builds and drops much more than its budget, but never
	// holds it, runs to its end; and the runner serves on.
	if got, err := run(t, r, "local n = 0 for i = 1, 3e5 do local s = string.rep('x', 1000) .. i n = n + #s end return n", nil); err != nil || got.Int < 3e8 {
		t.Fatalf("garbage only: %v, %v; want the script to finish", got, err)
	}
	if got, err := run(t, r, "return 1", nil); err != nil || got.Int != 1 {
		t.Fatalf("after the stops: %v, %v", got, err)
	}
}

// TestSplitConcat checks that long `..` chains keep their value and their
// errors once split (assign.go's splitConcat).
func TestSplitConcat(t *testing.T) {
	r := New(Config{})
	for src, want := range map[string]string{
		"return 'a'..'b'..'c'..'d'..'e'..'f'..'g'..'h'..'i'..1":                                                    `"abcdefghi1"`,
		"local t = setmetatable({}, {__concat = function(a, b) return 'T' end}) return 'a'..'b'..'c'..'d'..t..'e'": `"abcdT"`,
		"return ('a'..'b')..('c'..'d'..'e'..'f'..'g')..'h'":                                                        `"abcdefgh"`,
		"return rawget(_G, '(concat)') == nil":                                                                     `:1`,
	} {
		got, err := run(t, r, src, nil)
		if err != nil || got.String() != want {
			t.Errorf("Run(%q) = %s, %v; want %s", src, got, err, want)
		}
	}
	src := "local x return 'a'..'b'..'c'..'d'..'e'..x"
	_, err := run(t, r, src, nil)
	var re *backend.ReplyError
	if !errors.As(err, &re) || re.Reply != "ERR user_script:1: attempt to concatenate a nil value script: "+SHA1(src)+", on @user_script:1." {
		t.Errorf("concatenating nil in a long chain: %v", err)
	}
}

// TestDeepRecursionAtOnce checks that a runaway recursion ends with
// Lua's "stack overflow" at once (TestDifferentialRedis holds the texts
// against Redis): it used to take gopher-lua seconds under pcall, which
// built a stack trace the square of the depth long, while the script
// held what it ran under.
func TestDeepRecursionAtOnce(t *testing.T) {
	r := New(Config{TimeLimit: 20 * time.Second})
	for src, want := range map[string]string{
		"local function f(n) return 1+f(n+1) end local ok,e=pcall(f,1) return tostring(e)":                                        `"user_script:1: stack overflow"`,
		"local function f(n) return 1+f(n+1) end local n = 0 for i = 1, 10 do if not pcall(f, 1) then n = n + 1 end end return n": ":10",
		"local function f(n) local ok, e = pcall(f, n+1) if not ok then return e end return e end return f(1)":                    `"C stack overflow"`,
	} {
		start := time.Now()
		got, err := run(t, r, src, nil)
		// At once is milliseconds; the bound leaves a loaded machine under
		// -race room (1 s was seen) and stays far below the seconds per
		// overflow of the quadratic stack trace.
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Run(%q) took %v; want it at once", src, took)
		}
		if err != nil || got.String() != want {
			t.Errorf("Run(%q) = %s, %v; want %s", src, got, err, want)
		}
	}
	// Growing arguments: the value stack fills before the call stack
	// (Redis answers the same, slowly).
	src := "local function f(...) return 1+f(1, ...) end local ok,e=pcall(f,1) return e"
	if got, err := run(t, r, src, nil); err != nil || got.String() != `"user_script:1: stack overflow"` {
		t.Errorf("Run(%q) = %s, %v; want a stack overflow", src, got, err)
	}
}

// TestStopped checks which runs lockproxy cut short (ErrStopped): the
// limits, the caller's ctx and a failed Caller; not a script's error.
func TestStopped(t *testing.T) {
	r := New(Config{TimeLimit: 50 * time.Millisecond, MemoryLimit: 16 << 20})
	for src, stopped := range map[string]bool{
		"while true do end":                     true,
		"return #string.rep('x', 2^30)":         true,
		"return redis.call('nosuchcommand')":    false,
		"error('mine')":                         false,
		"return 1":                              false,
		"local ok = pcall(error, 'x') return 1": false,
	} {
		_, err := run(t, r, src, nil)
		if errors.Is(err, ErrStopped) != stopped {
			t.Errorf("Run(%q) = %v; want stopped %v", src, err, stopped)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Run(ctx, backend.Script{Src: "return 1"}, nil, nil, blockingCaller{}); !errors.Is(err, ErrStopped) {
		t.Errorf("Run with a cancelled ctx = %v; want ErrStopped", err)
	}
	if _, err := r.Run(t.Context(), backend.Script{Src: "return redis.call('get', 'k')"}, nil, nil, &echoCaller{fail: errors.New("down")}); !errors.Is(err, ErrStopped) {
		t.Errorf("Run with a failing Caller = %v; want ErrStopped", err)
	}
}

// TestPatternsStop checks that the time limit reaches a pattern match
// (string.find(s, 'a*a*a*…b') backtracks for hours on a few hundred
// bytes, in one Lua instruction), and that gsub builds its result in time
// linear in it (gopher-lua's copied the whole string at every match).
func TestPatternsStop(t *testing.T) {
	r := New(Config{TimeLimit: 300 * time.Millisecond})
	const killed = "ERR Script killed by lockproxy: it ran longer than the script time limit (300ms)"
	for _, src := range []string{
		"return string.find(string.rep('a', 300), string.rep('a*', 8) .. 'b')",
		"return string.match(string.rep('a', 300), string.rep('a-', 8) .. 'b')",
		"for w in string.gmatch(string.rep('a', 300), string.rep('a*', 8) .. 'b') do end",
		"return string.gsub(string.rep('a', 300), string.rep('a*', 8) .. 'b', '')",
		"return pcall(string.find, string.rep('a', 300), string.rep('a*', 8) .. 'b')",
	} {
		start := time.Now()
		_, err := run(t, r, src, nil)
		var re *backend.ReplyError
		if !errors.As(err, &re) || re.Reply != killed {
			t.Errorf("Run(%q) = %v; want the time limit's error", src, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Run(%q) took %v; want it stopped at the time limit", src, took)
		}
	}
	r = New(Config{TimeLimit: 5 * time.Second})
	start := time.Now()
	if got, err := run(t, r, "local s, n = string.gsub(string.rep('a', 2e5), '', '-') return {#s, n}", nil); err != nil || got.String() != "[:400001 :200001]" {
		t.Errorf("gsub of every position = %s, %v", got, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("gsub of 200,000 positions took %v; want it linear", took)
	}
}
