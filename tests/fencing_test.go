package tests

import (
	"crypto/sha256"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// fenceOf reads LOCKPROXY FENCE key token: 0 for nil.
func fenceOf(t *testing.T, c *redis.Client, key, token string) int64 {
	t.Helper()
	f, err := c.Do(t.Context(), "LOCKPROXY", "FENCE", key, token).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatalf("LOCKPROXY FENCE %s %s: %v", key, token, err)
	}
	return f
}

// TestFences: every grant gets a fence, read by LOCKPROXY FENCE and LOCK
// in RESP2 and RESP3, inside a script too; a new grant's fence is greater,
// an extend and a re-entrant acquire keep it.
func TestFences(t *testing.T) {
	t.Parallel()
	lockproxyTargets(t, func(t *testing.T, name, addr string) {
		for _, proto := range []int{2, 3} {
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1})
			defer c.Close()
			// Quorum runs scripts on its nodes, a migrating proxy on the
			// legacy Redis too, which do not know LOCKPROXY: their clients
			// read the fence after the acquire. On quorum each read takes
			// a new one (quorum/fencing.go).
			checkFences(t, c, "p"+string(rune('0'+proto))+":", name != "quorum3" && name != "migrating", name == "quorum3")
		}
		if name == "quorum3" || name == "migrating" {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			err := c.Eval(t.Context(), "return redis.call('lockproxy', 'fence', KEYS[1], ARGV[1])", []string{"k"}, "t").Err()
			if err == nil || !strings.Contains(err.Error(), "send it after the script") {
				t.Errorf("a script calling LOCKPROXY: %v; want lockproxy's refusal", err)
			}
		}
	})
}

func checkFences(t *testing.T, c *redis.Client, prefix string, inScript, perRead bool) {
	ctx := t.Context()
	k := prefix + "k"
	last := map[string]int64{} // fences grow per key; different keys' are not comparable
	grew := func(key, what string, f int64) {
		t.Helper()
		if f <= last[key] {
			t.Errorf("%s: fence %d; want above %d", what, f, last[key])
		}
		last[key] = f
	}
	kept := func(key, what string, f int64) {
		t.Helper()
		if perRead { // a new fence per read, above the grant's earlier ones
			grew(key, what, f)
			return
		}
		if f != last[key] {
			t.Errorf("%s: fence %d; want %d kept", what, f, last[key])
		}
	}
	c.SetNX(ctx, k, "a", time.Minute)
	grew(k, "SET NX", fenceOf(t, c, k, "a"))
	if f := fenceOf(t, c, k, "b"); f != 0 {
		t.Errorf("fence of another token = %d; want nil", f)
	}
	lock, err := c.Do(ctx, "LOCKPROXY", "LOCK", k).Slice()
	if err != nil || len(lock) != 4 || lock[0] != "a" || (lock[1] != last[k]) != perRead || lock[2].(int64) <= 0 {
		t.Errorf("LOCKPROXY LOCK %s = %v, %v; want [a %d PTTL]", k, lock, err, last[k])
	}
	if _, err := c.Do(ctx, "LOCKPROXY", "LOCK", prefix+"absent").Result(); err != redis.Nil {
		t.Errorf("LOCKPROXY LOCK of an absent key: %v; want nil", err)
	}
	c.PExpire(ctx, k, 2*time.Minute)
	kept(k, "PEXPIRE", fenceOf(t, c, k, "a"))
	c.Set(ctx, k, "a", time.Minute)
	kept(k, "SET of the same token", fenceOf(t, c, k, "a"))
	c.Set(ctx, k, "b", time.Minute)
	grew(k, "SET of another token", fenceOf(t, c, k, "b"))
	c.Del(ctx, k)
	c.SetNX(ctx, k, "b", time.Minute)
	grew(k, "SET NX after a release, the same token", fenceOf(t, c, k, "b"))

	// Redisson's re-entrant hash lock: HINCRBY creates it, again keeps it.
	h := prefix + "h"
	c.HIncrBy(ctx, h, "owner:1", 1)
	grew(h, "HINCRBY creating the hash", fenceOf(t, c, h, "owner:1"))
	c.HIncrBy(ctx, h, "owner:1", 1)
	kept(h, "re-entrant HINCRBY", fenceOf(t, c, h, "owner:1"))
	c.Del(ctx, h)
	c.HIncrBy(ctx, h, "owner:1", 1)
	grew(h, "HINCRBY after a release", fenceOf(t, c, h, "owner:1"))

	// The fenced client's acquire: SET NX and the fence in one script, or
	// the fence read after it.
	s := prefix + "s"
	l := lockcheck.NewFencedLocker(c.Options().Addr)
	l.Read = !inScript
	defer l.Close()
	for range 3 {
		ok, f, err := l.AcquireFenced(ctx, s, "t", time.Minute)
		if !ok || err != nil {
			t.Fatalf("fenced acquire = %v, %v", ok, err)
		}
		grew(s, "fenced acquire", int64(f))
		kept(s, "LOCKPROXY FENCE after the fenced acquire", fenceOf(t, c, s, "t"))
		if ok, _, err := l.AcquireFenced(ctx, s, "u", time.Minute); ok || err != nil {
			t.Errorf("fenced acquire of a held key = %v, %v; want not granted", ok, err)
		}
		if err := l.Release(ctx, s, "t"); err != nil {
			t.Fatal(err)
		}
	}

	for _, bad := range []struct {
		args []any
		want string
	}{
		{[]any{"LOCKPROXY", "nope", "k"}, "ERR unknown subcommand 'nope'. Try LOCKPROXY HELP."},
		{[]any{"LOCKPROXY", "FENCE", "k"}, "ERR wrong number of arguments for 'lockproxy|fence' command"},
		{[]any{"LOCKPROXY"}, "ERR wrong number of arguments for 'lockproxy' command"},
	} {
		if err := c.Do(ctx, bad.args...).Err(); err == nil || err.Error() != bad.want {
			t.Errorf("%v: %v; want %q", bad.args, err, bad.want)
		}
	}
}

// A memory proxy started after another gives greater fences than it did:
// they start above the clock in nanoseconds.
func TestFencesAfterRestart(t *testing.T) {
	t.Parallel()
	var last int64
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: testsrv.StartMemoryProxy(t), MaxRetries: -1})
		c.SetNX(t.Context(), "k", "a", time.Minute)
		f := fenceOf(t, c, "k", "a")
		if f <= last {
			t.Errorf("fence %d after a restart; want above %d", f, last)
		}
		last = f
		c.Close()
	}
}

// fencedStore is the resource a lock protects, as docs/fencing.md has it:
// it keeps the greatest fence it accepted and refuses a write with a
// smaller one.
type fencedStore struct {
	mu    sync.Mutex
	fence int64
	value string
}

func (s *fencedStore) write(fence int64, value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence {
		return false
	}
	s.fence, s.value = fence, value
	return true
}

// A client that pauses past its TTL comes back holding a fence smaller
// than the next holder's: its late write is refused, on every backend.
func TestFencePausedClientRefused(t *testing.T) {
	t.Parallel()
	lockproxyTargets(t, func(t *testing.T, _, addr string) {
		a, b := lockcheck.NewFenceReadLocker(addr), lockcheck.NewFenceReadLocker(addr)
		defer a.Close()
		defer b.Close()
		var store fencedStore
		ok, fa, err := a.AcquireFenced(t.Context(), "res", "client-a", 200*time.Millisecond)
		if !ok || err != nil {
			t.Fatalf("a's acquire = %v, %v", ok, err)
		}
		time.Sleep(300 * time.Millisecond) // a pauses past its TTL
		ok, fb, err := b.AcquireFenced(t.Context(), "res", "client-b", time.Minute)
		if !ok || err != nil {
			t.Fatalf("b's acquire after a's TTL = %v, %v", ok, err)
		}
		if !store.write(int64(fb), "b") {
			t.Fatalf("b's write with fence %d refused", fb)
		}
		if store.write(int64(fa), "a, late") {
			t.Fatalf("a's late write with fence %d accepted after b's with %d", fa, fb)
		}
		if store.value != "b" {
			t.Fatalf("store holds %q; want b's write", store.value)
		}
	})
}

// TestLockproxyLocksAndRelease: LOCKPROXY LOCKS pages the held keys of
// the selected database with token, fence and PTTL, as SCAN pages them;
// LOCKPROXY RELEASE deletes a key whoever holds it, for admin users only
// (NOPERM for others, as FLUSHALL), and neither runs from scripts.
func TestLockproxyLocksAndRelease(t *testing.T) {
	t.Parallel()
	lockproxyTargets(t, func(t *testing.T, name, addr string) {
		ctx := t.Context()
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer c.Close()
		held := map[string]string{"ops:a": "ta", "ops:b": "tb", "ops:c": "tc", "other": "to"}
		for k, tok := range held {
			if ok, err := c.SetNX(ctx, k, tok, time.Minute).Result(); !ok || err != nil {
				t.Fatalf("SET %s NX = %v, %v", k, ok, err)
			}
		}
		got := map[string]string{}
		for cursor := "0"; ; {
			page, err := c.Do(ctx, "LOCKPROXY", "LOCKS", cursor, "MATCH", "ops:*", "COUNT", "2").Slice()
			if err != nil || len(page) != 2 {
				t.Fatalf("LOCKPROXY LOCKS %s = %v, %v", cursor, page, err)
			}
			entries, _ := page[1].([]any)
			for _, e := range entries {
				l, _ := e.([]any)
				if len(l) != 5 || l[1] == nil || l[2] == nil || l[3].(int64) <= 0 || l[4] == nil {
					t.Fatalf("entry %v; want [key, token, fence, PTTL, holder]", e)
				}
				got[l[0].(string)] = l[1].(string)
			}
			if cursor = page[0].(string); cursor == "0" {
				break
			}
		}
		for k, tok := range held {
			if k != "other" && got[k] != tok {
				t.Errorf("LOCKS listed %s = %q; want %q (all: %v)", k, got[k], tok, got)
			}
		}
		if _, ok := got["other"]; ok {
			t.Errorf("LOCKS MATCH ops:* listed other")
		}
		if n, err := c.Do(ctx, "LOCKPROXY", "RELEASE", "ops:a").Int(); n != 1 || err != nil {
			t.Errorf("LOCKPROXY RELEASE ops:a = %v, %v; want 1", n, err)
		}
		if n, err := c.Do(ctx, "LOCKPROXY", "RELEASE", "ops:a").Int(); n != 0 || err != nil {
			t.Errorf("LOCKPROXY RELEASE of a free key = %v, %v; want 0", n, err)
		}
		if ok, err := c.SetNX(ctx, "ops:a", "new", time.Minute).Result(); !ok || err != nil {
			t.Errorf("SET NX after the force release = %v, %v; want OK", ok, err)
		}
		if name != "quorum3" && name != "migrating" { // their scripts run on Redis servers: refused for calling LOCKPROXY at all
			err := c.Eval(ctx, "return redis.call('lockproxy', 'release', KEYS[1])", []string{"ops:b"}).Err()
			if err == nil || !strings.Contains(err.Error(), "does not run 'lockproxy|release' from scripts") {
				t.Errorf("LOCKPROXY RELEASE from a script: %v; want refused", err)
			}
		}
	})
}

// LOCKPROXY RELEASE is for admin users: another gets Redis's NOPERM.
func TestLockproxyReleaseNeedsAdmin(t *testing.T) {
	t.Parallel()
	users := []proxy.User{
		{Name: "app", PasswordSHA256: sha256.Sum256([]byte("apppw"))},
		{Name: "ops", PasswordSHA256: sha256.Sum256([]byte("opspw")), Admin: true},
	}
	addr := testsrv.StartLockproxy(t, proxy.Config{Users: users}, memory.New(memory.Config{}))
	for _, u := range []struct{ user, pass, want string }{
		{"app", "apppw", "NOPERM this user has no permissions to run the 'lockproxy|release' command"},
		{"ops", "opspw", ""},
	} {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: u.user, Password: u.pass, MaxRetries: -1})
		c.SetNX(t.Context(), "k", "t", time.Minute)
		err := c.Do(t.Context(), "LOCKPROXY", "RELEASE", "k").Err()
		if (u.want == "" && err != nil) || (u.want != "" && (err == nil || err.Error() != u.want)) {
			t.Errorf("%s: LOCKPROXY RELEASE: %v; want %q", u.user, err, u.want)
		}
		c.Close()
	}
}
