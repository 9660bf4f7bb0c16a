package luascripts

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// echoCaller is a pure-logic stand-in for a backend: it answers a few
// commands from a map, enough to check conversions and error flow.
type echoCaller struct {
	data map[string]string
	fail error
}

func (c *echoCaller) Call(_ context.Context, args [][]byte) (backend.Value, error) {
	if c.fail != nil {
		return backend.Value{}, c.fail
	}
	switch strings.ToLower(string(args[0])) {
	case "get":
		if v, ok := c.data[string(args[1])]; ok {
			return backend.BulkString(v), nil
		}
		return backend.NilValue, nil
	case "set":
		c.data[string(args[1])] = string(args[2])
		return backend.OKValue, nil
	case "del":
		_, ok := c.data[string(args[1])]
		delete(c.data, string(args[1]))
		return backend.Bool(ok), nil
	case "echo":
		return backend.Bulk(args[1]), nil
	case "dbl":
		return backend.Value{Kind: backend.KindDouble, Float: 1.5}, nil
	case "hmap":
		return backend.Value{Kind: backend.KindMap, Elems: []backend.Value{backend.BulkString("f"), backend.BulkString("v")}}, nil
	case "smembers":
		return backend.Value{Kind: backend.KindSet, Elems: []backend.Value{backend.BulkString("m")}}, nil
	case "bool":
		return backend.Value{Kind: backend.KindBool, Int: 1}, nil
	case "big":
		return backend.Value{Kind: backend.KindBigNumber, Str: []byte("123")}, nil
	case "verb":
		return backend.Value{Kind: backend.KindVerbatim, Str: []byte("abc")}, nil
	case "nested":
		return backend.Array(backend.ErrorValue("WRONGTYPE bad"), backend.Value{Kind: backend.KindNilArray}), nil
	case "arr":
		return backend.Array(backend.Int(1), backend.NilValue, backend.BulkString("x"), backend.Status("OK")), nil
	}
	return backend.Value{}, backend.Reply("ERR unknown command")
}

const releaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

func run(t *testing.T, r *Runner, src string, keys []string, args ...string) (backend.Value, error) {
	t.Helper()
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	c := &echoCaller{data: map[string]string{"k": "tok"}}
	return r.Run(t.Context(), backend.Script{Src: src}, keys, bargs, c)
}

func TestRunReplies(t *testing.T) {
	r := New(Config{})
	tests := []struct {
		name string
		src  string
		keys []string
		args []string
		want string
	}{
		{"release owner", releaseScript, []string{"k"}, []string{"tok"}, ":1"},
		{"release other", releaseScript, []string{"k"}, []string{"nope"}, ":0"},
		{"number truncates", "return 3.99", nil, nil, ":3"},
		{"negative truncates", "return -3.99", nil, nil, ":-3"},
		{"string", "return 'a'", nil, nil, `"a"`},
		{"true", "return true", nil, nil, ":1"},
		{"false", "return false", nil, nil, "(nil)"},
		{"nil", "return nil", nil, nil, "(nil)"},
		{"array stops at nil", "return {1, 2, nil, 4}", nil, nil, "[:1 :2]"},
		{"array with false", "return {1, false, 3}", nil, nil, "[:1 (nil) :3]"},
		{"ok table", "return {ok='FINE'}", nil, nil, "+FINE"},
		{"err table", "return {err='boom'}", nil, nil, "-boom"},
		{"err wins over ok", "return {ok='x', err='y'}", nil, nil, "-y"},
		{"error_reply", "return redis.error_reply('My Error')", nil, nil, "-My Error"},
		{"status_reply", "return redis.status_reply('FINE')", nil, nil, "+FINE"},
		{"double", "return {double=1.5}", nil, nil, ",1.5"},
		{"nil reply is false", "return redis.call('get','absent') == false", nil, nil, ":1"},
		{"resp3 nil reply is nil", "redis.setresp(3) return redis.call('get','absent') == nil", nil, nil, "#true"},
		{"reply conversion", "return redis.call('arr')", nil, nil, `[:1 (nil) "x" +OK]`},
		{"status to table", "return redis.call('arr')[4].ok", nil, nil, `"OK"`},
		{"pcall error table", "return redis.pcall('nosuch')", nil, nil, "-ERR unknown command"},
		{"pcall err field", "return redis.pcall('nosuch').err", nil, nil, `"ERR unknown command"`},
		{"number args", "return redis.call('echo', 10)", nil, nil, `"10"`},
		{"float args", "return redis.call('echo', 1.5)", nil, nil, `"1.5"`},
		{"big float args", "return redis.call('echo', 12345678901234567890)", nil, nil, `"1.2345678901234567e+19"`},
		{"sha1hex", "return redis.sha1hex('')", nil, nil, `"da39a3ee5e6b4b0d3255bfef95601890afd80709"`},
		{"keys and argv", "return {KEYS[1], ARGV[1], #KEYS, #ARGV}", []string{"a"}, []string{"b"}, `["a" "b" :1 :1]`},
		{"string lib", "return string.upper('x') .. string.format('%d', 5)", nil, nil, `"X5"`},
		{"table lib", "local t = {} table.insert(t, 'a') return table.concat(t, ',')", nil, nil, `"a"`},
		{"math lib", "return math.floor(2.5)", nil, nil, ":2"},
		{"version", "return redis.REDIS_VERSION", nil, nil, `"` + RedisVersion + `"`},
		// Replies of RESP3 types reach a script as Redis hands them over
		// (checked against Redis 7.0.15 with ZSCORE and HGETALL).
		{"double resp2", "return redis.call('dbl')", nil, nil, `"1.5"`},
		{"double resp3", "redis.setresp(3) return tostring(redis.call('dbl').double)", nil, nil, `"1.5"`},
		{"map resp2", "return redis.call('hmap')", nil, nil, `["f" "v"]`},
		{"map resp3", "redis.setresp(3) return redis.call('hmap').map.f", nil, nil, `"v"`},
		{"set resp2", "return redis.call('smembers')", nil, nil, `["m"]`},
		{"set resp3", "redis.setresp(3) return redis.call('smembers').set.m", nil, nil, "#true"},
		{"bool resp2", "return redis.call('bool')", nil, nil, ":1"},
		{"bool resp3", "redis.setresp(3) return redis.call('bool')", nil, nil, "#true"},
		{"big number resp2", "return redis.call('big')", nil, nil, `"123"`},
		{"big number resp3", "redis.setresp(3) return redis.call('big').big_number", nil, nil, `"123"`},
		{"verbatim resp3", "redis.setresp(3) return redis.call('verb').verbatim_string.string", nil, nil, `"abc"`},
		{"nested error and nil", "local r = redis.call('nested') return {r[1].err, r[2] == false}", nil, nil, `["WRONGTYPE bad" :1]`},
		{"return verbatim", "return {verbatim_string={format='txt', string='x'}}", nil, nil, `"x"`},
		{"return map", "return {map={a=1}}", nil, nil, `{"a" :1}`},
		{"return set", "return {set={a=true}}", nil, nil, `["a"]`},
		{"return big number", "return {big_number='9'}", nil, nil, `"9"`},
		{"resp3 false", "redis.setresp(3) return false", nil, nil, "#false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := run(t, r, tt.src, tt.keys, tt.args...)
			if err != nil {
				t.Fatalf("Run(%q) error: %v", tt.src, err)
			}
			if got.String() != tt.want {
				t.Errorf("Run(%q) = %s; want %s", tt.src, got, tt.want)
			}
		})
	}
}

// TestRunErrors checks the texts of errors that escape a script. Each was
// copied from a real Redis 7.0.15's reply to the same script (and
// TestDifferentialRedis keeps checking them when redis-server is here).
func TestRunErrors(t *testing.T) {
	r := New(Config{})
	tests := []struct {
		name string
		src  string
		want string // the reply without the script suffix
		line string
	}{
		{"call error", "return redis.call('nosuch')", "ERR unknown command", "1"},
		{"call error line", "local a = 1\nreturn redis.call('nosuch')", "ERR unknown command", "2"},
		{"call error in function", "local function f()\n redis.call('nosuch')\nend\nlocal x = 1\nf()", "ERR unknown command", "2"},
		{"no args", "return redis.call()", "ERR Please specify at least one argument for this redis lib call", "1"},
		{"bad arg", "return redis.call({})", "ERR Lua redis lib command arguments must be strings or integers", "1"},
		{"nil arg", "return redis.call('get', nil)", "ERR Lua redis lib command arguments must be strings or integers", "1"},
		{"nonexistent global", "return x", "ERR user_script:1: Script attempted to access nonexistent global variable 'x'", "1"},
		{"no os", "return os.time()", "ERR user_script:1: Script attempted to access nonexistent global variable 'os'", "1"},
		{"no loadstring", "return loadstring('return 1')", "ERR user_script:1: Script attempted to access nonexistent global variable 'loadstring'", "1"},
		{"create global", "x = 1", "ERR user_script:1: Attempt to modify a readonly table", "1"},
		{"modify library", "string.foo = 1", "ERR user_script:1: Attempt to modify a readonly table", "1"},
		{"rawset global", "rawset(_G, 'x', 1)", "ERR Attempt to modify a readonly table", "1"},
		{"setmetatable global", "setmetatable(_G, nil)", "ERR Attempt to modify a readonly table", "1"},
		{"string metatable", "getmetatable('').__index.x = 1", "ERR user_script:1: Attempt to modify a readonly table", "1"},
		{"error string", "return error('boom')", "ERR user_script:1: boom", "1"},
		{"error level 0", "return error('boom', 0)", "ERR boom", "1"},
		{"error with code", "error('ERR x', 0)", "ERR ERR x", "1"},
		{"error number", "error(5)", "ERR user_script:1: 5", "1"},
		{"error nil", "error()", "ERR nil", "1"},
		{"error true", "error(true)", "ERR true", "1"},
		{"error table", "return error({err='tab'})", "tab", "1"},
		{"error_reply raised", "error(redis.error_reply('boom'))", "ERR boom", "1"},
		{"rethrown call error", "local ok, e = pcall(redis.call, 'nosuch') error(e, 0)", "ERR ERR unknown command", "1"},
		{"sha1hex args", "return redis.sha1hex()", "ERR wrong number of arguments", "1"},
		{"log args", "return redis.log(redis.LOG_WARNING)", "ERR redis.log() requires two arguments or more.", "1"},
		{"log level type", "return redis.log('a', 'x')", "ERR First argument must be a number (log level).", "1"},
		{"log level", "return redis.log(99, 'x')", "ERR Invalid debug level.", "1"},
		{"setresp args", "return redis.setresp()", "ERR redis.setresp() requires one argument.", "1"},
		{"setresp version", "return redis.setresp(4)", "ERR RESP version must be 2 or 3.", "1"},
		{"set_repl args", "return redis.set_repl()", "ERR redis.set_repl() requires two arguments.", "1"},
		{"set_repl flags", "return redis.set_repl(8)", "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.", "1"},
		{"concat", "return 'a' .. {}", "ERR user_script:1: attempt to concatenate a table value", "1"},
		{"arith", "return 1 + {}", "ERR user_script:1: attempt to perform arithmetic on a table value", "1"},
		{"compare", "return nil < 1", "ERR user_script:1: attempt to compare nil with number", "1"},
		{"bad argument", "return math.floor('x')", "ERR user_script:1: bad argument #1 to 'floor' (number expected, got string)", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(t, r, tt.src, nil)
			var re *backend.ReplyError
			if !errors.As(err, &re) {
				t.Fatalf("Run(%q) error = %v; want a ReplyError", tt.src, err)
			}
			want := tt.want + " script: " + SHA1(tt.src) + ", on @user_script:" + tt.line + "."
			if re.Reply != want {
				t.Errorf("Run(%q) reply\n got %q\nwant %q", tt.src, re.Reply, want)
			}
		})
	}
}

// TestRunErrorReplies checks error replies a script returns (not raises):
// they carry no suffix. Texts from a real Redis 7.0.15.
func TestRunErrorReplies(t *testing.T) {
	r := New(Config{})
	tests := []struct{ src, want string }{
		{"return redis.pcall('nosuch')", "-ERR unknown command"},
		{"return {err='boom'}", "-boom"},
		{"return {err='x\\ny'}", "-x y"},
		{"return redis.error_reply('My Error')", "-My Error"},
		{"return redis.error_reply('x')", "-ERR x"},
		{"return redis.error_reply('-x y')", "-x y"},
		{"return redis.error_reply('')", "-ERR "},
		{"return redis.error_reply()", "-ERR wrong number or type of arguments"},
		{"return redis.status_reply(5)", "-ERR wrong number or type of arguments"},
		{"return redis.pcall()", "-ERR Please specify at least one argument for this redis lib call"},
		{"local ok, e = pcall(redis.call, 'nosuch') return e", `"ERR unknown command"`},
		{"local ok, e = pcall(error, {err='x'}) return e", `"x"`},
		{"local ok, e = pcall(function() return x end) return e", `"user_script:1: Script attempted to access nonexistent global variable 'x'"`},
		{"return {pcall()}", `[(nil) "attempt to call a boolean value"]`},
	}
	for _, tt := range tests {
		got, err := run(t, r, tt.src, nil)
		if err != nil || got.String() != tt.want {
			t.Errorf("Run(%q) = %s, %v; want %s", tt.src, got, err, tt.want)
		}
	}
}

func TestCompileError(t *testing.T) {
	tests := []struct{ src, want string }{
		{"return (", "user_script:1: unexpected symbol near '<eof>'"},
		{"local a = 1\nlocal b = ", "user_script:2: unexpected symbol near '<eof>'"},
		{"return }", "user_script:1: unexpected symbol near '}'"},
		{"return \"abc", "user_script:1: unfinished string near '<eof>'"},
		{"return 0x", "user_script:1: malformed number near '0x'"},
	}
	for _, tt := range tests {
		err := Compile(tt.src)
		var re *backend.ReplyError
		if !errors.As(err, &re) || re.Reply != "ERR Error compiling script (new function): "+tt.want {
			t.Errorf("Compile(%q) = %v; want %q", tt.src, err, tt.want)
		}
		// Run answers the same.
		if _, err := run(t, New(Config{}), tt.src, nil); !errors.As(err, &re) || re.Reply != "ERR Error compiling script (new function): "+tt.want {
			t.Errorf("Run(%q) = %v; want the compile error", tt.src, err)
		}
	}
	if err := Compile(releaseScript); err != nil {
		t.Errorf("Compile(release) = %v", err)
	}
}

func TestTimeLimit(t *testing.T) {
	r := New(Config{TimeLimit: 50 * time.Millisecond})
	for _, src := range []string{"while true do end", "while true do pcall(function() end) end",
		"local ok = pcall(function() while true do end end) return 7"} {
		_, err := run(t, r, src, nil)
		var re *backend.ReplyError
		if !errors.As(err, &re) || re.Reply != "ERR Script killed by lockproxy: it ran longer than the script time limit (50ms)" {
			t.Fatalf("Run(%q) = %v; want the time-limit error", src, err)
		}
	}
	// The runner still works afterwards.
	if got, err := run(t, r, "return 1", nil); err != nil || got.Int != 1 {
		t.Fatalf("after a timeout: %v, %v", got, err)
	}
}

// blockingCaller waits for its ctx to end, like a backend that does not
// answer.
type blockingCaller struct{}

func (blockingCaller) Call(ctx context.Context, _ [][]byte) (backend.Value, error) {
	<-ctx.Done()
	return backend.Value{}, ctx.Err()
}

func TestTimeLimitInCall(t *testing.T) {
	r := New(Config{TimeLimit: 50 * time.Millisecond})
	_, err := r.Run(t.Context(), backend.Script{Src: "return redis.pcall('get', 'k')"}, nil, nil, blockingCaller{})
	var re *backend.ReplyError
	if !errors.As(err, &re) || !strings.Contains(re.Reply, "time limit (50ms)") {
		t.Fatalf("Run with a stuck backend = %v; want the time-limit error", err)
	}
}

func TestContextCancel(t *testing.T) {
	r := New(Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, src := range []string{"while true do end", "return redis.call('get', 'k')"} {
		_, err := r.Run(ctx, backend.Script{Src: src}, nil, nil, blockingCaller{})
		var re *backend.ReplyError
		if !errors.Is(err, context.Canceled) || errors.As(err, &re) {
			t.Errorf("Run(%q) with a cancelled ctx = %v; want it to wrap context.Canceled", src, err)
		}
	}
}

func TestCallerFailureAborts(t *testing.T) {
	r := New(Config{})
	boom := errors.New("storage down")
	c := &echoCaller{fail: boom}
	for _, src := range []string{"return redis.pcall('get', 'k')",
		"local ok = pcall(redis.call, 'get', 'k') return 1",
		"local ok = pcall(redis.call, 'get', 'k') return redis.call('get', 'k')"} {
		_, err := r.Run(t.Context(), backend.Script{Src: src}, nil, nil, c)
		var re *backend.ReplyError
		if !errors.Is(err, boom) || errors.As(err, &re) {
			t.Errorf("Run(%q) with a failing storage = %v; want it to wrap %v", src, err, boom)
		}
	}
}

type panicCaller struct{}

func (panicCaller) Call(context.Context, [][]byte) (backend.Value, error) { panic("backend bug") }

// TestCallerPanic checks that a Caller's panic is not turned into a script
// error: it reaches Run's caller, even through pcall.
func TestCallerPanic(t *testing.T) {
	r := New(Config{})
	defer func() {
		if p := recover(); p != "backend bug" {
			t.Errorf("recovered %v; want the Caller's panic", p)
		}
	}()
	r.Run(t.Context(), backend.Script{Src: "pcall(redis.call, 'get', 'k') return 1"}, nil, nil, panicCaller{})
	t.Error("Run returned; want it to panic")
}

func TestNoLeakBetweenRuns(t *testing.T) {
	r := New(Config{})
	for _, src := range []string{
		"rawset(_G, 'leak', 1)",
		"table.insert(_G, 1)",
		"getmetatable('').__index.leak = 1",
		"setmetatable(_G, {__index = function() return 1 end})",
		"KEYS[1] = 'changed' table.insert(ARGV, 'more')",
		"redis.setresp(3)",
	} {
		run(t, r, src, []string{"k"}, "a")
		got, err := run(t, r, "return {type(rawget(_G, 'leak')), type(string.leak), #_G, KEYS[1], #ARGV, redis.call('get', 'nokey') == false}", []string{"k"}, "a")
		if err != nil || got.String() != `["nil" "nil" :0 "k" :1 :1]` {
			t.Errorf("after %q: %s, %v; want a fresh state", src, got, err)
		}
	}
}

func TestLog(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := New(Config{Logger: logger})
	if _, err := run(t, r, "redis.log(redis.LOG_WARNING, 'lock', 42, {}, 'held') return 1", nil); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, `msg="lock 42 held"`) {
		t.Errorf("redis.log wrote %q", out)
	}
}

func TestConcurrentRuns(t *testing.T) {
	r := New(Config{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			tok := strconv.Itoa(i)
			c := &echoCaller{data: map[string]string{"k": tok}}
			for range 50 {
				v, err := r.Run(t.Context(), backend.Script{Src: releaseScript + " "}, []string{"k"}, [][]byte{[]byte(tok)}, c)
				if err != nil || v.String() != ":1" && v.String() != ":0" {
					t.Errorf("Run = %s, %v", v, err)
					return
				}
				c.data["k"] = tok
			}
		})
	}
	wg.Wait()
}

// redisPyRelease is redis-py's Lock.release script (LUA_RELEASE_SCRIPT),
// as the library sends it.
const redisPyRelease = `
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        redis.call('del', KEYS[1])
        return 1
    `

// BenchmarkRun runs redis-py's release script on a held lock: natively
// (the catalogue knows it) and in Lua (a comment hides it from the
// catalogue), which shows what a pooled VM costs per call.
func BenchmarkRun(b *testing.B) {
	for _, bc := range []struct{ name, src string }{
		{"native", redisPyRelease},
		{"lua", redisPyRelease + "-- not catalogued"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := New(Config{})
			c := &echoCaller{data: map[string]string{}}
			s := backend.Script{Src: bc.src, SHA1: SHA1(bc.src)}
			keys, args := []string{"k"}, [][]byte{[]byte("tok")}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				c.data["k"] = "tok"
				v, err := r.Run(ctx, s, keys, args, c)
				if err != nil || v.Int != 1 {
					b.Fatal(v, err)
				}
			}
		})
	}
}
