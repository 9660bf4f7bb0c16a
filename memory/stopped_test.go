package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// TestStoppedScriptLeavesNothing checks issue 40's item 2: a script that
// lockproxy stops, after writes of every kind, leaves the store as it
// was; one that ends with its own error keeps its writes, as in Redis.
func TestStoppedScriptLeavesNothing(t *testing.T) {
	b := New(Config{Runner: luascripts.New(luascripts.Config{TimeLimit: 200 * time.Millisecond, MemoryLimit: 16 << 20})})
	defer b.Close(t.Context())
	ctx := t.Context()
	eval := func(ctx context.Context, src string, keys ...string) (backend.Value, error) {
		return b.Eval(ctx, 0, backend.Script{Src: src}, keys, nil, false)
	}
	if _, err := eval(ctx, "redis.call('SET', KEYS[1], 'before') redis.call('HSET', KEYS[2], 'f', 'v') redis.call('RPUSH', KEYS[3], 'a', 'b') return 1",
		"hw:key", "hw:hash", "hw:list"); err != nil {
		t.Fatal(err)
	}
	const state = "return {redis.call('GET', KEYS[1]), redis.call('HGETALL', KEYS[2]), redis.call('LRANGE', KEYS[3], 0, -1), redis.call('EXISTS', KEYS[4]), redis.call('DBSIZE')}"
	keys := []string{"hw:key", "hw:hash", "hw:list", "hw:new"}
	before, err := eval(ctx, state, keys...)
	if err != nil {
		t.Fatal(err)
	}
	writes := "redis.call('SET', KEYS[1], 'partial') redis.call('HSET', KEYS[2], 'f', 'changed', 'g', 'new') redis.call('LPOP', KEYS[3]) " +
		"redis.call('SET', KEYS[4], 'x') redis.call('SELECT', 1) redis.call('SET', 'in-db-1', 'x') redis.call('SELECT', 0) "
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name, src string
		ctx       context.Context
	}{
		{"time limit", writes + "while true do end", ctx},
		{"time limit under pcall", writes + "while true do pcall(function() while true do end end) end", ctx},
		{"memory budget", writes + "local s = 'x' for i = 1, 40 do s = s .. s end", ctx},
		{"a write loop", "local i = 0 while true do i = i + 1 redis.call('SET', KEYS[1], i) redis.call('DEL', KEYS[2]) redis.call('RENAME', KEYS[3], KEYS[4]) redis.call('RENAME', KEYS[4], KEYS[3]) end", ctx},
		{"client gone", writes + "return 1", cancelled},
	} {
		_, err := eval(tc.ctx, tc.src, keys...)
		if !errors.Is(err, luascripts.ErrStopped) {
			t.Fatalf("%s: %v; want the script stopped", tc.name, err)
		}
		if after, err := eval(ctx, state, keys...); err != nil || after.String() != before.String() {
			t.Errorf("%s: the store holds %s, %v; want %s as before the script", tc.name, after, err, before)
		}
		if n, _ := b.DBSize(ctx, 1); n != 0 {
			t.Errorf("%s: database 1 holds %d keys; want none", tc.name, n)
		}
	}
	// A script's own error keeps what it wrote before it, as in Redis.
	if _, err := eval(ctx, "redis.call('SET', KEYS[1], 'kept') error('mine')", keys...); err == nil || errors.Is(err, luascripts.ErrStopped) {
		t.Fatalf("a script's error: %v", err)
	}
	if got, _, _ := b.Get(ctx, 0, "hw:key"); string(got) != "kept" {
		t.Errorf("after a script's error GET = %q; want its write kept", got)
	}
}
