package quorum_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/quorum"
)

// direct opens a client on each node.
func direct(t *testing.T, addrs []string) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		out[i] = redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { out[i].Close() })
	}
	return out
}

// dumpAll is what each node holds under key, by meaning: its type and
// its value in a sorted, comparable form, and whether it has a TTL.
func dumpAll(t *testing.T, cs []*redis.Client, key string) []string {
	t.Helper()
	ctx := t.Context()
	out := make([]string, len(cs))
	for i, c := range cs {
		typ := c.Type(ctx, key).Val()
		var v string
		switch typ {
		case "string":
			v = c.Get(ctx, key).Val()
		case "hash":
			m := c.HGetAll(ctx, key).Val()
			var kv []string
			for k, x := range m {
				kv = append(kv, k+"="+x)
			}
			v = strings.Join(sortStrings(kv), ",")
		case "set":
			v = strings.Join(sortStrings(c.SMembers(ctx, key).Val()), ",")
		case "list":
			v = strings.Join(c.LRange(ctx, key, 0, -1).Val(), ",")
		case "zset":
			for _, z := range c.ZRangeWithScores(ctx, key, 0, -1).Val() {
				v += z.Member.(string) + ":" + strconv.FormatFloat(z.Score, 'g', -1, 64) + ","
			}
		}
		ttl := c.PTTL(ctx, key).Val() > 0
		out[i] = typ + " " + v
		if ttl {
			out[i] += " ttl"
		}
	}
	return out
}

func sortStrings(s []string) []string {
	slices.Sort(s)
	return s
}

// TestModelScriptTypes runs scripts that write each type the model holds
// through the model path: the reply is the script's, every node ends
// holding the same value, and an expiry the script kept is each node's own
// (PEXPIRETIME unchanged, to the millisecond).
func TestModelScriptTypes(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := addrsOf(nodes)
	b := newBackend(t, addrs)
	cs := direct(t, addrs)
	ctx := t.Context()
	for _, c := range cs {
		c.HSet(ctx, "h", "a", "1", "b", "2")
		c.PExpire(ctx, "h", time.Hour)
		c.RPush(ctx, "l", "x", "y")
		c.ZAdd(ctx, "z", redis.Z{Score: 1.5, Member: "m"}, redis.Z{Score: -2, Member: "n"})
		c.SAdd(ctx, "s", "p", "q")
	}
	at := make([]int64, len(cs))
	for i, c := range cs {
		at[i] = c.PExpireTime(ctx, "h").Val().Milliseconds()
	}
	cases := []struct {
		src  string
		keys []string
		args []string
		want string // the reply, as %v
		key  string
		node string // every node's dumpAll of key
	}{
		{`return redis.call('HINCRBY', KEYS[1], 'a', 5)`, []string{"h"}, nil, "6", "h", "hash a=6,b=2 ttl"},
		{`redis.call('RPUSH', KEYS[1], 'z') return redis.call('LPOP', KEYS[1])`, []string{"l"}, nil, "x", "l", "list y,z"},
		{`return redis.call('ZINCRBY', KEYS[1], 1, 'n')`, []string{"z"}, nil, "-1", "z", "zset n:-1,m:1.5,"},
		{`redis.call('SREM', KEYS[1], 'p') return redis.call('SADD', KEYS[1], 'r')`, []string{"s"}, nil, "1", "s", "set q,r"},
		{`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return redis.call('GET', KEYS[1])`, []string{"str"}, []string{"v"}, "v", "str", "string v ttl"},
		{`return redis.call('DEL', KEYS[1])`, []string{"s"}, nil, "1", "s", "none "},
		// A key named at run time (ARGV) is read in a second round.
		{`return redis.call('INCRBY', ARGV[1], 7)`, nil, []string{"c"}, "7", "c", "string 7"},
	}
	for _, c := range cases {
		v, err := b.EvalModel(ctx, 0, script(c.src), c.keys, bytesOf(c.args), false)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got := valueString(v); got != c.want {
			t.Errorf("%s = %s; want %s", c.src, got, c.want)
		}
		settledOn(t, cs, c.key, c.node)
	}
	for i, c := range cs {
		if got := c.PExpireTime(ctx, "h").Val().Milliseconds(); got != at[i] {
			t.Errorf("node %d: h's expiry moved from %d to %d; the script kept it", i, at[i], got)
		}
	}
}

// settledOn waits until every node holds want under key (dumpAll): the
// last node may apply a commit after the majority decided it.
func settledOn(t *testing.T, cs []*redis.Client, key, want string) {
	t.Helper()
	var got []string
	if !testsrv.Settled(func() bool {
		got = dumpAll(t, cs, key)
		return !slices.ContainsFunc(got, func(g string) bool { return g != want })
	}) {
		t.Errorf("%s: the nodes hold %q; want %q on each", key, got, want)
	}
}

func valueString(v backend.Value) string {
	switch v.Kind {
	case backend.KindInt:
		return strconv.FormatInt(v.Int, 10)
	case backend.KindBulk, backend.KindStatus:
		return string(v.Str)
	case backend.KindNil:
		return "nil"
	case backend.KindArray:
		var parts []string
		for _, e := range v.Elems {
			parts = append(parts, valueString(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return "?"
}

// TestModelScriptNoMajority: nodes that hold three different values give
// no snapshot: TRYAGAIN, and nothing is written anywhere.
func TestModelScriptNoMajority(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := addrsOf(nodes)
	b := newBackend(t, addrs)
	cs := direct(t, addrs)
	ctx := t.Context()
	for i, c := range cs {
		c.Set(ctx, "k", strconv.FormatInt(int64(i), 10), 0)
	}
	_, err := b.EvalModel(ctx, 0, script(`return redis.call('INCR', KEYS[1])`), []string{"k"}, nil, false)
	var re *backend.ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Reply, "TRYAGAIN") {
		t.Fatalf("script over three values = %v; want TRYAGAIN", err)
	}
	for i, c := range cs {
		if got := c.Get(ctx, "k").Val(); got != strconv.FormatInt(int64(i), 10) {
			t.Errorf("node %d holds %q; want %d untouched", i, got, i)
		}
	}
}

// TestModelScriptStaleNode: a node that missed a write (it holds an older
// value) is outvoted, and the script's commit brings it up to date.
func TestModelScriptStaleNode(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := addrsOf(nodes)
	b := newBackend(t, addrs)
	cs := direct(t, addrs)
	ctx := t.Context()
	cs[0].Set(ctx, "k", "10", 0)
	cs[1].Set(ctx, "k", "10", 0)
	cs[2].Set(ctx, "k", "7", 0)
	v, err := b.EvalModel(ctx, 0, script(`return redis.call('INCR', KEYS[1])`), []string{"k"}, nil, false)
	if err != nil || v.Int != 11 {
		t.Fatalf("INCR by script = %v, %v; want 11", v, err)
	}
	settledOn(t, cs, "k", "string 11")
}

// blockingLog is a slog.Handler that calls each before a script's
// redis.log returns: a test acts on the nodes between the script's read
// and its commit, deterministically.
type blockingLog struct{ each func() }

func (h blockingLog) Enabled(context.Context, slog.Level) bool  { return true }
func (h blockingLog) Handle(context.Context, slog.Record) error { h.each(); return nil }
func (h blockingLog) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h blockingLog) WithGroup(string) slog.Handler             { return h }

// TestModelCommitLostIsPutBack: another writer changes the key on two
// nodes between every run's read and its commit, so the commit applies on
// one node only. It is put back there each time, and after its last
// attempt the client gets TRYAGAIN with no effect left: the one node
// holds what it held before.
func TestModelCommitLostIsPutBack(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := addrsOf(nodes)
	cs := direct(t, addrs)
	ctx := t.Context()
	for _, c := range cs {
		c.Set(ctx, "k", "5", 0)
	}
	runs := 0
	r := luascripts.New(luascripts.Config{Logger: slog.New(blockingLog{func() {
		runs++
		cs[1].IncrBy(ctx, "k", 10)
		cs[2].IncrBy(ctx, "k", 10)
	}})})
	b := newBackendCfg(t, quorum.Config{Nodes: addrs, NodeTimeout: testTimeout, Runner: r})
	_, err := b.EvalModel(ctx, 0, script(`redis.log(redis.LOG_WARNING, 'read') return redis.call('INCR', KEYS[1])`), []string{"k"}, nil, false)
	var re *backend.ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Reply, "TRYAGAIN") {
		t.Fatalf("script that loses every commit = %v; want TRYAGAIN", err)
	}
	if !testsrv.Settled(func() bool { return cs[0].Get(ctx, "k").Val() == "5" }) {
		t.Errorf("node 0 holds %q after a TRYAGAIN; want 5, put back", cs[0].Get(ctx, "k").Val())
	}
	if want := strconv.FormatInt(5+10*int64(runs), 10); cs[1].Get(ctx, "k").Val() != want || cs[2].Get(ctx, "k").Val() != want {
		t.Errorf("nodes 1 and 2 hold %q, %q; want the other writer's %s", cs[1].Get(ctx, "k").Val(), cs[2].Get(ctx, "k").Val(), want)
	}
	if runs < 2 {
		t.Errorf("the script ran %d times; a lost commit is run again", runs)
	}
}
