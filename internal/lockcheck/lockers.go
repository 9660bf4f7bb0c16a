package lockcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// ClientOptions are the go-redis options every Locker here uses for addr: no
// retries (one attempt is one request, so a lost reply is an error, never a
// second SET), the context's deadline honoured, RESP2, and a small pool.
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Protocol:              2,
		DisableIdentity:       true,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PoolSize:              2,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	}
}

// releaseScript is the usual compare-and-delete release.
var releaseScript = redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)

// GoRedisLocker acquires with SET key token NX PX ttl and releases with the
// compare-and-delete script (EVALSHA, EVAL on NOSCRIPT), through go-redis v9.
// It is safe for concurrent use; Run gives each worker its own.
type GoRedisLocker struct{ C *redis.Client }

// NewGoRedisLocker returns a GoRedisLocker talking to addr with ClientOptions.
func NewGoRedisLocker(addr string) *GoRedisLocker {
	return &GoRedisLocker{C: redis.NewClient(ClientOptions(addr))}
}

// Acquire implements Locker.
func (l *GoRedisLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	err := l.C.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// Release implements Locker.
func (l *GoRedisLocker) Release(ctx context.Context, key, token string) error {
	return releaseScript.Run(ctx, l.C, []string{key}, token).Err()
}

// Close closes the client.
func (l *GoRedisLocker) Close() error { return l.C.Close() }

// fencedAcquire is SET NX PX and, when it wrote, the grant's fence read in
// the same atomic call (docs/fencing.md).
var fencedAcquire = redis.NewScript(`if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('lockproxy', 'fence', KEYS[1], ARGV[1])
end
return false`)

// FencedGoRedisLocker is GoRedisLocker that also reads each grant's fence
// from lockproxy (lockcheck.FencedLocker): in the acquire's script, or,
// with Read, by LOCKPROXY FENCE after SET NX PX (quorum runs scripts on
// its nodes, which do not know LOCKPROXY).
type FencedGoRedisLocker struct {
	GoRedisLocker
	Read bool
}

// NewFencedLocker returns a FencedGoRedisLocker talking to addr, reading
// fences in the acquire's script.
func NewFencedLocker(addr string) *FencedGoRedisLocker {
	return &FencedGoRedisLocker{GoRedisLocker: GoRedisLocker{C: redis.NewClient(ClientOptions(addr))}}
}

// NewFenceReadLocker returns a FencedGoRedisLocker talking to addr,
// reading fences by LOCKPROXY FENCE after the acquire.
func NewFenceReadLocker(addr string) *FencedGoRedisLocker {
	l := NewFencedLocker(addr)
	l.Read = true
	return l
}

// Acquire implements Locker.
func (l *FencedGoRedisLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	ok, _, err := l.AcquireFenced(ctx, key, token, ttl)
	return ok, err
}

// AcquireFenced implements FencedLocker. A grant without a fence is an
// error: lockproxy gives every grant one.
func (l *FencedGoRedisLocker) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, uint64, error) {
	if l.Read {
		if ok, err := l.GoRedisLocker.Acquire(ctx, key, token, ttl); !ok || err != nil {
			return false, 0, err
		}
		f, err := l.C.Do(ctx, "LOCKPROXY", "FENCE", key, token).Int64()
		if errors.Is(err, redis.Nil) {
			// Granted, but it ended before its fence was read: the outcome
			// for the checker is unknown, as for any failed acquire.
			return false, 0, errors.New("lockcheck: the grant ended before its fence was read")
		}
		if err != nil {
			return false, 0, err
		}
		return true, uint64(f), nil
	}
	f, err := fencedAcquire.Run(ctx, l.C, []string{key}, token, ttl.Milliseconds()).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return false, 0, nil
	case err != nil:
		return false, 0, err
	case f <= 0:
		return false, 0, fmt.Errorf("lockcheck: a grant with fence %d", f)
	}
	return true, uint64(f), nil
}

// RedsyncLocker is client-side Redlock from go-redsync/redsync v4 with one
// pool: lockproxy is the one "node", so redsync's quorum is 1 and its own
// validity check (elapsed + drift < TTL) applies on top of the service's.
// Each Acquire is one try (WithTries(1)); "taken" reports contended. It
// remembers the mutexes it holds and is not safe for concurrent use.
type RedsyncLocker struct {
	c    *redis.Client
	rs   *redsync.Redsync
	held map[string]*redsync.Mutex // key+token → the mutex that acquired it
	tf   float64
}

// NewRedsyncLocker returns a RedsyncLocker talking to addr. redsync gives each
// attempt timeoutFactor·TTL to answer (its default 0.05 is 25ms of a 500ms
// TTL, short for a loaded test machine); this uses 0.5.
func NewRedsyncLocker(addr string) *RedsyncLocker {
	c := redis.NewClient(ClientOptions(addr))
	return &RedsyncLocker{c: c, rs: redsync.New(goredis.NewPool(c)), held: map[string]*redsync.Mutex{}, tf: 0.5}
}

// Acquire implements Locker.
func (l *RedsyncLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1), redsync.WithValue(token),
		redsync.WithTimeoutFactor(l.tf))
	err := m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	switch {
	case errors.As(err, &taken):
		return false, nil
	case errors.Is(err, redsync.ErrFailed):
		// every node answered OK but the validity time was used up: redsync
		// released it and reports failure; the outcome is "not held".
		return false, fmt.Errorf("redsync: validity time used up: %w", err)
	case err != nil:
		return false, err
	}
	l.held[key+"\x00"+token] = m
	return true, nil
}

// Release implements Locker.
func (l *RedsyncLocker) Release(ctx context.Context, key, token string) error {
	m, ok := l.held[key+"\x00"+token]
	if !ok {
		// an acquire that failed: release by value with a fresh mutex
		m = l.rs.NewMutex(key, redsync.WithValue(token))
	}
	delete(l.held, key+"\x00"+token)
	_, err := m.UnlockContext(ctx)
	if errors.Is(err, redsync.ErrLockAlreadyExpired) {
		return nil
	}
	var taken *redsync.ErrTaken
	if errors.As(err, &taken) {
		return nil // not ours (any more): nothing to release
	}
	return err
}

// Close closes the client.
func (l *RedsyncLocker) Close() error { return l.c.Close() }

// RedislockLocker uses bsm/redislock v0.10 (its obtain and release Lua
// scripts) with no retries and the worker's token. It remembers the locks it
// holds and is not safe for concurrent use.
type RedislockLocker struct {
	c    *redis.Client
	rl   *redislock.Client
	held map[string]*redislock.Lock
}

// NewRedislockLocker returns a RedislockLocker talking to addr.
func NewRedislockLocker(addr string) *RedislockLocker {
	c := redis.NewClient(ClientOptions(addr))
	return &RedislockLocker{c: c, rl: redislock.New(c), held: map[string]*redislock.Lock{}}
}

// Acquire implements Locker.
func (l *RedislockLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	lk, err := l.rl.Obtain(ctx, key, ttl, &redislock.Options{Token: token, RetryStrategy: redislock.NoRetry()})
	switch {
	case errors.Is(err, redislock.ErrNotObtained):
		// with NoRetry this is only ever the script's nil: held by another
		// (a failed request is returned as its own error)
		return false, nil
	case err != nil:
		return false, err
	}
	l.held[key+"\x00"+token] = lk
	return true, nil
}

// Release implements Locker. After a failed acquire there is no Lock to
// release: the compare-and-delete script removes the token if it was set
// (redislock's value is the token when there is no metadata).
func (l *RedislockLocker) Release(ctx context.Context, key, token string) error {
	lk, ok := l.held[key+"\x00"+token]
	if !ok {
		return releaseScript.Run(ctx, l.c, []string{key}, token).Err()
	}
	delete(l.held, key+"\x00"+token)
	if err := lk.Release(ctx); err != nil && !errors.Is(err, redislock.ErrLockNotHeld) {
		return err
	}
	return nil
}

// Close closes the client.
func (l *RedislockLocker) Close() error { return l.c.Close() }

// NewLocker returns the Locker for a client name (goredis, redsync or
// redislock) talking to addr.
func NewLocker(client, addr string) (Locker, error) {
	switch client {
	case "goredis":
		return NewGoRedisLocker(addr), nil
	case "redsync":
		return NewRedsyncLocker(addr), nil
	case "redislock":
		return NewRedislockLocker(addr), nil
	case "fenced":
		return NewFencedLocker(addr), nil
	case "fence-read":
		return NewFenceReadLocker(addr), nil
	}
	return nil, fmt.Errorf("lockcheck: unknown client %q (want goredis, redsync, redislock, fenced or fence-read)", client)
}

// RedisClients are the names NewLocker knows whose lockers run on any
// Redis; Clients all of them, those reading lockproxy's fences too
// ("fenced" in the acquire's script, "fence-read" after it).
var (
	RedisClients = []string{"goredis", "redsync", "redislock"}
	Clients      = append(RedisClients[:len(RedisClients):len(RedisClients)], "fenced", "fence-read")
)
