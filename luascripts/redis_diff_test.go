package luascripts

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// redisCaller runs redis.call on a real redis-server over a plain client
// connection, answering the two errors Redis words differently inside a
// script as a script sees them (keycmd.ScriptCaller does the same).
type redisCaller struct{ c *respConn }

func (rc redisCaller) Call(_ context.Context, args [][]byte) (backend.Value, error) {
	v, err := rc.c.do(args...)
	var re *backend.ReplyError
	if errors.As(err, &re) {
		switch {
		case strings.HasPrefix(re.Reply, "ERR unknown command"):
			return v, backend.Reply("ERR Unknown Redis command called from script")
		case strings.HasPrefix(re.Reply, "ERR wrong number of arguments"):
			return v, backend.Reply("ERR Wrong number of args calling Redis command from script")
		}
	}
	return v, err
}

// diffCases are scripts whose replies, errors included, must match a real
// Redis 7 byte for byte. Each runs after FLUSHALL and SET k tok.
var diffCases = []struct {
	name string
	src  string
	keys []string
	args []string
}{
	// Conversions.
	{"release mine", releaseScript, []string{"k"}, []string{"tok"}},
	{"release other", releaseScript, []string{"k"}, []string{"x"}},
	{"release uncatalogued", releaseScript + " ", []string{"k"}, []string{"tok"}},
	{"redis-py release", "local token = redis.call('get', KEYS[1])\nif not token or token ~= ARGV[1] then\n return 0\nend\nredis.call('del', KEYS[1])\nreturn 1", []string{"k"}, []string{"tok"}},
	{"extend mine", "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end", []string{"k"}, []string{"tok", "10000"}},
	{"multi-key acquire", "for _, key in ipairs(KEYS) do if redis.call('exists', key) == 1 then return 0 end end\nfor _, key in ipairs(KEYS) do redis.call('set', key, ARGV[1], 'PX', ARGV[2]) end\nreturn #KEYS", []string{"a", "b"}, []string{"v", "10000"}},
	{"multi-key acquire held", "for _, key in ipairs(KEYS) do if redis.call('exists', key) == 1 then return 0 end end\nreturn #KEYS", []string{"a", "k"}, []string{"v"}},
	{"acquire reply", "return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 1000)", []string{"k"}, []string{"v"}},
	{"pttl", "redis.call('pexpire', KEYS[1], 100000) local t = redis.call('pttl', KEYS[1]) return t > 90000 and t <= 100000", []string{"k"}, nil},
	{"number truncates", "return 3.99", nil, nil},
	{"negative truncates", "return -3.7", nil, nil},
	{"huge number", "return 1e300", nil, nil},
	{"nan", "return 0/0", nil, nil},
	{"precision", "return 9007199254740993", nil, nil},
	{"string", "return 'a'", nil, nil},
	{"true", "return true", nil, nil},
	{"false", "return false", nil, nil},
	{"nil", "return nil", nil, nil},
	{"nothing", "local a = 1", nil, nil},
	{"function", "return tostring", nil, nil},
	{"array stops at nil", "return {1, 2, nil, 4}", nil, nil},
	{"nested", "return {1, {2, {3}}, 'x', true, false}", nil, nil},
	{"hash part ignored", "return {1, x=2}", nil, nil},
	{"ok", "return {ok='FINE'}", nil, nil},
	{"err", "return {err='boom'}", nil, nil},
	{"err with dash", "return {err='-boom'}", nil, nil},
	{"err empty", "return {err=''}", nil, nil},
	{"err newline", "return {err='x\\ny'}", nil, nil},
	{"ok newline", "return {ok='x\\r\\ny'}", nil, nil},
	{"err number", "return {err=5}", nil, nil},
	{"ok number", "return {ok=5}", nil, nil},
	{"err beats ok", "return {ok='x', err='y'}", nil, nil},
	{"errors in array", "return {1, {err='x'}, {ok='y'}}", nil, nil},
	{"double", "return {double=1.5}", nil, nil},
	{"double third", "return {double=1/3}", nil, nil},
	{"double not number", "return {double='x'}", nil, nil},
	{"map", "return {map={a=1}}", nil, nil},
	{"set", "return {set={a=true}}", nil, nil},
	{"resp3 true", "redis.setresp(3) return true", nil, nil},
	{"resp3 false", "redis.setresp(3) return false", nil, nil},
	{"resp3 nil", "redis.setresp(3) return nil", nil, nil},
	{"nil reply is false", "return {redis.call('get', 'nokey') == false, type(redis.call('get', 'nokey'))}", nil, nil},
	{"resp3 nil reply is nil", "redis.setresp(3) return redis.call('get', 'nokey') == nil", nil, nil},
	{"status reply", "return redis.call('set', 'a', 'b')", nil, nil},
	{"status reply table", "return redis.call('set', 'a', 'b').ok", nil, nil},
	{"int reply", "return redis.call('del', 'k')", nil, nil},
	{"array reply", "redis.call('set', 'b', '2') return redis.call('mget', 'k', 'nokey', 'b')", nil, nil},
	{"keys argv", "return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}", []string{"a", "b"}, []string{"c"}},
	// Lua 5.1 shares one constant slot between 0 and -0 in a function, so
	// -0 and x/0 do not go into one script.
	{"number args", "return {redis.call('echo', 3), redis.call('echo', 0.1), redis.call('echo', 1e15), redis.call('echo', 1e17), redis.call('echo', 1/0), redis.call('echo', -1/0), redis.call('echo', 2^63), redis.call('echo', -2.5e-7)}", nil, nil},
	{"minus zero arg", "return redis.call('echo', -0)", nil, nil},
	{"tostring numbers", "return {tostring(1/3), tostring(1e15), tostring(2^63), tostring(1/0), tostring(-1/0), tostring(12), tostring(0.1)}", nil, nil},
	{"tostring minus zero", "return tostring(-0)", nil, nil},
	{"set_repl", "redis.set_repl(redis.REPL_ALL) return redis.replicate_commands()", nil, nil},
	{"set_repl no args", "return redis.set_repl()", nil, nil},
	{"set_repl bad flags", "return redis.set_repl(8)", nil, nil},
	{"assert", "assert(false)", nil, nil},
	{"assert message", "assert(nil, 'msg')", nil, nil},
	{"assert passes", "return assert(1, 2)", nil, nil},
	{"deep nesting", "local t = {} local c = t for i = 1, 50 do c[1] = {} c = c[1] end return t", nil, nil},
	{"verbatim", "return {verbatim_string={format='txt', string='abc'}}", nil, nil},
	{"big_number", "return {big_number='123'}", nil, nil},
	{"sha1hex", "return {redis.sha1hex(''), redis.sha1hex(5)}", nil, nil},
	{"version", "return redis.REDIS_VERSION_NUM > 0", nil, nil},
	{"libs", "return {string.upper('x'), string.format('%05.1f', 3.14159), table.concat({'a','b'}, ','), math.floor(2.5), math.max(1, 9), tostring(12), tonumber('0x10'), select('#', 1, 2), unpack({1, 2})}", nil, nil},
	{"type of allowed", "return {type(pcall), type(xpcall), type(error), type(assert), type(ipairs), type(pairs), type(next), type(rawget), type(rawset), type(rawequal), type(setmetatable), type(getmetatable), type(tostring), type(tonumber), type(type), type(select), type(unpack), type(string), type(table), type(math), type(redis), type(_G), type(KEYS), _VERSION}", nil, nil},
	// redis.* errors and replies.
	{"error_reply", "return redis.error_reply('My Error')", nil, nil},
	{"error_reply dash", "return redis.error_reply('-My Error')", nil, nil},
	{"error_reply one word", "return redis.error_reply('x')", nil, nil},
	{"error_reply field", "return redis.error_reply('x').err", nil, nil},
	{"error_reply empty", "return redis.error_reply('')", nil, nil},
	{"error_reply dash only", "return redis.error_reply('-')", nil, nil},
	{"error_reply no args", "return redis.error_reply()", nil, nil},
	{"error_reply number", "return redis.error_reply(5)", nil, nil},
	{"status_reply", "return redis.status_reply('FINE')", nil, nil},
	{"status_reply dash", "return redis.status_reply('-x')", nil, nil},
	{"status_reply no args", "return redis.status_reply()", nil, nil},
	{"status_reply number", "return redis.status_reply(5)", nil, nil},
	{"raise error_reply", "error(redis.error_reply('boom'))", nil, nil},
	{"sha1hex no args", "return redis.sha1hex()", nil, nil},
	{"sha1hex two args", "return redis.sha1hex(1, 2)", nil, nil},
	{"log", "redis.log(redis.LOG_WARNING, 'x', 1, nil, {}) return 1", nil, nil},
	{"log no args", "return redis.log()", nil, nil},
	{"log one arg", "return redis.log(redis.LOG_WARNING)", nil, nil},
	{"log bad level", "return redis.log(99, 'x')", nil, nil},
	{"log level not number", "return redis.log('a', 'x')", nil, nil},
	{"setresp no args", "return redis.setresp()", nil, nil},
	{"setresp 4", "return redis.setresp(4)", nil, nil},
	{"setresp string", "return redis.setresp('a')", nil, nil},
	// redis.call and redis.pcall.
	{"call unknown", "return redis.call('nosuch')", nil, nil},
	{"call unknown line", "local a = 1\nreturn redis.call('nosuch')", nil, nil},
	{"call in function", "local function f()\n redis.call('nosuch')\nend\nlocal x = 1\nf()", nil, nil},
	{"call arity", "return redis.call('get')", nil, nil},
	{"call no args", "return redis.call()", nil, nil},
	{"call table arg", "return redis.call({})", nil, nil},
	{"call bool arg", "return redis.call('get', true)", nil, nil},
	{"call nil arg", "return redis.call('get', nil)", nil, nil},
	{"call command error", "return redis.call('incr', 'k')", nil, nil},
	{"pcall unknown", "return redis.pcall('nosuch')", nil, nil},
	{"pcall no args", "return redis.pcall()", nil, nil},
	{"pcall table arg", "return redis.pcall({})", nil, nil},
	{"pcall command error", "return redis.pcall('incr', 'k')", nil, nil},
	{"pcall command error field", "return redis.pcall('incr', 'k').err", nil, nil},
	{"lua pcall of call", "local ok, e = pcall(redis.call, 'nosuch') return {tostring(ok), type(e), e}", nil, nil},
	{"lua pcall of command error", "local ok, e = pcall(redis.call, 'incr', 'k') return e", nil, nil},
	{"lua pcall of error table", "local ok, e = pcall(error, {err='x'}) return {type(e), e}", nil, nil},
	{"lua pcall of err number", "local ok, e = pcall(error, {err=5}) return {type(e), e}", nil, nil},
	{"lua pcall of other table", "local ok, e = pcall(error, {foo=5}) return type(e)", nil, nil},
	{"lua pcall of string", "local ok, e = pcall(error, 's', 0) return e", nil, nil},
	{"lua pcall results", "return {pcall(function() return 1, 2 end)}", nil, nil},
	{"lua pcall not callable", "local ok, e = pcall(5) return {tostring(ok), e}", nil, nil},
	{"lua pcall nonexistent global", "local ok, e = pcall(function() return x end) return {tostring(ok), e}", nil, nil},
	{"xpcall gets table", "local ok, e = xpcall(function() redis.call('nosuch') end, function(m) return type(m) end) return e", nil, nil},
	{"rethrow call error", "local ok, e = pcall(redis.call, 'nosuch') error(e, 0)", nil, nil},
	{"rethrow call error level 1", "local ok, e = pcall(redis.call, 'nosuch') error(e)", nil, nil},
	// Errors that escape.
	{"error string", "error('boom')", nil, nil},
	{"error level 0", "error('boom', 0)", nil, nil},
	{"error with code", "error('ERR x', 0)", nil, nil},
	{"error table", "error({err='tab'})", nil, nil},
	{"error number", "error(5)", nil, nil},
	{"error nil", "error()", nil, nil},
	{"error true", "error(true)", nil, nil},
	{"error in function", "local function f() error('boom') end\nlocal x = 1\nf()", nil, nil},
	{"error in metamethod", "local t = setmetatable({}, {__index=function() error('deep') end})\nlocal x = 1\nreturn t.a", nil, nil},
	{"nonexistent global", "return x", nil, nil},
	{"nonexistent global call", "return nosuchfn()", nil, nil},
	{"create global", "x = 1", nil, nil},
	{"modify library", "string.foo = 1", nil, nil},
	{"modify redis", "redis.call = nil", nil, nil},
	{"no os", "return os.time()", nil, nil},
	{"no io", "return io.write('x')", nil, nil},
	{"no debug", "return debug.getinfo(1)", nil, nil},
	{"no dofile", "return dofile('/etc/passwd')", nil, nil},
	{"no loadfile", "return loadfile('/etc/passwd')", nil, nil},
	{"no require", "return require('os')", nil, nil},
	{"no module", "return module('x')", nil, nil},
	{"no print", "print('x')", nil, nil},
	{"no getfenv", "return getfenv(1)", nil, nil},
	{"no setfenv", "return setfenv(1, {})", nil, nil},
	{"no newproxy", "return newproxy()", nil, nil},
	{"no package", "return package.loaded", nil, nil},
	{"rawset global", "rawset(_G, 'x', 1) return 1", nil, nil},
	{"rawset library", "rawset(string, 'x', 1) return 1", nil, nil},
	{"setmetatable global", "setmetatable(_G, nil) return 1", nil, nil},
	{"getmetatable global", "return getmetatable(_G)", nil, nil},
	{"string metatable", "getmetatable('').__index.leak = 1 return 1", nil, nil},
	{"string metatable index", "local mt = getmetatable('') mt.__index = nil return 1", nil, nil},
	{"string methods", "return ('abc'):upper()", nil, nil},
	{"table.insert library", "table.insert(string, 1) return 1", nil, nil},
	{"table.insert keys", "table.insert(KEYS, 'b') return KEYS", []string{"a"}, nil},
	{"keys writable", "KEYS[1] = 5 return KEYS[1]", []string{"a"}, nil},
	{"rawset local", "local t = {} rawset(t, 1, 2) return t", nil, nil},
	{"rawget global", "return rawget(_G, 'x')", nil, nil},
	{"table.insert bad", "table.insert(nil, 1)", nil, nil},
	{"rawset bad", "rawset(nil, 1, 2)", nil, nil},
	{"setmetatable bad", "setmetatable(1, {})", nil, nil},
	{"table.remove", "local t = {1, 2} return {table.remove(t), #t}", nil, nil},
	{"recursion", "local function f(n) if n == 0 then return 0 end return 1 + f(n-1) end return f(5000)", nil, nil},
	{"stack overflow", "local function f() f() end f()", nil, nil},
	{"find init", "return {string.find('abcabc', 'b', 3)}", nil, nil},
	{"find negative init", "return {string.find('abcabc', 'b', -2)}", nil, nil},
	{"find past the end", "return {string.find('abc', '', 10)}", nil, nil},
	{"find empty", "return {string.find('abc', '', 2)}", nil, nil},
	{"find plain", "return {string.find('a.b', '.', 1, true)}", nil, nil},
	{"find captures", "return {string.find('key:42', '(%a+):(%d+)')}", nil, nil},
	{"find position captures", "return {string.find('abc', '()b()')}", nil, nil},
	{"match none", "return select('#', string.match('a', 'b'))", nil, nil},
	{"match captures", "return {string.match('lock:owner:7', '^(%w+):(%w+):(%d+)$')}", nil, nil},
	{"match init", "return string.match('hello world', '%a+', 6)", nil, nil},
	{"gmatch", "local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t+1] = k..v end return t", nil, nil},
	{"gmatch words", "local t = {} for w in string.gmatch('one two  three', '%a+') do t[#t+1] = w end return t", nil, nil},
	{"gsub escapes", "return {string.gsub('abc', '(b)', '%%x%1%0')}", nil, nil},
	{"gsub other escape", "return {string.gsub('abc', 'b', '%x')}", nil, nil},
	{"gsub table", "return {string.gsub('$a $b $c', '%$(%w+)', {a = 'A', b = false})}", nil, nil},
	{"gsub function", "return {string.gsub('abc', '%w', function(c) if c == 'b' then return nil end return c:upper() end)}", nil, nil},
	{"gsub number", "return {string.gsub('abc', 'b', 7)}", nil, nil},
	{"gsub limit", "return {string.gsub('aaaa', 'a', 'b', 2)}", nil, nil},
	{"gsub empty pattern", "return {string.gsub('abc', '', '-')}", nil, nil},
	{"gsub anchored", "return {string.gsub('aaa', '^a', 'b')}", nil, nil},
	{"gsub bad replacement", "return string.gsub('abc', 'b', true)", nil, nil},
	{"gsub bad capture", "return string.gsub('abc', 'b', '%2')", nil, nil},
	{"gsub bad table value", "return string.gsub('abc', 'b', {b = {}})", nil, nil},
	{"stack overflow under pcall", "local function f(n) return 1+f(n+1) end local ok,e=pcall(f,1) return tostring(e)", nil, nil},
	{"stack overflow under pcall line", "local function f(n)\n  return 1+f(n+1)\nend\nlocal ok,e=pcall(f,1) return {ok, e}", nil, nil},
	{"stack overflow big frames", "local function f(n) local a,b,c,d,e,g,h,i,j,k,l,m,o,p,q,r,s = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 return 1+f(n+1) end local ok,e=pcall(f,1) return e", nil, nil},
	{"C stack overflow", "local function f(n) local ok, e = pcall(f, n+1) if not ok then return {n, e} end return e end return f(1)", nil, nil},
	{"overflow again and again", "local function f(n) return 1+f(n+1) end local n = 0 for i = 1, 20 do if not pcall(f, 1) then n = n + 1 end end return n", nil, nil},
	// How many values one call returns: Lua 5.1's stack bound, in its words
	// (gopher-lua, unbounded, panicked out of the state past its maximum).
	{"unpack at the bound", "return select('#', unpack({}, 1, 7997))", nil, nil},
	{"unpack past the bound", "return select('#', unpack({}, 1, 7998))", nil, nil},
	{"unpack of 2^31", "return select('#', unpack({}, 1, 2^31))", nil, nil},
	{"unpack of a huge range", "return {unpack({}, -2^31, 2^31-1)}", nil, nil},
	{"unpack of a long table", "local t = {} for i = 1, 9000 do t[i] = i end return {pcall(unpack, t)}", nil, nil},
	{"unpack empty range", "return {unpack({1, 2}, 3, 1)}", nil, nil},
	{"unpack of a huge range under pcall", "return {pcall(unpack, {}, 1, 1e7)}", nil, nil},
	{"string.byte at the bound", "return #{string.byte(string.rep('x', 7990), 1, -1)}", nil, nil},
	{"string.byte past the bound", "return #{string.byte(string.rep('x', 9000), 1, -1)}", nil, nil},
	{"string.byte of 2 MiB", "return #{string.byte(string.rep('x', 2^21), 1, -1)}", nil, nil},
	{"string.byte negative", "return {string.byte('abcdef', -3, -1)}", nil, nil},
	{"string.byte method", "return {('abc'):byte(2, 10)}", nil, nil},
	{"string.byte defaults", "return {string.byte('abc'), string.byte('abc', 2), string.byte(123, 2, 3)}", nil, nil},
	{"string.byte bad position", "return string.byte('abc', 'x')", nil, nil},
	{"string.byte huge positions", "return {string.byte('abc', -2^40, 2^40)}", nil, nil},
	{"unpack holes and bounds", "return {unpack({1, nil, 3}, 1, 3), unpack({1, 2}, '2'), unpack({1, 2, 3}, 2^32 + 1, 2)}", nil, nil},
	{"unpack bad", "return unpack(1)", nil, nil},
	{"varargs", "return {select('#', ...), ...}", nil, nil},
	{"concat table", "return 'a' .. {}", nil, nil},
	{"concat nil", "return 'a' .. nil", nil, nil},
	{"arith on table", "return 1 + {}", nil, nil},
	{"arith on string", "return tostring(nil) + 1", nil, nil},
	{"compare", "return nil < 1", nil, nil},
	{"bad argument floor", "return math.floor('x')", nil, nil},
	{"tonumber no args", "return tonumber()", nil, nil},
	{"concat invalid", "return table.concat({{}})", nil, nil},
}

// looseCases are runtime errors that gopher-lua words differently from Lua
// 5.1 in ways luaMessage cannot repair (Lua names the variable involved,
// gopher-lua does not know it): only the error's frame is compared, the
// "ERR user_script:N: " before the message and the suffix after it.
var looseCases = []struct {
	name string
	src  string
	keys []string
	args []string
}{
	{"index nil local", "local t = nil; return t.x", nil, nil},
	{"length of nil", "return #nil", nil, nil},
	{"call nil local", "local a; a()", nil, nil},
	{"call missing method", "return ('x'):bad()", nil, nil},
}

// TestDifferentialRedis runs every diffCase on a real redis-server and on
// the Runner (whose redis.call goes to that same server) and compares the
// raw replies, in RESP2 and RESP3; looseCases compare more loosely.
func TestDifferentialRedis(t *testing.T) {
	sock := startRedis(t)
	d := &differ{r: New(Config{}), ctl: dialRESP(t, sock), data: dialRESP(t, sock)}
	for _, proto := range []int{2, 3} {
		d.ctl.mustDo(t, "HELLO", strconv.Itoa(proto))
		for _, tc := range diffCases {
			t.Run(tc.name+"/resp"+strconv.Itoa(proto), func(t *testing.T) {
				got, want := d.run(t, tc.src, tc.keys, tc.args, proto)
				if got != want {
					t.Errorf("%s\n got %q\nwant %q", tc.src, got, want)
				}
			})
		}
	}
	frame := regexp.MustCompile(`^(-ERR user_script:\d+: ).*( script: \w+, on @user_script:\d+\.\r\n)$`)
	for _, tc := range looseCases {
		t.Run(tc.name, func(t *testing.T) {
			got, want := d.run(t, tc.src, tc.keys, tc.args, 3)
			g, w := frame.FindStringSubmatch(got), frame.FindStringSubmatch(want)
			if g == nil || w == nil || g[1] != w[1] || g[2] != w[2] {
				t.Errorf("%s\n got %q\nwant %q", tc.src, got, want)
			}
		})
	}
}

// differ runs scripts on a real Redis (ctl) and on a Runner whose
// redis.call goes to that Redis (data).
type differ struct {
	r         *Runner
	ctl, data *respConn
}

// run returns the Runner's reply and Redis's, both as raw RESP in proto
// (ctl speaks proto already). Each run starts from FLUSHALL and SET k tok.
func (d *differ) run(t *testing.T, src string, keys, sargs []string, proto int) (got, want string) {
	t.Helper()
	d.ctl.mustDo(t, "FLUSHALL")
	d.ctl.mustDo(t, "SET", "k", "tok")
	eval := [][]byte{[]byte("EVAL"), []byte(src), []byte(strconv.Itoa(len(keys)))}
	for _, k := range keys {
		eval = append(eval, []byte(k))
	}
	args := make([][]byte, len(sargs))
	for i, a := range sargs {
		args[i] = []byte(a)
		eval = append(eval, args[i])
	}
	w, err := d.ctl.raw(eval...)
	if err != nil {
		t.Fatalf("real EVAL: %v", err)
	}
	d.ctl.mustDo(t, "FLUSHALL")
	d.ctl.mustDo(t, "SET", "k", "tok")
	v, err := d.r.Run(t.Context(), backend.Script{SHA1: SHA1(src), Src: src}, keys, args, redisCaller{d.data})
	var b strings.Builder
	var re *backend.ReplyError
	switch {
	case errors.As(err, &re):
		b.WriteString("-" + re.Reply + "\r\n")
	case err != nil:
		t.Fatalf("Run: %v", err)
	default:
		render(&b, v, proto)
	}
	return b.String(), string(w)
}

// TestDifferentialCompile compares compile errors with a real Redis: the
// exact ones byte for byte, the others (Lua 5.1's "'x' expected" errors,
// which gopher-lua's parser words as "unexpected symbol") up to the
// message.
func TestDifferentialCompile(t *testing.T) {
	sock := startRedis(t)
	c := dialRESP(t, sock)
	exact := []string{"return (", "return 1 +", "return }", "x = = 2", "return @",
		"local a = 1\nlocal b = ", "return \"abc", "return [[abc", "return 0x", "local a = 1\r\nreturn (\n"}
	loose := []string{"x x", "if true then", "local = 1", "return 'a' 'b'", "for i = 1 do end", "return 1 end",
		"function f( return end", "local t = {1, 2", "while true do", "local a = 1\n\nif x then\nreturn"}
	frame := regexp.MustCompile(`^ERR Error compiling script \(new function\): user_script:\d+: `)
	for _, src := range append(exact, loose...) {
		t.Run(src, func(t *testing.T) {
			_, err := c.do([]byte("EVAL"), []byte(src), []byte("0"))
			var want, got *backend.ReplyError
			if !errors.As(err, &want) {
				t.Fatalf("real EVAL: %v; want a compile error", err)
			}
			if !errors.As(Compile(src), &got) {
				t.Fatalf("Compile = %v; want a ReplyError", Compile(src))
			}
			if slices.Contains(exact, src) {
				if got.Reply != want.Reply {
					t.Errorf("Compile\n got %q\nwant %q", got.Reply, want.Reply)
				}
			} else if g, w := frame.FindString(got.Reply), frame.FindString(want.Reply); g == "" || g != w {
				t.Errorf("Compile\n got %q\nwant %q", got.Reply, want.Reply)
			}
		})
	}
}
