package keycmd_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/keycmd"
)

// keysCases are argument vectors for every key command, each asked of a
// real redis-server with COMMAND GETKEYS. want is used only where Redis
// cannot say: a command it does not know (DELIFEQ and DELEX are Redis 8.4
// and Valkey 9; the tests run Redis 7) or a vector it refuses (arity).
var keysCases = []struct {
	args []string
	want []string
}{
	{args: []string{"get", "k"}},
	{args: []string{"GET", "k"}},
	{args: []string{"get"}, want: nil},
	{args: []string{"set", "k", "v"}},
	{args: []string{"set", "k", "v", "NX", "PX", "30000"}},
	{args: []string{"set", "k", "v", "bogus"}},
	{args: []string{"set", "k"}, want: []string{"k"}},
	{args: []string{"setnx", "k", "v"}},
	{args: []string{"setex", "k", "10", "v"}},
	{args: []string{"psetex", "k", "10000", "v"}},
	{args: []string{"getdel", "k"}},
	{args: []string{"mget", "a"}},
	{args: []string{"mget", "a", "b", "a"}},
	{args: []string{"mset", "a", "1"}},
	{args: []string{"mset", "a", "1", "b", "2", "a", "3"}},
	{args: []string{"mset", "a", "1", "b"}}, // refused when run; Redis still names both keys
	{args: []string{"msetnx", "a", "1", "b", "2"}},
	{args: []string{"getrange", "k", "0", "-1"}},
	{args: []string{"del", "a"}},
	{args: []string{"del", "a", "b", "c"}},
	{args: []string{"unlink", "a", "b"}},
	{args: []string{"exists", "a", "a", "b"}},
	{args: []string{"dbsize"}, want: nil},
	{args: []string{"delifeq", "k", "v"}, want: []string{"k"}},
	{args: []string{"delex", "k"}, want: []string{"k"}},
	{args: []string{"delex", "k", "IFEQ", "v"}, want: []string{"k"}},
	{args: []string{"expire", "k", "10"}},
	{args: []string{"expire", "k", "10", "NX"}},
	{args: []string{"pexpire", "k", "10000", "GT"}},
	{args: []string{"expireat", "k", "1"}},
	{args: []string{"pexpireat", "k", "1"}},
	{args: []string{"ttl", "k"}},
	{args: []string{"pttl", "k"}},
	{args: []string{"ttl", "k", "extra"}, want: []string{"k"}},
	{args: []string{"persist", "k"}},
	{args: []string{"type", "k"}},
	{args: []string{"strlen", "k"}},
	{args: []string{"expiretime", "k"}},
	{args: []string{"pexpiretime", "k"}},
	{args: []string{"incr", "k"}},
	{args: []string{"decr", "k"}},
	{args: []string{"incrby", "k", "2"}},
	{args: []string{"decrby", "k", "2"}},
	{args: []string{"keys", "*"}, want: nil},
	{args: []string{"scan", "0"}, want: nil},
	{args: []string{"randomkey"}, want: nil},
	{args: []string{"flushdb"}, want: nil},
	{args: []string{"flushall"}, want: nil},
	{args: []string{"lockproxy", "fence", "k", "t"}, want: []string{"k"}}, // lockproxy's own
	{args: []string{"lockproxy", "help"}, want: nil},
	{args: []string{"rename", "a", "b"}},
	{args: []string{"renamenx", "a", "b"}},
	{args: []string{"copy", "a", "b", "REPLACE"}},
	{args: []string{"object", "encoding", "k"}},
	{args: []string{"zpopmin", "z"}},
	{args: []string{"zpopmax", "z", "2"}},
	{args: []string{"hset", "h", "f", "v"}},
	{args: []string{"hmset", "h", "f", "v"}},
	{args: []string{"hsetnx", "h", "f", "v"}},
	{args: []string{"hget", "h", "f"}},
	{args: []string{"hmget", "h", "f", "g"}},
	{args: []string{"hgetall", "h"}},
	{args: []string{"hkeys", "h"}},
	{args: []string{"hvals", "h"}},
	{args: []string{"hdel", "h", "f"}},
	{args: []string{"hexists", "h", "f"}},
	{args: []string{"hlen", "h"}},
	{args: []string{"hstrlen", "h", "f"}},
	{args: []string{"hincrby", "h", "f", "1"}},
	{args: []string{"sadd", "s", "a", "b"}},
	{args: []string{"srem", "s", "a"}},
	{args: []string{"sismember", "s", "a"}},
	{args: []string{"smismember", "s", "a", "b"}},
	{args: []string{"scard", "s"}},
	{args: []string{"smembers", "s"}},
	{args: []string{"lpush", "l", "a"}},
	{args: []string{"rpush", "l", "a", "b"}},
	{args: []string{"lpushx", "l", "a"}},
	{args: []string{"rpushx", "l", "a"}},
	{args: []string{"lpop", "l"}},
	{args: []string{"rpop", "l", "2"}},
	{args: []string{"lindex", "l", "0"}},
	{args: []string{"lrange", "l", "0", "-1"}},
	{args: []string{"lrem", "l", "0", "a"}},
	{args: []string{"llen", "l"}},
	{args: []string{"lmove", "l", "m", "LEFT", "RIGHT"}},
	{args: []string{"rpoplpush", "l", "m"}},
	{args: []string{"lset", "l", "0", "a"}},
	{args: []string{"ltrim", "l", "0", "1"}},
	{args: []string{"zadd", "z", "NX", "1", "a"}},
	{args: []string{"zincrby", "z", "1", "a"}},
	{args: []string{"zrem", "z", "a"}},
	{args: []string{"zscore", "z", "a"}},
	{args: []string{"zmscore", "z", "a", "b"}},
	{args: []string{"zcard", "z"}},
	{args: []string{"zcount", "z", "-inf", "+inf"}},
	{args: []string{"zrank", "z", "a"}},
	{args: []string{"zrevrank", "z", "a"}},
	{args: []string{"zrange", "z", "0", "-1", "WITHSCORES"}},
	{args: []string{"zrangebyscore", "z", "0", "10"}},
	{args: []string{"zrevrangebyscore", "z", "10", "0"}},
	{args: []string{"zrevrange", "z", "0", "-1"}},
	{args: []string{"zrangebylex", "z", "-", "+"}},
	{args: []string{"zrevrangebylex", "z", "+", "-"}},
	{args: []string{"zremrangebyscore", "z", "0", "10"}},
}

// TestKeysMatchRedis: (*Command).Keys names the keys Redis's own COMMAND
// GETKEYS names, for every command of the table; where Redis cannot answer
// (a command it does not know, arguments it refuses), the case's own want.
func TestKeysMatchRedis(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	covered := map[string]bool{}
	for _, tc := range keysCases {
		cmd := keycmd.Lookup([]byte(tc.args[0]))
		if cmd == nil {
			t.Fatalf("%s is not in the table", tc.args[0])
		}
		covered[cmd.Name] = true
		args := make([][]byte, len(tc.args))
		q := []any{"command", "getkeys"}
		for i, a := range tc.args {
			args[i] = []byte(a)
			q = append(q, a)
		}
		var got []string
		for _, k := range cmd.Keys(args) {
			got = append(got, string(k))
		}
		want, err := c.Do(t.Context(), q...).StringSlice()
		var re redis.Error
		switch {
		case errors.As(err, &re) && (strings.Contains(err.Error(), "Invalid command") ||
			strings.Contains(err.Error(), "Invalid number of arguments") ||
			strings.Contains(err.Error(), "wrong number of arguments") ||
			strings.Contains(err.Error(), "no key arguments")):
			want = tc.want // Redis cannot say
		case err != nil:
			t.Fatalf("COMMAND GETKEYS %q: %v", tc.args, err)
		case tc.want != nil && !slices.Equal(tc.want, want):
			t.Errorf("COMMAND GETKEYS %q = %q, the case says %q: fix the case", tc.args, want, tc.want)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Keys(%q) = %q; want %q", tc.args, got, want)
		}
	}
	for _, n := range keycmd.Names() {
		if !covered[n] {
			t.Errorf("no case for %s: add one to keysCases", n)
		}
	}
}

// TestKeySpecMatchesRedis: KeySpec (what lockproxy's COMMAND INFO reports)
// is Redis's first key, last key and step, for every command Redis knows.
func TestKeySpecMatchesRedis(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	for _, n := range keycmd.Names() {
		info, err := c.Do(t.Context(), "command", "info", n).Slice()
		if err != nil {
			t.Fatalf("COMMAND INFO %s: %v", n, err)
		}
		entry, ok := info[0].([]any)
		if !ok { // unknown to this Redis (DELIFEQ, DELEX)
			continue
		}
		first, last, step := keycmd.Lookup([]byte(n)).KeySpec()
		got := []int64{int64(first), int64(last), int64(step)}
		want := []int64{entry[3].(int64), entry[4].(int64), entry[5].(int64)}
		if !slices.Equal(got, want) {
			t.Errorf("KeySpec(%s) = %d; Redis says %d", n, got, want)
		}
	}
}
