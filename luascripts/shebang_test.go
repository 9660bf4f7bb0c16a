package luascripts

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// roRedisCaller is redisCaller on a read-only run (EVAL_RO).
type roRedisCaller struct{ redisCaller }

func (roRedisCaller) ReadOnly() bool { return true }

// shebangCases are scripts with Redis 7's shebang line, run with EVAL
// or EVAL_RO; their replies must match a real Redis 7.0's byte for byte.
var shebangCases = []struct{ cmd, src string }{
	{"EVAL", "#!lua\nreturn 1"},
	{"EVAL", "#!lua\nreturn redis.call('set', 'x', '1')"},
	{"EVAL", "#!lua flags=no-writes\nreturn redis.call('set', 'x', '1')"},
	{"EVAL", "#!lua flags=no-writes\nreturn redis.call('get', 'k')"},
	{"EVAL", "#!lua flags=no-writes\nreturn redis.pcall('set', 'x', '1')"},
	{"EVAL", "#!lua flags=no-writes\nlocal ok, e = pcall(redis.call, 'del', 'k') return e"},
	{"EVAL", "#!lua flags=no-writes\nreturn redis.call('publish', 'c', 'm')"},
	{"EVAL", "#!lua flags=no-writes\nreturn redis.call('nosuch')"},
	{"EVAL", "#!lua flags=no-writes\nreturn redis.call('set', 'x')"},
	{"EVAL", "#!lua flags=allow-oom,allow-stale,no-cluster,allow-cross-slot-keys\nreturn redis.call('set', 'x', '1')"},
	{"EVAL", "#!lua flags=no-writes,allow-oom\nreturn redis.call('get', 'k')"},
	{"EVAL", "#!lua   flags=no-writes   \nreturn 2"},
	{"EVAL", "#!lua \"flags=no-writes\"\nreturn 3"},
	{"EVAL", "#!lua 'flags=no-writes' \nreturn 4"},
	{"EVAL", "#!lua flags=\nreturn 5"},
	{"EVAL", "#!lua\r\nreturn 6"},
	{"EVAL", "#!lua\nreturn 1 +"},
	{"EVAL", "#!lua\n\nerror('x')"},
	{"EVAL", "#!lua\nlocal a = 1\nreturn redis.call('nosuch')"},
	{"EVAL", "#!lua flags=bogus\nreturn 1"},
	{"EVAL", "#!lua flags=no-writes,,allow-oom\nreturn 1"},
	{"EVAL", "#!lua flags=no-writes,NO-WRITES\nreturn 1"},
	{"EVAL", "#!python\nreturn 1"},
	{"EVAL", "#!\nreturn 1"},
	{"EVAL", "#!lua"},
	{"EVAL", "#!lua flags=no-writes"},
	{"EVAL", "#!lua name=x\nreturn 1"},
	{"EVAL", "#!lua \"flags=no-writes\nreturn 1"},
	{"EVAL", "#!lua \"a\"b\nreturn 1"},
	{"EVAL", "#!lua\x00\nreturn 1"},
	{"EVAL", "#! lua\nreturn 1"},
	{"EVAL", " #!lua\nreturn 1"},
	{"EVAL", "#lua\nreturn 1"},
	{"EVAL_RO", "#!lua\nreturn 1"},
	{"EVAL_RO", "#!lua flags=allow-oom\nreturn 1"},
	{"EVAL_RO", "#!lua flags=no-writes\nreturn 1"},
	{"EVAL_RO", "#!lua flags=no-writes\nreturn redis.call('set', 'x', '1')"},
	{"EVAL_RO", "#!lua flags=bogus\nreturn 1"},
}

// TestDifferentialShebang runs shebangCases on a real redis-server and on
// the Runner and compares the raw replies.
func TestDifferentialShebang(t *testing.T) {
	sock := startRedis(t)
	ctl, data := dialRESP(t, sock), dialRESP(t, sock)
	r := New(Config{})
	for i, tc := range shebangCases {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			ctl.mustDo(t, "FLUSHALL")
			ctl.mustDo(t, "SET", "k", "tok")
			want, err := ctl.raw([]byte(tc.cmd), []byte(tc.src), []byte("0"))
			if err != nil {
				t.Fatalf("real %s: %v", tc.cmd, err)
			}
			ctl.mustDo(t, "FLUSHALL")
			ctl.mustDo(t, "SET", "k", "tok")
			var c Caller = redisCaller{data}
			if tc.cmd == "EVAL_RO" {
				c = roRedisCaller{redisCaller{data}}
			}
			v, err := r.Run(t.Context(), backend.Script{Src: tc.src}, nil, nil, c)
			var b strings.Builder
			var re *backend.ReplyError
			switch {
			case errors.As(err, &re):
				b.WriteString("-" + re.Reply + "\r\n")
			case err != nil:
				t.Fatalf("Run: %v", err)
			default:
				render(&b, v, 2)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("%s %q\n got %q\nwant %q", tc.cmd, tc.src, got, want)
			}
			if x, _ := ctl.do([]byte("EXISTS"), []byte("x")); tc.cmd == "EVAL_RO" && x.Int != 0 {
				t.Errorf("%s %q wrote x", tc.cmd, tc.src)
			}
		})
	}
}

// TestShebangCompile checks that SCRIPT LOAD's check (Compile) gives a bad
// shebang's error and accepts a good one.
func TestShebangCompile(t *testing.T) {
	if err := Compile("#!lua flags=no-writes\nreturn 1"); err != nil {
		t.Errorf("Compile(good shebang) = %v", err)
	}
	var re *backend.ReplyError
	if err := Compile("#!lua flags=bogus\nreturn 1"); !errors.As(err, &re) || re.Reply != "ERR Unexpected flag in script shebang: bogus" {
		t.Errorf("Compile(bad flag) = %v", err)
	}
}
