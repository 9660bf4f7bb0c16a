package tests

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestOpsPassthrough runs the real binary with --passthrough to a real
// redis-server (which requires AUTH as user app): non-lock commands reach
// the upstream and their raw replies come back byte for byte as a direct
// connection gets them, in RESP2 and RESP3 and in the client's database;
// lock commands stay in lockproxy; blocking and pub/sub commands and
// forwarded commands inside MULTI are refused; the upstream's password
// never reaches the log; an upstream restart costs one TRYAGAIN.
func TestOpsPassthrough(t *testing.T) {
	t.Parallel()
	cli := testsrv.Need(t, "redis-cli")
	bin := testsrv.BuildLockproxy(t)
	upstream := testsrv.StartRedis(t, "--user", "default", "off", "--user", testsrv.ProbeUser, "on", ">"+testsrv.ProbeUser, "+@all",
		"--user", "app", "on", ">apppw", "~*", "&*", "+@all")
	lp := testsrv.StartBinary(t, bin, "--passthrough", "redis://app:apppw@"+upstream.Addr)
	ctx := t.Context()
	direct := redis.NewClient(&redis.Options{Addr: upstream.Addr, Username: "app", Password: "apppw"})
	defer direct.Close()

	// Writes through lockproxy land upstream, in the client's database.
	for _, proto := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: lp.Addr, Protocol: proto, DB: 3, PoolSize: 1})
		if err := c.HSet(ctx, "h", "f", "v", "g", "w").Err(); err != nil {
			t.Fatalf("RESP%d HSET through lockproxy: %v", proto, err)
		}
		if m, err := c.HGetAll(ctx, "h").Result(); err != nil || m["f"] != "v" || len(m) != 2 {
			t.Errorf("RESP%d HGETALL = %v, %v", proto, m, err)
		}
		if err := c.SetArgs(ctx, "lock", "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil && proto == 2 {
			t.Errorf("SET NX (a lock command, served by lockproxy) = %v", err)
		}
		c.Close()
	}
	direct3 := redis.NewClient(&redis.Options{Addr: upstream.Addr, Username: "app", Password: "apppw", DB: 3})
	defer direct3.Close()
	if v, err := direct3.HGet(ctx, "h", "f").Result(); err != nil || v != "v" {
		t.Errorf("upstream db 3 HGET h f = %q, %v; want v (the client's SELECT replayed upstream)", v, err)
	}
	if n, _ := direct.Exists(ctx, "h").Result(); n != 0 {
		t.Error("upstream db 0 has h: the client's database was not kept")
	}
	if n, _ := direct3.Exists(ctx, "lock").Result(); n != 0 {
		t.Error("the lock reached the upstream; lock commands must stay in lockproxy")
	}

	// Raw replies, byte for byte, against a direct connection.
	for _, p := range []string{"2", "3"} {
		via, dir := dialRESP(t, lp.Addr), dialRESP(t, upstream.Addr)
		if _, err := dir.do("AUTH", "app", "apppw"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*respConn{via, dir} {
			c.do("HELLO", p)
		}
		for _, cmd := range [][]string{ // written through lockproxy only
			{"RPUSH", "l" + p, "a", "b", "c"}, {"ZADD", "z" + p, "1.5", "a", "2", "b"}, {"SADD", "s" + p, "x"},
			{"INCRBYFLOAT", "f" + p, "0.5"}, {"HSET", "h" + p, "f", "v"}, {"XADD", "x" + p, "1-1", "k", "v"},
		} {
			if got, err := via.do(cmd...); err != nil || strings.HasPrefix(got, "-") {
				t.Errorf("RESP%s %v through lockproxy = %q, %v", p, cmd, got, err)
			}
		}
		for _, cmd := range [][]string{ // read both ways
			{"LRANGE", "l" + p, "0", "-1"}, {"ZRANGE", "z" + p, "0", "-1", "WITHSCORES"}, {"SMEMBERS", "s" + p},
			{"HGETALL", "h" + p}, {"HGET", "h" + p, "nope"}, {"TYPE", "l" + p}, {"NOSUCHCOMMAND", "x"}, {"HSET", "h" + p},
			{"LPOS", "l" + p, "zz"}, {"XRANGE", "x" + p, "-", "+"}, {"OBJECT", "ENCODING", "l" + p}, {"HRANDFIELD", "h" + p, "1", "WITHVALUES"},
			{"INCRBYFLOAT", "nosuch" + p, "0"}, {"ZSCORE", "z" + p, "a"},
		} {
			d, derr := dir.do(cmd...)
			v, verr := via.do(cmd...)
			if d != v || derr != nil || verr != nil {
				t.Errorf("RESP%s %v:\n direct    %q %v\n lockproxy %q %v", p, cmd, d, derr, v, verr)
			}
		}
	}

	// Refused, with reasons.
	c := dialRESP(t, lp.Addr)
	for _, step := range []struct{ cmd, want []string }{
		{[]string{"BLPOP", "q", "0"}, []string{"-ERR lockproxy passthrough does not forward 'blpop' (blocking, pub/sub, MONITOR, replication and WATCH need a direct connection to Redis)\r\n"}},
		{[]string{"XREAD", "BLOCK", "0", "STREAMS", "x", "$"}, []string{"-ERR lockproxy passthrough does not forward 'xread block' (blocking, pub/sub, MONITOR, replication and WATCH need a direct connection to Redis)\r\n"}},
		{[]string{"SSUBSCRIBE", "ch"}, []string{"-ERR lockproxy passthrough does not forward 'ssubscribe' (blocking, pub/sub, MONITOR, replication and WATCH need a direct connection to Redis)\r\n"}},
		{[]string{"MULTI"}, []string{"+OK\r\n"}},
		{[]string{"HSET", "m", "f", "v"}, []string{"-ERR lockproxy passthrough cannot queue 'hset' in MULTI: the transaction runs in lockproxy, not in the upstream Redis\r\n"}},
		{[]string{"EXEC"}, []string{"-EXECABORT Transaction discarded because of previous errors.\r\n"}},
		{[]string{"PUBLISH", "ch", "m"}, []string{":0\r\n"}}, // lockproxy's own pub/sub (docs/pubsub.md)
	} {
		if got, err := c.do(step.cmd...); err != nil || got != step.want[0] {
			t.Errorf("%v = %q, %v; want %q", step.cmd, got, err, step.want[0])
		}
	}

	ic := redis.NewClient(&redis.Options{Addr: lp.Addr})
	if info, err := ic.Info(ctx).Result(); err != nil || !strings.Contains(info, "lockproxy_passthrough:true") {
		t.Errorf("INFO lacks lockproxy_passthrough:true (%v)", err)
	}
	ic.Close()
	host, port := clientSplitAddr(lp.Addr)
	if out, err := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "HINCRBY", "cli", "n", "5").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "5" {
		t.Errorf("redis-cli HINCRBY through lockproxy = %q, %v; want 5", out, err)
	}

	// An upstream restart: one TRYAGAIN on the dead connection, then served again.
	c = dialRESP(t, lp.Addr)
	if got, _ := c.do("HSET", "r", "f", "1"); got != ":1\r\n" {
		t.Fatalf("HSET = %q", got)
	}
	upstream.Restart()
	if got, _ := c.do("HGET", "r", "f"); got != "-TRYAGAIN passthrough: the upstream Redis did not answer\r\n" && got != "$-1\r\n" {
		t.Errorf("HGET after the upstream restarted = %q; want TRYAGAIN (or nil if it reconnected)", got)
	}
	if got, _ := c.do("HSET", "r", "f", "2"); got != ":1\r\n" {
		t.Errorf("HSET on the restarted upstream = %q; want :1 (a new upstream connection)", got)
	}
	if strings.Contains(lp.Logs(), "apppw") {
		t.Errorf("the upstream password reached the log:\n%s", lp.Logs())
	}
	if !strings.Contains(lp.Logs(), "passthrough=redis://app:xxxxx@") {
		t.Errorf("the start line does not show the (masked) passthrough:\n%s", lp.Logs())
	}
}
