package migrate_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/proxy"
)

// rig is a migrating lockproxy over a memory backend: c talks to lockproxy,
// legacy directly to the legacy Redis, inner is the memory backend itself.
type rig struct {
	c, legacy *redis.Client
	inner     *memory.Backend
	redis     *testsrv.Redis
	addr      string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	inner := memory.New(memory.Config{})
	addr, lr, _ := testsrv.StartMigratingProxy(t, "memory", inner)
	r := &rig{inner: inner, redis: lr, addr: addr,
		c:      redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}),
		legacy: redis.NewClient(&redis.Options{Addr: lr.Addr, MaxRetries: -1}),
	}
	t.Cleanup(func() { r.c.Close(); r.legacy.Close() })
	return r
}

// innerGet reads key straight from the memory backend.
func (r *rig) innerGet(t *testing.T, key string) string {
	t.Helper()
	tok, ok, err := r.inner.Get(t.Context(), 0, key)
	if err != nil {
		t.Fatalf("inner GET %s: %v", key, err)
	}
	if !ok {
		return "(nil)"
	}
	return string(tok)
}

// legacyGet reads key straight from the legacy Redis.
func (r *rig) legacyGet(t *testing.T, key string) string {
	t.Helper()
	v, err := r.legacy.Get(t.Context(), key).Result()
	if err == redis.Nil {
		return "(nil)"
	}
	if err != nil {
		t.Fatalf("legacy GET %s: %v", key, err)
	}
	return v
}

func script(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "tests", "testdata", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMigrateSetNX(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()

	// Held directly on the legacy Redis: refused through lockproxy, nothing
	// left in the backend.
	if err := r.legacy.Set(ctx, "a", "direct", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.c.SetNX(ctx, "a", "proxied", time.Minute).Result(); err != nil || ok {
		t.Fatalf("SET a NX through lockproxy = %v, %v; want refused", ok, err)
	}
	if got := r.innerGet(t, "a"); got != "(nil)" {
		t.Errorf("backend a = %s after a refused acquire; want nothing", got)
	}

	// Held through lockproxy: refused directly on the legacy Redis; both
	// sides hold the token.
	if ok, err := r.c.SetNX(ctx, "b", "proxied", time.Minute).Result(); err != nil || !ok {
		t.Fatalf("SET b NX through lockproxy = %v, %v; want OK", ok, err)
	}
	if ok, err := r.legacy.SetNX(ctx, "b", "direct", time.Minute).Result(); err != nil || ok {
		t.Fatalf("SET b NX on legacy = %v, %v; want refused", ok, err)
	}
	if l, i := r.legacyGet(t, "b"), r.innerGet(t, "b"); l != "proxied" || i != "proxied" {
		t.Errorf("b = legacy %s, backend %s; want proxied on both", l, i)
	}
	if ttl, err := r.legacy.PTTL(ctx, "b").Result(); err != nil || ttl <= 0 {
		t.Errorf("legacy PTTL b = %v, %v; want the TTL", ttl, err)
	}

	// Held in the backend only: refused, and the legacy Redis keeps no
	// leftover of the partial grant.
	if _, err := r.inner.Set(ctx, 0, "c", []byte("other"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.c.SetNX(ctx, "c", "proxied", time.Minute).Result(); err != nil || ok {
		t.Fatalf("SET c NX = %v, %v; want refused", ok, err)
	}
	if got := r.legacyGet(t, "c"); got != "(nil)" {
		t.Errorf("legacy c = %s after the backend refused; want the partial grant undone", got)
	}

	// NX GET answers the refusing side's previous value.
	if v, err := r.c.Do(ctx, "set", "a", "x", "nx", "get").Result(); err != nil || v != "direct" {
		t.Errorf("SET a x NX GET = %v, %v; want direct", v, err)
	}
	// MSETNX is an acquire of all its keys.
	if ok, err := r.c.MSetNX(ctx, "m1", "t", "a", "t").Result(); err != nil || ok {
		t.Errorf("MSETNX m1 a = %v, %v; want refused", ok, err)
	}
	if got := r.legacyGet(t, "m1"); got != "(nil)" {
		t.Errorf("legacy m1 = %s; want nothing", got)
	}

	// Release and extend act on both: a lock taken directly on the legacy
	// Redis is released through lockproxy, owner checked.
	if n, err := r.c.Do(ctx, "delifeq", "a", "wrong").Int64(); err != nil || n != 0 {
		t.Errorf("DELIFEQ a wrong = %d, %v; want 0", n, err)
	}
	if ok, err := r.c.PExpire(ctx, "a", 2*time.Minute).Result(); err != nil || !ok {
		t.Errorf("PEXPIRE a = %v, %v; want extended on the legacy Redis", ok, err)
	}
	if v, err := r.c.Get(ctx, "a").Result(); err != nil || v != "direct" {
		t.Errorf("GET a = %v, %v; want the legacy value", v, err)
	}
	if ttl, err := r.c.PTTL(ctx, "a").Result(); err != nil || ttl <= time.Minute {
		t.Errorf("PTTL a = %v, %v; want the legacy TTL, extended", ttl, err)
	}
	if n, err := r.c.Do(ctx, "delifeq", "a", "direct").Int64(); err != nil || n != 1 {
		t.Errorf("DELIFEQ a direct = %d, %v; want 1", n, err)
	}
	if n, err := r.c.Del(ctx, "b", "a", "b").Result(); err != nil || n != 1 {
		t.Errorf("DEL b a b = %d, %v; want 1", n, err)
	}
	if l, i := r.legacyGet(t, "b"), r.innerGet(t, "b"); l != "(nil)" || i != "(nil)" {
		t.Errorf("b = legacy %s, backend %s after DEL; want gone from both", l, i)
	}
}

func TestMigrateScripts(t *testing.T) {
	cases := []struct {
		name, file string
		args       func(tok string) []any
		granted    func(v any) bool
		release    string
		released   any
	}{
		{"redlock4", "redlock4-acquire.lua", func(tok string) []any { return []any{tok, 60000} },
			func(v any) bool { return v == int64(1) }, "redlock4-release.lua", int64(1)},
		{"redislock", "redislock-obtain.lua", func(tok string) []any { return []any{tok, len(tok), 60000} },
			func(v any) bool { return v == "OK" }, "redislock-release.lua", "OK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			ctx := t.Context()
			acquire := redis.NewScript(script(t, tc.file))
			release := redis.NewScript(script(t, tc.release))
			run := func(s *redis.Script, c *redis.Client, key string, args []any) any {
				t.Helper()
				v, err := s.Run(ctx, c, []string{key}, args...).Result()
				if err != nil && err != redis.Nil {
					t.Fatalf("%s %s: %v", tc.name, key, err)
				}
				return v
			}
			// Held on the legacy Redis: refused through lockproxy, backend untouched.
			if v := run(acquire, r.legacy, "a", tc.args("direct-token-1")); !tc.granted(v) {
				t.Fatalf("direct acquire = %v; want granted", v)
			}
			if v := run(acquire, r.c, "a", tc.args("proxy-token-22")); tc.granted(v) {
				t.Errorf("acquire of a held on legacy = %v; want refused", v)
			}
			if got := r.innerGet(t, "a"); got != "(nil)" {
				t.Errorf("backend a = %s; want nothing", got)
			}
			// Held through lockproxy: refused directly on the legacy Redis.
			if v := run(acquire, r.c, "b", tc.args("proxy-token-22")); !tc.granted(v) {
				t.Fatalf("acquire through lockproxy = %v; want granted", v)
			}
			if v := run(acquire, r.legacy, "b", tc.args("direct-token-1")); tc.granted(v) {
				t.Errorf("direct acquire of b held through lockproxy = %v; want refused", v)
			}
			// Held in the backend only: refused, no leftover on the legacy Redis.
			r.inner.Set(ctx, 0, "c", []byte("other-token-333"), backend.SetOptions{Cond: backend.IfAbsent})
			if v := run(acquire, r.c, "c", tc.args("proxy-token-22")); tc.granted(v) {
				t.Errorf("acquire of c held in the backend = %v; want refused", v)
			}
			if got := r.legacyGet(t, "c"); got != "(nil)" {
				t.Errorf("legacy c = %s; want the partial grant undone", got)
			}
			// The lock taken directly on the legacy Redis is released
			// through lockproxy with the library's own script and reply.
			if v := run(release, r.c, "a", []any{"direct-token-1"}); v != tc.released {
				t.Errorf("release of a through lockproxy = %v; want %v", v, tc.released)
			}
			if got := r.legacyGet(t, "a"); got != "(nil)" {
				t.Errorf("legacy a = %s after release; want gone", got)
			}
			if v := run(release, r.c, "b", []any{"proxy-token-22"}); v != tc.released {
				t.Errorf("release of b = %v; want %v", v, tc.released)
			}
			if l, i := r.legacyGet(t, "b"), r.innerGet(t, "b"); l != "(nil)" || i != "(nil)" {
				t.Errorf("b = legacy %s, backend %s after release; want gone", l, i)
			}
		})
	}
}

func TestMigrateExtendScript(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	extend := redis.NewScript(script(t, "redis-py-extend.lua"))
	if err := r.legacy.Set(ctx, "a", "tok", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	// redis-py's extend: KEYS[1], ARGV = token, additional ms, replace flag.
	if v, err := extend.Run(ctx, r.c, []string{"a"}, "tok", 60000, "1").Result(); err != nil || v != int64(1) {
		t.Fatalf("extend through lockproxy = %v, %v; want 1", v, err)
	}
	if ttl, err := r.legacy.PTTL(ctx, "a").Result(); err != nil || ttl <= 10*time.Second {
		t.Errorf("legacy PTTL a = %v, %v; want extended", ttl, err)
	}
	if v, err := extend.Run(ctx, r.c, []string{"a"}, "not-mine", 60000, "1").Result(); err != nil || v != int64(0) {
		t.Errorf("extend with another token = %v, %v; want 0", v, err)
	}
}

func TestMigrateTransaction(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	tx := func(key, tok string) []redis.Cmder {
		cmds, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SetNX(ctx, key, tok, 0)
			p.Expire(ctx, key, time.Minute)
			return nil
		})
		if err != nil && err != redis.Nil {
			t.Fatalf("MULTI SETNX EXPIRE EXEC: %v", err)
		}
		return cmds
	}
	r.legacy.Set(ctx, "a", "direct", time.Minute)
	if cmds := tx("a", "mine"); cmds[0].(*redis.BoolCmd).Val() {
		t.Errorf("SETNX a in MULTI = true; want refused (held on legacy)")
	}
	if got := r.innerGet(t, "a"); got != "(nil)" {
		t.Errorf("backend a = %s; want nothing", got)
	}
	if cmds := tx("b", "mine"); !cmds[0].(*redis.BoolCmd).Val() {
		t.Errorf("SETNX b in MULTI = false; want granted")
	}
	if l, i := r.legacyGet(t, "b"), r.innerGet(t, "b"); l != "mine" || i != "mine" {
		t.Errorf("b = legacy %s, backend %s; want mine on both", l, i)
	}
}

func TestMigrateLegacyKilled(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	acquire := redis.NewScript(script(t, "redlock4-acquire.lua"))
	r.redis.Kill()
	for i := range 5 {
		key := "k" + string(rune('0'+i))
		if ok, err := r.c.SetNX(ctx, key, "t", time.Minute).Result(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Errorf("SET NX with the legacy Redis down = %v, %v; want TRYAGAIN", ok, err)
		}
		if v, err := acquire.Run(ctx, r.c, []string{key}, "t", 60000).Result(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Errorf("redlock acquire with the legacy Redis down = %v, %v; want TRYAGAIN", v, err)
		}
		if v, err := r.c.Get(ctx, key).Result(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Errorf("GET of a key the backend lacks with the legacy Redis down = %v, %v; want TRYAGAIN", v, err)
		}
	}
	if got := r.innerGet(t, "k0"); got != "(nil)" {
		t.Errorf("backend k0 = %s; want nothing granted while the legacy Redis was down", got)
	}
	r.redis.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := r.c.SetNX(ctx, "after", "t", time.Minute).Result()
		if err == nil && ok {
			break
		}
		if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Now().After(deadline) {
			t.Fatalf("SET NX after the legacy Redis came back = %v, %v; want OK (TRYAGAIN meanwhile)", ok, err)
		}
	}
	if got := r.legacyGet(t, "after"); got != "t" {
		t.Errorf("legacy after = %s; want t", got)
	}
}

// infoField reads one field of INFO lockproxy.
func infoField(ctx context.Context, c *redis.Client, field string) string {
	info, err := c.Info(ctx, "lockproxy").Result()
	if err != nil {
		return "error: " + err.Error()
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return "(missing)"
}

func TestMigrateDirectClients(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	r.legacy.Close() // the rig's own direct client must not count
	await := func(want string) {
		t.Helper()
		wait.Until(t, "lockproxy_migration_legacy_clients = "+want, func() (bool, any) {
			got := infoField(ctx, r.c, "lockproxy_migration_legacy_clients")
			return got == want, got
		})
	}
	// lockproxy's own connections (made by traffic through it) do not count.
	r.c.SetNX(ctx, "k", "v", time.Minute)
	await("0")
	direct := redis.NewClient(&redis.Options{Addr: r.redis.Addr})
	if err := direct.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	await("1")
	if got := infoField(ctx, r.c, "lockproxy_migration_seconds_since_direct_command"); got == "-1" {
		t.Errorf("seconds since the last direct command = %s; want a time", got)
	}
	if got := infoField(ctx, r.c, "lockproxy_migrate_from"); got != "redis://"+r.redis.Addr {
		t.Errorf("lockproxy_migrate_from = %s", got)
	}
	direct.Close()
	await("0")
}

// TestMigrateTLS takes locks in a legacy Redis that speaks only TLS
// (rediss://, verified against the test CA, with a client certificate).
func TestMigrateTLS(t *testing.T) {
	f := testsrv.NewTLSFiles(t)
	port := strconv.Itoa(testsrv.FreePort(t))
	testsrv.StartRedis(t, "--tls-port", port, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-cert-file", f.CA)
	b, err := migrate.New(memory.New(memory.Config{}), migrate.Config{URL: "rediss://127.0.0.1:" + port, Timeout: time.Second, TLS: f.ClientConfig(t, true)})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: testsrv.StartLockproxy(t, proxy.Config{}, b), MaxRetries: -1})
	defer c.Close()
	ctx := t.Context()
	if ok, err := c.SetNX(ctx, "k", "tok", time.Minute).Result(); err != nil || !ok {
		t.Fatalf("SET NX through a TLS legacy Redis = %v, %v; want OK", ok, err)
	}
	legacy := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, TLSConfig: f.ClientConfig(t, true)})
	defer legacy.Close()
	if v, err := legacy.Get(ctx, "k").Result(); err != nil || v != "tok" {
		t.Errorf("legacy GET k = %q, %v; want tok", v, err)
	}
}

// TestMigrateTyped: reads answer from the inner backend, else from the
// legacy Redis (where a direct client's hash may live), in the client's
// protocol; writes reach both sides; a write of a key only the legacy
// Redis has answers there.
func TestMigrateTyped(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	r.c.Set(ctx, "both", "tok", 0)
	r.legacy.HSet(ctx, "direct", "f", "v", "g", "w")
	r.legacy.ZAdd(ctx, "dz", redis.Z{Score: 1.5, Member: "m"})
	for key, want := range map[string]string{"both": "string", "direct": "hash", "dz": "zset", "none": "none"} {
		if got, err := r.c.Type(ctx, key).Result(); err != nil || got != want {
			t.Errorf("TYPE %s = %q, %v; want %s", key, got, err, want)
		}
	}
	// RESP3 (go-redis's default): a map and a double, as Redis answers.
	if got, err := r.c.HGetAll(ctx, "direct").Result(); err != nil || len(got) != 2 || got["g"] != "w" {
		t.Errorf("HGETALL of a legacy-only hash = %v, %v", got, err)
	}
	if got, err := r.c.ZScore(ctx, "dz", "m").Result(); err != nil || got != 1.5 {
		t.Errorf("ZSCORE of a legacy-only sorted set = %v, %v", got, err)
	}
	if err := r.c.HGet(ctx, "both", "f").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Errorf("HGET of a string = %v; want WRONGTYPE", err)
	}
	// Writes reach both sides.
	if n, err := r.c.HSet(ctx, "h", "f", "v").Result(); err != nil || n != 1 {
		t.Fatalf("HSET = %d, %v", n, err)
	}
	if v, err := r.legacy.HGet(ctx, "h", "f").Result(); err != nil || v != "v" {
		t.Errorf("legacy HGET h f = %q, %v", v, err)
	}
	if v, err := r.inner.Do(ctx, 0, []string{"h"}, [][]byte{[]byte("hget"), []byte("h"), []byte("f")}); err != nil || string(v.Str) != "v" {
		t.Errorf("inner HGET h f = %q, %v", v.Str, err)
	}
	// A release by ZREM of a member only the legacy Redis has: its reply.
	if n, err := r.c.ZRem(ctx, "dz", "m").Result(); err != nil || n != 1 {
		t.Errorf("ZREM of a legacy-only member = %d, %v; want 1", n, err)
	}
	if n, _ := r.legacy.Exists(ctx, "dz").Result(); n != 0 {
		t.Error("ZREM left the legacy member")
	}
	if err := r.c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.legacy.DBSize(ctx).Result(); n != 0 {
		t.Errorf("FLUSHDB left %d keys on the legacy Redis", n)
	}
}

// TestMigrateValueScripts: a semaphore's and a reentrant hash lock's
// scripts are acquires on both sides: refused on the legacy Redis, the
// inner backend is not touched; refused on the inner backend, the legacy
// run is put back, member by member, with the others' kept.
func TestMigrateValueScripts(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	sem := redis.NewScript(`redis.call('zremrangebyscore', KEYS[1], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[3]))
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('zadd', KEYS[1], ARGV[4], ARGV[2])
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
return 0`)
	acquire := func(id string) int64 {
		t.Helper()
		n, err := sem.Run(ctx, r.c, []string{"sem"}, 2, id, 60000, time.Now().UnixMilli()).Int64()
		if err != nil {
			t.Fatalf("acquire %s: %v", id, err)
		}
		return n
	}
	innerMembers := func() []string {
		v, err := r.inner.Do(ctx, 0, []string{"sem"}, [][]byte{[]byte("zrange"), []byte("sem"), []byte("0"), []byte("-1")})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range v.Elems {
			out = append(out, string(e.Str))
		}
		return out
	}
	if acquire("a") != 1 {
		t.Fatal("the first permit was refused")
	}
	if got, _ := r.legacy.ZRange(ctx, "sem", 0, -1).Result(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("legacy members %v; want [a]", got)
	}
	// A direct client takes the second permit on the legacy Redis: the
	// next acquire through lockproxy is refused there, the inner backend
	// untouched.
	r.legacy.ZAdd(ctx, "sem", redis.Z{Score: float64(time.Now().UnixMilli()), Member: "direct"})
	if acquire("b") != 0 {
		t.Error("a third permit of two was granted")
	}
	if got := innerMembers(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("inner members %v after a legacy refusal; want [a]", got)
	}
	// The inner backend holds a permit the legacy Redis lost: granted
	// there, refused here, put back there with the other members kept.
	r.legacy.ZRem(ctx, "sem", "direct")
	if _, err := r.inner.Do(ctx, 0, []string{"sem"}, [][]byte{[]byte("zadd"), []byte("sem"), []byte("1e15"), []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	ttl := r.legacy.PTTL(ctx, "sem").Val()
	if acquire("c") != 0 {
		t.Error("an acquire the inner backend refused was granted")
	}
	if got, _ := r.legacy.ZRange(ctx, "sem", 0, -1).Result(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("legacy members %v after the inner refusal; want [a] (c put back, a kept)", got)
	}
	if got := r.legacy.PTTL(ctx, "sem").Val(); got > ttl || got < ttl-10*time.Second {
		t.Errorf("legacy PTTL %v after the undo; want the one from before (%v)", got, ttl)
	}

	// Redisson's lock: a hash field per holder, a count for reentry.
	rlock := redis.NewScript(`if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end
return redis.call('pttl', KEYS[1]);`)
	lock := func(who string) (int64, error) { return rlock.Run(ctx, r.c, []string{"rl"}, 30000, who).Int64() }
	if _, err := lock("me"); err != redis.Nil {
		t.Fatalf("lock = %v; want nil (granted)", err)
	}
	if _, err := lock("me"); err != redis.Nil {
		t.Fatalf("reentrant lock = %v; want nil (granted)", err)
	}
	if v, _ := r.legacy.HGet(ctx, "rl", "me").Result(); v != "2" {
		t.Errorf("legacy count %q; want 2", v)
	}
	if ms, err := lock("other"); err != nil || ms <= 0 {
		t.Errorf("another holder's lock = %d, %v; want the PTTL", ms, err)
	}
	// The inner backend holds another's lock the legacy Redis lost.
	r.legacy.Del(ctx, "rl")
	if ms, err := lock("third"); err != nil || ms <= 0 {
		t.Errorf("a lock the inner backend refused = %d, %v; want its PTTL", ms, err)
	}
	if n, _ := r.legacy.Exists(ctx, "rl").Result(); n != 0 {
		t.Error("the legacy Redis kept a lock the inner backend refused")
	}

	// Symfony's exclusive lock: its token and a "__write__" member that
	// every writer adds. Refused on the inner backend (a release there
	// not yet run), the legacy run is put back whole: an orphan
	// "__write__" would refuse every writer until its TTL.
	symfony := redis.NewScript(`if redis.call('zcount', KEYS[1], '-inf', '+inf') > 0 then return false end
redis.call('zadd', KEYS[1], 1e15, ARGV[1])
redis.call('zadd', KEYS[1], 1e15, '__write__')
redis.call('pexpire', KEYS[1], 10000)
return true`)
	if _, err := r.inner.Do(ctx, 0, []string{"sy"}, [][]byte{[]byte("zadd"), []byte("sy"), []byte("1e15"), []byte("releasing")}); err != nil {
		t.Fatal(err)
	}
	if v, err := symfony.Run(ctx, r.c, []string{"sy"}, "writer").Result(); err != redis.Nil {
		t.Errorf("a writer the inner backend refused = %v, %v; want nil", v, err)
	}
	if got, _ := r.legacy.ZRange(ctx, "sy", 0, -1).Result(); len(got) != 0 {
		t.Errorf("the legacy Redis kept %v of a write lock the inner backend refused", got)
	}
}

// Counters live on the legacy Redis while the fleet moves (counter.go):
// one sequence for the clients on either side, copied to the inner
// backend (raised only by increments), and never below that copy when
// the legacy Redis has lost the counter; errors in Redis's words.
func TestMigrateCounter(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	ref := redis.NewClient(&redis.Options{Addr: testsrv.StartRedis(t).Addr})
	defer ref.Close()
	step := func(via *redis.Client, args []any, want int64) {
		t.Helper()
		if got, err := via.Do(ctx, args...).Int64(); err != nil || got != want {
			t.Fatalf("%v = %d, %v; want %d", args, got, err, want)
		}
	}
	step(r.c, []any{"INCR", "fence"}, 1)
	step(r.legacy, []any{"INCR", "fence"}, 2) // a client not moved yet
	step(r.c, []any{"INCRBY", "fence", 10}, 12)
	if got := r.innerGet(t, "fence"); got != "12" {
		t.Fatalf("inner copy %s; want 12", got)
	}
	step(r.c, []any{"DECR", "fence"}, 11)
	step(r.c, []any{"DECRBY", "fence", 5}, 6)
	if got := r.innerGet(t, "fence"); got != "6" {
		t.Fatalf("inner copy after decrements %s; want 6", got)
	}
	step(r.c, []any{"INCRBY", "fence", 94}, 100)
	r.legacy.Del(ctx, "fence") // the legacy Redis restarted without it
	step(r.c, []any{"INCR", "fence"}, 101)
	if got := r.legacyGet(t, "fence"); got != "101" {
		t.Fatalf("legacy counter %s; want 101", got)
	}

	// Errors as Redis words them.
	r.legacy.HSet(ctx, "h", "f", "v")
	ref.HSet(ctx, "h", "f", "v")
	r.legacy.Set(ctx, "s", "abc", 0)
	ref.Set(ctx, "s", "abc", 0)
	r.legacy.Set(ctx, "max", "9223372036854775807", 0)
	ref.Set(ctx, "max", "9223372036854775807", 0)
	for _, args := range [][]any{{"INCR", "h"}, {"INCR", "s"}, {"INCRBY", "n", "x"}, {"INCR", "max"}, {"DECRBY", "n", "-9223372036854775808"}} {
		_, want := ref.Do(ctx, args...).Result()
		_, got := r.c.Do(ctx, args...).Result()
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("%v: %v; Redis says %v", args, got, want)
		}
	}

	// A legacy Redis that is down fails the command.
	r.redis.Kill()
	if err := r.c.Incr(ctx, "fence").Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN migrate") {
		t.Fatalf("INCR with the legacy Redis down: %v; want TRYAGAIN migrate", err)
	}
}

// What a client still on the legacy Redis publishes (its release's
// wake-up) reaches lockproxy's subscribers, also after the legacy Redis
// restarted; a script's PUBLISH through lockproxy reaches them from the
// inner backend (and again from the legacy Redis: pubsub.go says why).
func TestMigratePubSubBridge(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	sub := r.c.Subscribe(ctx, "wake")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	expect := func(what, want string) {
		t.Helper()
		m, err := sub.ReceiveTimeout(ctx, 3*time.Second)
		if msg, ok := m.(*redis.Message); err != nil || !ok || msg.Payload != want {
			t.Fatalf("after %s: %v, %v; want the message %q", what, m, err, want)
		}
	}
	// publish publishes msg on the legacy Redis until a subscriber (the
	// bridge, on its own connection) hears it.
	publish := func(msg string) {
		t.Helper()
		// The bridge subscribes on its own, or after its backoff.
		wait.For(t, "a bridge subscribed on the legacy Redis to hear "+msg, func() bool {
			n, _ := r.legacy.Publish(ctx, "wake", msg).Result()
			return n > 0
		})
	}
	publish("direct")
	expect("a PUBLISH on the legacy Redis", "direct")

	if err := r.c.Eval(ctx, "redis.call('publish', KEYS[1], ARGV[1])", []string{"wake"}, "scripted").Err(); err != redis.Nil {
		t.Fatalf("EVAL: %v", err)
	}
	expect("a script's PUBLISH through lockproxy", "scripted")

	r.redis.Restart()
	publish("after restart")
	for {
		m, err := sub.ReceiveTimeout(ctx, 3*time.Second)
		if err != nil {
			t.Fatalf("waiting for the message after the restart: %v", err)
		}
		if msg, ok := m.(*redis.Message); ok && msg.Payload == "after restart" {
			return
		}
		// "scripted" again (the legacy side's copy) or a rewake's
		// repetition of the last message: spurious wake-ups.
	}
}

// gatedInner is the memory backend whose script runs wait, once armed,
// until the test lets them go: a slow inner side.
type gatedInner struct {
	*memory.Backend
	armed   atomic.Bool
	entered chan struct{} // an armed run arrived
	release chan struct{} // closed: armed runs go on
}

func (g *gatedInner) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	if g.armed.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Backend.Eval(ctx, db, s, keys, args, ro)
}

// TestMigrateBridgeHoldsScriptMessages: a script's message on the legacy
// Redis, which it runs first, reaches lockproxy's subscribers through the
// bridge only once the script has run on the inner backend too: a
// release's wake-up never comes while the lock is still held inside.
func TestMigrateBridgeHoldsScriptMessages(t *testing.T) {
	inner := &gatedInner{Backend: memory.New(memory.Config{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	addr, lr, _ := testsrv.StartMigratingProxy(t, "memory", inner)
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	legacy := redis.NewClient(&redis.Options{Addr: lr.Addr, MaxRetries: -1})
	defer c.Close()
	defer legacy.Close()
	sub := c.Subscribe(ctx, "wake")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the bridge subscribed on the legacy Redis", func() bool {
		n, _ := legacy.Publish(ctx, "wake", "direct").Result()
		return n > 0
	})
	if m, err := sub.ReceiveTimeout(ctx, 3*time.Second); err != nil {
		t.Fatalf("the legacy PUBLISH never came through the bridge: %v, %v", m, err)
	}

	let := sync.OnceFunc(func() { inner.armed.Store(false); close(inner.release) })
	defer let() // a failure below must not leave the script waiting
	inner.armed.Store(true)
	evaluated := make(chan error, 1)
	go func() {
		evaluated <- c.Eval(ctx, "redis.call('publish', KEYS[1], ARGV[1])", []string{"wake"}, "released").Err()
	}()
	<-inner.entered // the legacy side ran: its message is on its way
	// Without the hold the bridge's copy arrives within milliseconds.
	if m, err := sub.ReceiveTimeout(ctx, 300*time.Millisecond); err == nil {
		t.Fatalf("%v reached a subscriber while the script had yet to run on the inner backend", m)
	}
	let()
	if err := <-evaluated; err != redis.Nil {
		t.Fatalf("EVAL = %v", err)
	}
	for range 2 { // one copy from each side
		m, err := sub.ReceiveTimeout(ctx, 3*time.Second)
		if msg, ok := m.(*redis.Message); err != nil || !ok || msg.Payload != "released" {
			t.Fatalf("after the script ended: %v, %v; want the message %q", m, err, "released")
		}
	}
}
