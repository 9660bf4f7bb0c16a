package luascripts

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
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

// TestRunErrors checks the texts of errors that escape a script against
// those a real Redis 7.0.15 gave for the same scripts.
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
		{"no args", "return redis.call()", "ERR Please specify at least one argument for this redis lib call", "1"},
		{"bad arg", "return redis.call({})", "ERR Lua redis lib command arguments must be strings or integers", "1"},
		{"nonexistent global", "return x", "ERR user_script:1: Script attempted to access nonexistent global variable 'x'", "1"},
		{"no os", "return os.time()", "ERR user_script:1: Script attempted to access nonexistent global variable 'os'", "1"},
		{"no loadstring", "return loadstring('return 1')", "ERR user_script:1: Script attempted to access nonexistent global variable 'loadstring'", "1"},
		{"create global", "x = 1", "ERR user_script:1: Attempt to modify a readonly table", "1"},
		{"modify library", "string.foo = 1", "ERR user_script:1: Attempt to modify a readonly table", "1"},
		{"error string", "return error('boom')", "ERR user_script:1: boom", "1"},
		{"error level 0", "return error('boom', 0)", "ERR boom", "1"},
		{"error table", "return error({err='tab'})", "tab", "1"},
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

func TestCompileError(t *testing.T) {
	for _, src := range []string{"return (", "x x", "if true then"} {
		err := Compile(src)
		var re *backend.ReplyError
		if !errors.As(err, &re) || !strings.HasPrefix(re.Reply, "ERR Error compiling script (new function): user_script:1: ") {
			t.Errorf("Compile(%q) = %v; want Redis's compile error", src, err)
		}
	}
	if err := Compile(releaseScript); err != nil {
		t.Errorf("Compile(release) = %v", err)
	}
}

func TestTimeLimit(t *testing.T) {
	r := New(Config{TimeLimit: 50 * time.Millisecond})
	_, err := run(t, r, "while true do end", nil)
	var re *backend.ReplyError
	if !errors.As(err, &re) || !strings.Contains(re.Reply, "time limit") {
		t.Fatalf("endless loop: %v; want the time-limit error", err)
	}
	// The runner still works afterwards.
	if got, err := run(t, r, "return 1", nil); err != nil || got.Int != 1 {
		t.Fatalf("after a timeout: %v, %v", got, err)
	}
}

func TestCallerFailureAborts(t *testing.T) {
	r := New(Config{})
	boom := errors.New("storage down")
	c := &echoCaller{fail: boom}
	_, err := r.Run(t.Context(), backend.Script{Src: "local ok = pcall(redis.call, 'get', 'k') return redis.call('get', 'k')"}, nil, nil, c)
	if !errors.Is(err, boom) {
		t.Fatalf("Run with a failing storage = %v; want it to wrap %v", err, boom)
	}
}

func TestNoLeakBetweenRuns(t *testing.T) {
	r := New(Config{})
	if _, err := run(t, r, "rawset(_G, 'leak', 1) return 1", nil); err == nil {
		// rawset on the read-only proxy lands in the proxy table itself;
		// a second run must still not see it as a global.
		if _, err := run(t, r, "return leak", nil); err == nil {
			t.Fatal("a global set by one run was visible to the next")
		}
	}
}

func BenchmarkRun(b *testing.B) {
	r := New(Config{})
	c := &echoCaller{data: map[string]string{"k": "tok"}}
	s := backend.Script{Src: releaseScript, SHA1: SHA1(releaseScript)}
	keys, args := []string{"k"}, [][]byte{[]byte("other")}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Run(ctx, s, keys, args, c); err != nil {
			b.Fatal(err)
		}
	}
}
