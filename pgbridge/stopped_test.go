package pgbridge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestStoppedScriptLeavesNothing checks issue 40's item 2 on both
// strategies: a script that lockproxy stops after writes commits none of
// them; one that ends with its own error keeps its writes, as in Redis.
func TestStoppedScriptLeavesNothing(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			b := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: strategy,
				Runner: luascripts.New(luascripts.Config{TimeLimit: 200 * time.Millisecond, MemoryLimit: 16 << 20})})
			ctx := t.Context()
			keys := []string{"hw:key", "hw:hash", "hw:list", "hw:new"}
			eval := func(ctx context.Context, src string) (backend.Value, error) {
				return b.Eval(ctx, 0, backend.Script{Src: src}, keys, nil, false)
			}
			if _, err := eval(ctx, "redis.call('SET', KEYS[1], 'before') redis.call('HSET', KEYS[2], 'f', 'v') redis.call('RPUSH', KEYS[3], 'a', 'b') return 1"); err != nil {
				t.Fatal(err)
			}
			const state = "return {redis.call('GET', KEYS[1]), redis.call('HGETALL', KEYS[2]), redis.call('LRANGE', KEYS[3], 0, -1), redis.call('EXISTS', KEYS[4])}"
			before, err := eval(ctx, state)
			if err != nil {
				t.Fatal(err)
			}
			writes := "redis.call('SET', KEYS[1], 'partial') redis.call('HSET', KEYS[2], 'f', 'changed', 'g', 'new') redis.call('LPOP', KEYS[3]) redis.call('SET', KEYS[4], 'x') "
			for _, tc := range []struct{ name, src string }{
				{"time limit", writes + "while true do end"},
				{"memory budget", writes + "local s = 'x' for i = 1, 40 do s = s .. s end"},
				{"a write loop", "local i = 0 while true do i = i + 1 redis.call('SET', KEYS[1], i) end"},
			} {
				if _, err := eval(ctx, tc.src); !errors.Is(err, luascripts.ErrStopped) {
					t.Fatalf("%s: %v; want the script stopped", tc.name, err)
				}
				if after, err := eval(ctx, state); err != nil || after.String() != before.String() {
					t.Errorf("%s: the keys hold %s, %v; want %s as before the script", tc.name, after, err, before)
				}
			}
			if _, err := eval(ctx, "redis.call('SET', KEYS[1], 'kept') error('mine')"); err == nil || errors.Is(err, luascripts.ErrStopped) {
				t.Fatalf("a script's error: %v", err)
			}
			if got, _, _ := b.Get(ctx, 0, "hw:key"); string(got) != "kept" {
				t.Errorf("after a script's error GET = %q; want its write kept", got)
			}
		})
	}
}
