package tests

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// diffNativeStep is one command of a TestNativeLockCommands case and the
// reply expected from Redis 8.4 / Valkey 9; "<nil>" stands for the null
// reply of the connection's protocol, and a want ending in "…" is a prefix
// (an error whose end the documentation does not give).
type diffNativeStep struct {
	args []string
	want string
}

// TestNativeLockCommands covers the compare-and-set commands that the
// redis-server of the differential test (7.0) predates, so their replies
// come from the documentation: Redis 8.4's SET … IFEQ|IFNE value and
// DELEX key [IFEQ|IFNE value], Valkey 9's DELIFEQ key value. Each case
// starts on a fresh lockproxy, in RESP2 and RESP3. The replies follow the
// Redis 8.4 documentation and the tests/unit/type/string.tcl of redis/redis
// that ships DELEX; DELEX's invalid-condition text is from the fakeredis
// tests run against Redis 8.4. The digest forms (IFDEQ, IFDNE, DIGEST) are
// not served by lockproxy and are not covered.
func TestNativeLockCommands(t *testing.T) {
	s := func(want string, args ...string) diffNativeStep { return diffNativeStep{args: args, want: want} }
	const ok, one, zero, null = "+OK\r\n", ":1\r\n", ":0\r\n", "<nil>"
	cases := []struct {
		name  string
		steps []diffNativeStep
	}{
		{"set ifne on absent key creates it", []diffNativeStep{
			s(ok, "SET", "k", "v", "IFNE", "x"),
			s("$1\r\nv\r\n", "GET", "k"),
		}},
		{"set ifeq on absent key does not create it", []diffNativeStep{
			s(null, "SET", "k", "v", "IFEQ", "v"),
			s(zero, "EXISTS", "k"),
			s(null, "SET", "k", "v", "IFEQ", "v", "GET"),
			s(zero, "EXISTS", "k"),
		}},
		{"set ifeq with expiry extends an owned lock", []diffNativeStep{
			s(ok, "SET", "lock", "tok", "NX", "PX", "10000"),
			s(ok, "SET", "lock", "tok", "IFEQ", "tok", "PX", "100000"),
			s(":100\r\n", "TTL", "lock"),
			s(null, "SET", "lock", "tok", "IFEQ", "other", "PX", "500000"),
			s(":100\r\n", "TTL", "lock"),
		}},
		{"set ifeq without expiry clears the ttl", []diffNativeStep{
			s(ok, "SET", "k", "a", "EX", "100"),
			s(ok, "SET", "k", "b", "IFEQ", "a"),
			s(":-1\r\n", "TTL", "k"),
		}},
		{"set ifeq keepttl and get", []diffNativeStep{
			s(ok, "SET", "k", "a", "EX", "100"),
			s("$1\r\na\r\n", "SET", "k", "b", "KEEPTTL", "IFEQ", "a", "GET"),
			s(":100\r\n", "TTL", "k"),
			s("$1\r\nb\r\n", "SET", "k", "c", "GET", "IFEQ", "zzz"),
			s("$1\r\nb\r\n", "GET", "k"),
		}},
		{"set ifne get", []diffNativeStep{
			s(null, "SET", "k", "a", "IFNE", "x", "GET"),
			s("$1\r\na\r\n", "SET", "k", "b", "IFNE", "x", "GET"),
			s("$1\r\nb\r\n", "SET", "k", "c", "IFNE", "b", "GET"),
			s("$1\r\nb\r\n", "GET", "k"),
		}},
		{"set conditions in any case and order", []diffNativeStep{
			s(ok, "SET", "k", "a"),
			s(ok, "set", "k", "b", "px", "100000", "ifeq", "a"),
			s(ok, "SeT", "k", "c", "IfEq", "b", "Ex", "100"),
			s(ok, "SET", "k", "d", "ifne", "zz", "keepttl"),
			s(":100\r\n", "TTL", "k"),
			s("$1\r\nd\r\n", "GET", "k"),
		}},
		{"set ifeq compares binary tokens exactly", []diffNativeStep{
			s(ok, "SET", "k", "a\x00b"),
			s(null, "SET", "k", "x", "IFEQ", "a"),
			s(null, "SET", "k", "x", "IFEQ", "A\x00b"),
			s(ok, "SET", "k", "x", "IFEQ", "a\x00b"),
			s(null, "SET", "k", "y", "IFEQ", ""),
			s(ok, "SET", "e", ""),
			s(ok, "SET", "e", "y", "IFEQ", ""),
		}},
		{"set condition syntax errors", []diffNativeStep{
			s(ok, "SET", "k", "a"),
			s("-ERR syntax error\r\n", "SET", "k", "b", "IFEQ", "a", "IFNE", "c"),
			s("-ERR syntax error\r\n", "SET", "k", "b", "XX", "IFEQ", "a"),
			s("-ERR syntax error\r\n", "SET", "k", "b", "IFNE"),
			s("-ERR syntax error\r\n", "SET", "k", "b", "IFEQ", "a", "EX", "1", "PX", "1"),
			s("-ERR invalid expire time in 'set' command\r\n", "SET", "k", "b", "IFEQ", "a", "PX", "0"),
			s("-ERR value is not an integer or out of range\r\n", "SET", "k", "b", "IFEQ", "a", "EX", "x"),
			s("$1\r\na\r\n", "GET", "k"),
		}},
		{"delex conditions", []diffNativeStep{
			s(zero, "DELEX", "absent"),
			s(zero, "DELEX", "absent", "IFEQ", "x"),
			s(zero, "DELEX", "absent", "IFNE", "x"),
			s(ok, "SET", "k", "tok"),
			s(zero, "delex", "k", "ifeq", "TOK"),
			s(one, "delex", "k", "ifeq", "tok"),
			s(zero, "EXISTS", "k"),
		}},
		{"delex on an absent key answers 0 before reading the condition", []diffNativeStep{
			s(zero, "DELEX", "k", "FOO", "x"),
		}},
		{"delex errors", []diffNativeStep{
			s("-ERR wrong number of arguments for 'delex' command\r\n", "DELEX"),
			s(ok, "SET", "k", "a"),
			s("-ERR wrong number of arguments for 'delex' command\r\n", "DELEX", "k", "IFEQ"),
			s("-ERR wrong number of arguments for 'delex' command\r\n", "DELEX", "k", "IFEQ", "a", "b"),
			s("-ERR Invalid condition. Use IFEQ, IFNE, IFDEQ, or IFDNE…", "DELEX", "k", "FOO", "a"),
			s("$1\r\na\r\n", "GET", "k"),
		}},
		{"delifeq", []diffNativeStep{
			s(zero, "DELIFEQ", "absent", "x"),
			s(ok, "SET", "k", "tok", "PX", "100000"),
			s(zero, "delifeq", "k", "TOK"),
			s(one, "DelIfEq", "k", "tok"),
			s(zero, "EXISTS", "k"),
			s("-ERR wrong number of arguments for 'delifeq' command\r\n", "DELIFEQ", "k", "a", "b"),
			s("-ERR wrong number of arguments for 'delifeq' command\r\n", "DELIFEQ"),
		}},
		{"native commands inside multi", []diffNativeStep{
			s(ok, "SET", "k", "a"),
			s(ok, "MULTI"),
			s("+QUEUED\r\n", "SET", "k", "b", "IFEQ", "a", "PX", "100000"),
			s("+QUEUED\r\n", "DELIFEQ", "k", "a"),
			s("+QUEUED\r\n", "DELEX", "k", "IFNE", "a"),
			s("*3\r\n+OK\r\n:0\r\n:1\r\n", "EXEC"),
			s(zero, "EXISTS", "k"),
		}},
		{"native commands inside scripts", []diffNativeStep{
			s(ok, "SET", "k", "a"),
			s("$1\r\nb\r\n", "EVAL", "redis.call('set', KEYS[1], 'b', 'IFEQ', ARGV[1]) return redis.call('get', KEYS[1])", "1", "k", "a"),
			s(zero, "EVAL", "return redis.call('delex', KEYS[1], 'IFEQ', 'a')", "1", "k"),
			s(one, "EVAL", "return redis.call('delex', KEYS[1], 'IFNE', 'a')", "1", "k"),
			s(null, "EVAL", "return redis.call('set', KEYS[1], 'x', 'IFEQ', 'y')", "1", "k"),
			s("-ERR syntax error\r\n", "EVAL", "return redis.pcall('set', KEYS[1], 'x', 'NX', 'IFEQ', 'y')", "1", "k"),
		}},
	}
	for _, proto := range []string{"2", "3"} {
		for _, c := range cases {
			t.Run("resp"+proto+"/"+c.name, func(t *testing.T) {
				conn := dialRESP(t, testsrv.StartMemoryProxy(t))
				if _, err := conn.do("HELLO", proto); err != nil {
					t.Fatal(err)
				}
				for _, st := range c.steps {
					want := st.want
					if want == null {
						want = "$-1\r\n"
						if proto == "3" {
							want = "_\r\n"
						}
					}
					got, err := conn.do(st.args...)
					match := got == want
					if prefix, ok := strings.CutSuffix(want, "…"); ok {
						match = strings.HasPrefix(got, prefix) && strings.HasSuffix(got, "\r\n")
					}
					if err != nil || !match {
						t.Errorf("RESP%s %s = %q, %v; want %q", proto, diffShow(st.args), got, err, want)
					}
				}
			})
		}
	}
}
