package migrate

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// TestClassify runs every lock library script of tests/testdata/scripts on
// the empty sandbox: the acquiring ones create their keys (with the token
// as value), the others (release, extend, reacquire, PTTL) create none.
func TestClassify(t *testing.T) {
	b := &Backend{cfg: Config{}.withDefaults()}
	acquiring := map[string]bool{
		"redislock-obtain.lua": true, "redislock094-obtain.lua": true,
		"redlock4-acquire.lua": true, "redlock5-acquire.lua": true,
		"redsync-touch-setnx.lua": true, // extend that takes the lock when it is free
	}
	files, err := filepath.Glob(filepath.Join("..", "tests", "testdata", "scripts", "*.lua"))
	if err != nil || len(files) < 10 {
		t.Fatalf("scripts: %v, %d files", err, len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		s := backend.Script{SHA1: luascripts.SHA1(string(src)), Src: string(src)}
		keys := []string{"lock:a", "lock:b"}
		args := [][]byte{[]byte("tok"), []byte("3"), []byte("10000"), []byte("0")}
		if strings.HasPrefix(name, "redlock") {
			args = [][]byte{[]byte("tok"), []byte("10000")}
		}
		p := b.classify(t.Context(), 0, s, keys, args, false)
		if got := len(p.creates) > 0; got != acquiring[name] {
			t.Errorf("%s: creates %v; want acquiring %v", name, p.creates, acquiring[name])
		}
		for _, e := range p.creates {
			if e.kind != elemString || e.tok != "tok" {
				t.Errorf("%s creates %+v; want a string holding the token", name, e)
			}
		}
		if len(p.watch) < 1 || p.watch[0] != "lock:a" {
			t.Errorf("%s: watch %v; want the declared keys first", name, p.watch)
		}
	}
	// A transaction declares no KEYS: its keys come from the run.
	exec := `local out, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  out[#out + 1] = redis.pcall(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return out`
	s := backend.Script{SHA1: luascripts.SHA1(exec), Src: exec}
	argv := func(words ...string) [][]byte {
		out := make([][]byte, len(words))
		for i, w := range words {
			out[i] = []byte(w)
		}
		return out
	}
	p := b.classify(t.Context(), 0, s, nil, argv("3", "setnx", "k", "tok", "3", "expire", "k", "10"), false)
	if want := []element{{key: "k", kind: elemString, tok: "tok"}}; !slices.Equal(p.creates, want) || len(p.watch) != 1 {
		t.Errorf("MULTI SETNX EXPIRE: creates %v, watch %v; want k created with tok", p.creates, p.watch)
	}
	p = b.classify(t.Context(), 0, s, nil, argv("2", "get", "k", "2", "del", "j"), false)
	if len(p.creates) != 0 || len(p.watch) != 2 {
		t.Errorf("MULTI GET DEL: creates %v, watch %v; want no acquire, k and j watched", p.creates, p.watch)
	}
	if p := b.classify(t.Context(), 0, s, nil, argv("3", "setnx", "k", "tok"), true); len(p.creates) != 0 {
		t.Errorf("a read-only run creates %v; want nothing", p.creates)
	}
}

// TestClassifyValues: the scripts of the libraries that keep more than a
// token per key create their field or member from nothing; their
// releases and refreshes create nothing.
func TestClassifyValues(t *testing.T) {
	b := &Backend{cfg: Config{}.withDefaults()}
	semAcquire := `redis.call('zremrangebyscore', KEYS[1], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[3]))
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('zadd', KEYS[1], ARGV[4], ARGV[2])
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
return 0`
	semRefresh := `if redis.call('zscore', KEYS[1], ARGV[2]) then
  redis.call('zadd', KEYS[1], ARGV[4], ARGV[2])
  return 1
end
return 0`
	rlock := `if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end
return redis.call('pttl', KEYS[1]);`
	sadd := `redis.call('sadd', KEYS[1], ARGV[1], ARGV[2]) redis.call('rpush', KEYS[2], 'x') return 1`
	// Redisson's unlock creates only its latch, a literal: no acquire.
	unlock := `if redis.call('get', KEYS[2]) then return 0 end redis.call('set', KEYS[2], 0, 'px', ARGV[2]) return nil`
	symfony := `redis.call('zadd', KEYS[1], 5, ARGV[1]) redis.call('zadd', KEYS[1], 5, '__write__') return true`
	args := func(words ...string) [][]byte {
		out := make([][]byte, len(words))
		for i, w := range words {
			out[i] = []byte(w)
		}
		return out
	}
	for _, tc := range []struct {
		name, src string
		keys      []string
		args      [][]byte
		want      []element
	}{
		{"semaphore acquire", semAcquire, []string{"sem"}, args("3", "id1", "5000", "1700000000000"), []element{{key: "sem", kind: elemMember, name: "id1"}}},
		{"semaphore refresh", semRefresh, []string{"sem"}, args("3", "id1", "5000", "1700000000000"), nil},
		{"redisson lock", rlock, []string{"lock"}, args("30000", "client:1"), []element{{key: "lock", kind: elemField, name: "client:1"}}},
		{"set members; a list is no element", sadd, []string{"s", "l"}, args("a", "b"), []element{{key: "s", kind: elemSetMem, name: "a"}, {key: "s", kind: elemSetMem, name: "b"}}},
		{"an unlock latch is nobody's", unlock, []string{"lock", "latch"}, args("0", "100"), nil},
		{"a counter is nobody's", `return redis.call('incrby', KEYS[1], ARGV[1])`, []string{"permits"}, args("3"), nil},
		{"Redisson passes PUBLISH in ARGV", `redis.call(ARGV[2], KEYS[2], ARGV[1]) redis.call('set', KEYS[1], 1) return 1`, []string{"latch", "ch"}, args("0", "PUBLISH"), nil},
		{"symfony's __write__ comes with the token", symfony, []string{"sy"}, args("tok"), []element{{key: "sy", kind: elemMember, name: "__write__"}, {key: "sy", kind: elemMember, name: "tok"}}},
	} {
		s := backend.Script{SHA1: luascripts.SHA1(tc.src), Src: tc.src}
		p := b.classify(t.Context(), 0, s, tc.keys, tc.args, false)
		if !slices.Equal(p.creates, tc.want) {
			t.Errorf("%s: creates %+v; want %+v", tc.name, p.creates, tc.want)
		}
		if tc.name == "symfony's __write__ comes with the token" && !slices.Equal(p.mine, []bool{false, true}) {
			t.Errorf("%s: mine %v; want the token only", tc.name, p.mine)
		}
	}
}

func TestDirectClients(t *testing.T) {
	list := "id=3 addr=127.0.0.1:5 laddr=x fd=8 name=lockproxy-migrate age=9 idle=0 flags=N cmd=client|list\n" +
		"id=4 addr=127.0.0.1:6 laddr=x fd=9 name= age=30 idle=12 flags=N cmd=get\n" +
		"id=5 addr=127.0.0.1:7 laddr=x fd=10 name=app age=30 idle=4 flags=N cmd=set\n" +
		"id=6 addr=127.0.0.1:8 laddr=x fd=11 name= age=30 idle=0 flags=S cmd=replconf\n" +
		"id=7 addr=127.0.0.1:9 laddr=x fd=12 name= age=0 idle=0 flags=N cmd=NULL\n" // lockproxy's, before its SETNAME
	own := func(addr string) bool { return addr == "127.0.0.1:9" }
	if n, idle := directClients(list, "lockproxy-migrate", own); n != 2 || idle != 4 {
		t.Errorf("directClients = %d, idle %d; want 2 (lockproxy's, named or not yet, and the replica left out), idle 4", n, idle)
	}
	if n, _ := directClients("", "lockproxy-migrate", own); n != 0 {
		t.Errorf("directClients of an empty list = %d", n)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Legacy
		bad  string
	}{
		{in: "redis://legacy:6379", want: Legacy{Addr: "legacy:6379", Host: "legacy"}},
		{in: "redis://legacy", want: Legacy{Addr: "legacy:6379", Host: "legacy"}},
		{in: "rediss://u:p@legacy:6380", want: Legacy{Addr: "legacy:6380", Host: "legacy", Username: "u", Password: "p", TLS: true}},
		{in: "redis://secret@legacy:6379", want: Legacy{Addr: "legacy:6379", Host: "legacy", Password: "secret"}},
		{in: "http://legacy:6379", bad: "is not a redis:// or rediss:// URL"},
		{in: "redis://legacy:6379/1", bad: "database"},
		{in: "redis://legacy:6379?db=1", bad: "options"},
	} {
		got, err := ParseURL(tc.in)
		switch {
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("ParseURL(%q) = %v; want an error with %q", tc.in, err, tc.bad)
		case tc.bad == "" && (err != nil || got != tc.want):
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"redis://u:p@legacy:6379":    "redis://u:xxxxx@legacy:6379",
		"redis://secret@legacy:6379": "redis://:xxxxx@legacy:6379",
		"redis://legacy:6379":        "redis://legacy:6379",
	} {
		if got := MaskURL(in); got != want || strings.Contains(got, "secret") {
			t.Errorf("MaskURL(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestOwnConns: a connection the wrapped dialer opened is known by its
// local address, as CLIENT LIST shows it, until it is closed.
func TestOwnConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var own ownConns
	var d net.Dialer
	c, err := own.dialer(d.DialContext)(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	local := c.LocalAddr().String()
	if !own.has(local) {
		t.Errorf("has(%s) = false for an open connection", local)
	}
	c.Close()
	c.Close()
	if own.has(local) {
		t.Errorf("has(%s) = true after Close", local)
	}
}

// TestStatusHysteresis: the legacy Redis is reported down after two failed
// reads in a row, not one; before any success, at the first failure.
func TestStatusHysteresis(t *testing.T) {
	var s status
	s.init()
	if !s.failure() || s.up() {
		t.Fatal("a failure before any success: want down at once")
	}
	if !s.success() || !s.up() {
		t.Fatal("a success: want up")
	}
	if s.failure() || !s.up() {
		t.Fatal("one failure after a success: want still up")
	}
	if s.success() || !s.up() {
		t.Fatal("a success after one failure: want up, no change")
	}
	s.failure()
	if !s.failure() || s.up() {
		t.Fatal("two failures in a row: want down")
	}
	if s.failure() {
		t.Fatal("a third failure: already down, no change")
	}
}
