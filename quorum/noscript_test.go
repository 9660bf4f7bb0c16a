package quorum_test

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// Issue 39: no client-supplied Lua runs on a node. These tests drive
// scripts that are not lock scripts (counters, reads, TIME, values,
// keyless) through the quorum backend.

// monitorLines records every command a node runs from a client (MONITOR),
// until stop, which returns them.
func monitorLines(t *testing.T, node *testsrv.Redis) (stop func() []string) {
	t.Helper()
	conn, err := net.Dial("tcp", node.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	conn.Write([]byte("MONITOR\r\n"))
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	return func() []string {
		marker := fmt.Sprintf("end-of-test-%d", time.Now().UnixNano())
		c := redis.NewClient(&redis.Options{Addr: node.Addr})
		c.Echo(t.Context(), marker)
		c.Close()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var out []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("MONITOR: %v", err)
			}
			if strings.Contains(line, marker) {
				return out
			}
			out = append(out, line)
		}
	}
}

// TestNoClientScriptOnNodes runs scripts of every kind that is not a lock
// script — a counter, a rate limiter reading TIME, a hash, a read of a
// PTTL, a keyless one, a key named in ARGV, one that fails, EVAL_RO —
// through a proxy on the quorum backend, while MONITOR watches each node:
// neither a script's text nor its SHA1 ever reaches a node, only
// lockproxy's own scripts and commands. Before issue 39 each was sent to
// every node by EVALSHA (and its text by SCRIPT LOAD or EVAL).
func TestNoClientScriptOnNodes(t *testing.T) {
	nodes := startNodes(t, 3)
	c, _ := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	stops := make([]func() []string, len(nodes))
	for i, n := range nodes {
		stops[i] = monitorLines(t, n)
	}
	type call struct {
		src  string
		keys []string
		args []any
		ro   bool
	}
	calls := []call{
		{src: `return redis.call('INCR', KEYS[1])`, keys: []string{"ctr"}},
		{src: `local t = redis.call('TIME') local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) return {n, t[1]}`, keys: []string{"rl"}},
		{src: `redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return redis.call('HGETALL', KEYS[1])`, keys: []string{"h"}, args: []any{"f", "v"}},
		{src: `return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`, keys: []string{"rl"}},
		{src: `return 'keyless ' .. ARGV[1]`, args: []any{"x"}},
		{src: `return redis.call('SET', ARGV[1], 'named at run time')`, args: []any{"runtime"}},
		{src: `redis.call('SET', KEYS[1], 'x') return redis.call('INCR', KEYS[1])`, keys: []string{"fails"}},
		{src: `return redis.call('GET', KEYS[1])`, keys: []string{"ctr"}, ro: true},
		{src: `local x = 0 for i = 1, 1000 do x = x + i end return x`},
	}
	for range 3 {
		for _, cl := range calls {
			var err error
			if cl.ro {
				err = c.EvalRO(ctx, cl.src, cl.keys, cl.args...).Err()
			} else {
				err = c.Eval(ctx, cl.src, cl.keys, cl.args...).Err()
			}
			if err != nil && err != redis.Nil && !strings.Contains(err.Error(), "not an integer") {
				t.Fatalf("EVAL %q: %v", cl.src, err)
			}
			// And by EVALSHA, as libraries send them.
			sha := luascripts.SHA1(cl.src)
			if !cl.ro {
				if err := c.EvalSha(ctx, sha, cl.keys, cl.args...).Err(); err != nil && err != redis.Nil && !strings.Contains(err.Error(), "not an integer") {
					t.Fatalf("EVALSHA %q: %v", cl.src, err)
				}
			}
		}
	}
	for i, stop := range stops {
		lines := stop()
		evals := 0
		for _, line := range lines {
			if strings.Contains(line, " lua] ") {
				continue // a command of lockproxy's own script, inside it
			}
			lower := strings.ToLower(line)
			if strings.Contains(lower, `"evalsha"`) || strings.Contains(lower, `"eval"`) {
				evals++
			}
			for _, cl := range calls {
				if strings.Contains(line, luascripts.SHA1(cl.src)) || strings.Contains(line, cl.src) {
					t.Errorf("node %d ran the client's script %q: %s", i, cl.src, line)
				}
			}
		}
		if evals == 0 {
			t.Errorf("node %d ran no script at all: the keys were not read through it", i)
		}
	}
}

// TestLoopingScriptLeavesNodesFree: EVAL 'while true do end' 0 through
// the quorum backend runs in lockproxy, under its script time limit: every
// node answers PING meanwhile, a lock client on another connection is
// served, and the script is stopped at the limit. Before issue 39 it ran on
// every node, and each answered BUSY until someone sent SCRIPT KILL.
func TestLoopingScriptLeavesNodesFree(t *testing.T) {
	const limit = 300 * time.Millisecond
	nodes := startNodes(t, 3)
	b := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout,
		Runner: luascripts.New(luascripts.Config{TimeLimit: limit})})
	addr := testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b)
	looper := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	canary := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer looper.Close()
	defer canary.Close()
	ctx := t.Context()
	if err := canary.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{`while true do end`, `redis.call('SET', KEYS[1], 'x') while true do end`} {
		keys := []string{}
		if strings.Contains(src, "KEYS") {
			keys = []string{"busy"}
		}
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- looper.Eval(ctx, src, keys).Err() }()
		// While it runs: the nodes answer, and a lock is served.
		for i, n := range nodes {
			d := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			err := d.Ping(ctx).Err()
			d.Close()
			if err != nil {
				t.Errorf("%s: node %d answers PING with %v while the script runs", src, i, err)
			}
		}
		ok, err := canary.SetNX(ctx, "canary:"+src, "tok", time.Minute).Result()
		if err != nil || !ok {
			t.Errorf("%s: the canary's SET NX = %v, %v while the script runs; want OK", src, ok, err)
		}
		if d := time.Since(start); d > limit+time.Second {
			t.Errorf("%s: the canary was served after %v; want within the script limit + 1s", src, d)
		}
		err = <-done
		if err == nil || !strings.Contains(err.Error(), "Script killed by lockproxy") {
			t.Errorf("%s: EVAL = %v; want the script killed at lockproxy's limit", src, err)
		}
		// Its first call also classifies it (probes of 250ms at most each).
		if d := time.Since(start); d > limit+2*time.Second {
			t.Errorf("%s: the script was stopped after %v; want within the limit + 2s", src, d)
		}
	}
}

// TestScriptTimeAndPTTLAsOnMemory: a script reading TIME answers as it
// does on memory (one clock: one value, which every node then holds), and
// one returning {GET, PTTL} answers the value and a PTTL near the nodes',
// where the nodes' PTTLs differ by milliseconds. Before issue 39, each
// node ran TIME on its own clock and stored its own value (the nodes
// diverged), and {GET, PTTL} found no two equal replies (TRYAGAIN).
func TestScriptTimeAndPTTLAsOnMemory(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := addrsOf(nodes)
	b := newBackend(t, addrs)
	mem := memory.New(memory.Config{})
	cs := direct(t, addrs)
	ctx := t.Context()

	timeSrc := script(`local t = redis.call('TIME') local v = t[1] .. '.' .. t[2] redis.call('SET', KEYS[1], v) return v`)
	before := time.Now()
	for _, be := range []backend.Backend{mem, b} {
		v, err := be.Eval(ctx, 0, timeSrc, []string{"clock"}, nil, false)
		if err != nil || v.Kind != backend.KindBulk {
			t.Fatalf("%T: TIME script = %v, %v; want a bulk string", be, v, err)
		}
		secs, err := strconv.ParseFloat(string(v.Str), 64)
		if err != nil || secs < float64(before.Unix()) || secs > float64(time.Now().Unix()+1) {
			t.Fatalf("%T: TIME script = %s; want the current time", be, v.Str)
		}
		if be == backend.Backend(b) {
			settledOn(t, cs, "clock", "string "+string(v.Str))
		}
	}

	for i, c := range cs { // as three nodes set at slightly different times hold it
		c.Set(ctx, "lk", "tok", time.Duration(60000-7*i)*time.Millisecond)
	}
	mem.Set(ctx, 0, "lk", []byte("tok"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}})
	pttlSrc := script(`return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`)
	for _, be := range []backend.Backend{mem, b} {
		v, err := be.Eval(ctx, 0, pttlSrc, []string{"lk"}, nil, false)
		if err != nil || v.Kind != backend.KindArray || len(v.Elems) != 2 || string(v.Elems[0].Str) != "tok" ||
			v.Elems[1].Kind != backend.KindInt || v.Elems[1].Int <= 55000 || v.Elems[1].Int > 60000 {
			t.Fatalf("%T: {GET, PTTL} = %v, %v; want [tok, a PTTL a little under 60000]", be, v, err)
		}
	}
	for i, c := range cs {
		if got := c.Get(ctx, "lk").Val(); got != "tok" {
			t.Errorf("node %d: lk = %q after a read; want tok", i, got)
		}
	}
}
