package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
)

// releaseScript is redis-py's and redsync's release: delete if the token
// matches.
const releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// extendScript extends if the token matches.
const extendScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`

func pgClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// startPostgresProxyOn serves another lockproxy instance on the database
// of dsn.
func startPostgresProxyOn(t *testing.T, dsn, strategy string) string {
	t.Helper()
	b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
	if err != nil {
		t.Fatal(err)
	}
	return testsrv.StartLockproxy(t, proxy.Config{BackendName: "postgres"}, b)
}

// TestPostgresSQLInterop: a lock held from SQL with
// pg_advisory_lock(hashtextextended(key, 0)) makes SET NX answer nil, in
// both strategies; a lock taken through lockproxy (advisory) makes
// pg_try_advisory_lock from SQL fail, and its lease row is readable.
func TestPostgresSQLInterop(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			addr, dsn := testsrv.StartPostgresProxy(t, strategy)
			c := pgClient(t, addr)
			sql := pgConn(t, dsn)
			if _, err := sql.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('sql:held', 0))`); err != nil {
				t.Fatal(err)
			}
			if err := c.SetArgs(ctx, "sql:held", "tok", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("SET NX of a key locked from SQL = %v; want nil", err)
			}
			if _, err := sql.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('sql:held', 0))`); err != nil {
				t.Fatal(err)
			}
			if err := c.SetArgs(ctx, "sql:held", "tok", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err(); err != nil {
				t.Fatalf("SET NX once SQL unlocked = %v; want OK", err)
			}
			// The row: at once, or (advisory) once the lock has been held
			// for the lease row delay.
			var tok []byte
			var left int64
			for end := time.Now().Add(testsrv.PostgresRowDelay(t) + 5*time.Second); ; {
				err := sql.QueryRow(ctx, `SELECT token, (extract(epoch from expires_at - now()) * 1000)::bigint FROM lockproxy.leases
					WHERE db = 0 AND key = 'sql:held'`).Scan(&tok, &left)
				if err == nil && string(tok) == "tok" && left > 0 && left <= 10000 {
					break
				}
				if !errors.Is(err, pgx.ErrNoRows) || time.Now().After(end) {
					t.Fatalf("lease row = %q, %d ms left, %v", tok, left, err)
				}
				time.Sleep(20 * time.Millisecond) // polling for the deferred row
			}
			if strategy != pgbridge.Advisory {
				return // the lease strategy holds no session lock between operations
			}
			var got bool
			if err := sql.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('sql:held', 0))`).Scan(&got); err != nil || got {
				t.Fatalf("pg_try_advisory_lock of a key lockproxy holds = %v, %v; want false", got, err)
			}
			if n, err := c.Eval(ctx, releaseScript, []string{"sql:held"}, "tok").Int(); n != 1 || err != nil {
				t.Fatalf("release = %d, %v", n, err)
			}
			if err := sql.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('sql:held', 0))`).Scan(&got); err != nil || !got {
				t.Fatalf("pg_try_advisory_lock after the release = %v, %v; want true", got, err)
			}
		})
	}
}

// TestPostgresTwoInstances: two lockproxy instances on one database
// exclude each other, read each other's locks, release and extend each
// other's locks (advisory: routed to the holder), and see TTLs end.
func TestPostgresTwoInstances(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			addrA, dsn := testsrv.StartPostgresProxy(t, strategy)
			a, b := pgClient(t, addrA), pgClient(t, startPostgresProxyOn(t, dsn, strategy))
			if err := a.SetArgs(ctx, "two:k", "tA", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := b.SetArgs(ctx, "two:k", "tB", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("B: SET NX of A's lock = %v; want nil", err)
			}
			if v, err := b.Get(ctx, "two:k").Result(); v != "tA" || err != nil {
				t.Fatalf("B: GET = %q, %v; want tA", v, err)
			}
			if ms, err := b.PTTL(ctx, "two:k").Result(); err != nil || ms <= 0 || ms > 30*time.Second {
				t.Fatalf("B: PTTL = %v, %v", ms, err)
			}
			if n, err := b.Eval(ctx, releaseScript, []string{"two:k"}, "wrong").Int(); n != 0 || err != nil {
				t.Fatalf("B: release with a wrong token = %d, %v; want 0", n, err)
			}
			if n, err := b.Eval(ctx, extendScript, []string{"two:k"}, "tA", "60000").Int(); n != 1 || err != nil {
				t.Fatalf("B: extend of A's lock = %d, %v; want 1", n, err)
			}
			if ms, err := a.PTTL(ctx, "two:k").Result(); err != nil || ms <= 30*time.Second {
				t.Fatalf("A: PTTL after B's extend = %v, %v; want > 30s", ms, err)
			}
			if n, err := b.Eval(ctx, releaseScript, []string{"two:k"}, "tA").Int(); n != 1 || err != nil {
				t.Fatalf("B: release of A's lock = %d, %v; want 1", n, err)
			}
			if err := b.SetArgs(ctx, "two:k", "tB", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); err != nil {
				t.Fatalf("B: SET NX after the release = %v; want OK", err)
			}
			if n, err := a.Del(ctx, "two:k").Result(); n != 1 || err != nil {
				t.Fatalf("A: DEL of B's lock = %d, %v; want 1", n, err)
			}

			// TTL expiry: A's short lock ends and B can take it.
			if err := a.SetArgs(ctx, "two:ttl", "tA", redis.SetArgs{Mode: "NX", TTL: 200 * time.Millisecond}).Err(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := b.SetArgs(ctx, "two:ttl", "tB", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err()
				if err == nil {
					break
				}
				if !errors.Is(err, redis.Nil) || time.Now().After(deadline) {
					t.Fatalf("B: SET NX after A's TTL = %v", err)
				}
				time.Sleep(20 * time.Millisecond) // polling for A's expiry
			}
			clientCounterAcross(t, []*redis.Client{a, b})
		})
	}
}

// clientCounterAcross runs the shared-counter exclusion check with workers
// spread over several instances.
func clientCounterAcross(t *testing.T, cs []*redis.Client) {
	t.Helper()
	ctx := t.Context()
	clientCounter(t, 8, 20, func(w int) (func() error, error) {
		c := cs[w%len(cs)]
		tok := "w" + strconv.Itoa(w) + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		for {
			err := c.SetArgs(ctx, "two:counter", tok, redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err()
			if err == nil {
				break
			}
			if !errors.Is(err, redis.Nil) {
				return nil, err
			}
			time.Sleep(time.Millisecond) // contended: retry as lock clients do
		}
		return func() error {
			n, err := c.Eval(ctx, releaseScript, []string{"two:counter"}, tok).Int()
			if err == nil && n != 1 {
				err = errors.New("release answered 0")
			}
			return err
		}, nil
	})
}

// TestPostgresInstanceKilled: the locks of a lockproxy process killed with
// SIGKILL stay until their TTL, in both strategies: the lease rows of the
// advisory strategy fence the keys once the sessions holding them end; a
// lock killed before its deferred row is fenced, with every other key, by
// its session's rowless_until_ms.
func TestPostgresInstanceKilled(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/lockproxy").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			other, dsn := testsrv.StartPostgresProxy(t, strategy)
			addr := "127.0.0.1:" + strconv.Itoa(testsrv.FreePort(t))
			// With deferred rows, a delay far beyond the test: the lock is
			// killed before its row is written, however late the kill comes
			// on a loaded machine (at 200 ms, the full suite once wrote the
			// row first, and the other key was free, rightly).
			rowDelay := testsrv.PostgresRowDelay(t)
			if rowDelay > 0 {
				rowDelay = time.Minute
			}
			cmd := exec.Command(bin, "--backend", "postgres", "--postgres-dsn", dsn, "--postgres-strategy", strategy,
				"--postgres-lease-row-delay", rowDelay.String(), "--listen", addr, "--admin-listen", "")
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			victim := pgClient(t, addr)
			deadline := time.Now().Add(15 * time.Second)
			for victim.Ping(ctx).Err() != nil {
				if time.Now().After(deadline) {
					t.Fatal("the lockproxy process did not start")
				}
				time.Sleep(20 * time.Millisecond) // polling for the listener
			}
			if err := victim.SetArgs(ctx, "kill:k", "victim", redis.SetArgs{Mode: "NX", TTL: 3 * time.Second}).Err(); err != nil {
				t.Fatal(err)
			}
			cmd.Process.Kill()
			cmd.Wait()
			start := time.Now()
			c := pgClient(t, other)
			// Killed before the lock's row (advisory, deferred rows): its
			// session's rowless_until_ms holds every key, not only its own.
			// The fence begins once PostgreSQL has seen the session end (until
			// then its advisory locks hold its own keys, and another key is
			// free): on a loaded machine that can be a moment after the kill.
			if strategy == pgbridge.Advisory && testsrv.PostgresRowDelay(t) > 0 {
				fenced := false
				for until := time.Now().Add(2 * time.Second); !fenced && time.Now().Before(until); {
					switch err := c.SetArgs(ctx, "kill:other", "other", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err(); {
					case errors.Is(err, redis.Nil):
						fenced = true
					case err == nil:
						c.Del(ctx, "kill:other")
						time.Sleep(10 * time.Millisecond) // polling for the session's end
					default:
						t.Fatalf("SET NX of another key after the kill = %v", err)
					}
				}
				if !fenced {
					t.Errorf("another key was still free 2s after the kill; want it fenced while the killed session's row-less locks may live")
				}
			}
			for {
				err := c.SetArgs(ctx, "kill:k", "other", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err()
				if err == nil {
					break
				}
				if !errors.Is(err, redis.Nil) || time.Since(start) > 20*time.Second {
					t.Fatalf("SET NX after the holder was killed = %v", err)
				}
				time.Sleep(20 * time.Millisecond) // polling
			}
			took := time.Since(start)
			if took < 2*time.Second {
				t.Fatalf("the killed instance's lock ended after %v, before its 3s TTL", took)
			}
			t.Logf("%s: the lock was free again %v after the kill", strategy, took.Round(time.Millisecond))
		})
	}
}

// TestPostgresHolderTerminated: pg_terminate_backend on the holder
// sessions releases their advisory locks; the proxy notices, never claims
// those locks again (a release answers 0, never 1), reconnects, and serves
// again, while the lost lease fences its key until its deadline (SET NX
// answers nil, GET the fence token).
func TestPostgresHolderTerminated(t *testing.T) {
	ctx := t.Context()
	addr, dsn := testsrv.StartPostgresProxy(t, pgbridge.Advisory)
	c := pgClient(t, addr)
	sql := pgConn(t, dsn)
	const ttl = 3 * time.Second
	start := time.Now() // validity counts from the acquire's start
	if err := c.SetArgs(ctx, "term:k", "tok", redis.SetArgs{Mode: "NX", TTL: ttl}).Err(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := sql.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'lockproxy holder %'`).Scan(&n); err != nil || n == 0 {
		t.Fatalf("terminated %d holder sessions: %v", n, err)
	}
	// The lock is free in PostgreSQL once the session has exited
	// (pg_terminate_backend only signals it).
	var got bool
	for end := time.Now().Add(10 * time.Second); !got; {
		if err := sql.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('term:k', 0))`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !got && time.Now().After(end) {
			t.Fatal("pg_try_advisory_lock still fails 10s after the holder sessions were terminated")
		}
		time.Sleep(10 * time.Millisecond) // polling for the session's exit
	}
	if _, err := sql.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('term:k', 0))`); err != nil {
		t.Fatal(err)
	}
	// The proxy never claims the lost lock: the release answers 0 or an
	// error while it reconnects, and once it serves again, 0.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := c.Eval(ctx, releaseScript, []string{"term:k"}, "tok").Int()
		if err == nil && n == 1 {
			t.Fatal("release of a lock whose holder session was terminated answered 1")
		}
		if err == nil {
			break
		}
		if !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Now().After(deadline) {
			t.Fatalf("release after the holder was terminated = %d, %v", n, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the reconnect
	}
	if v, err := c.Get(ctx, "term:k").Result(); time.Since(start) < ttl-500*time.Millisecond && (v != "lockproxy:lost-lease" || err != nil) {
		t.Errorf("GET of a fenced key = %q, %v; want the fence token", v, err)
	}
	for {
		err := c.SetArgs(ctx, "term:k", "tok2", redis.SetArgs{Mode: "NX", TTL: 60 * time.Second}).Err()
		if err == nil {
			break
		}
		if err != redis.Nil && !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Now().After(deadline) {
			t.Fatalf("SET NX after the reconnect = %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the reconnect and the fence's end
	}
	if took := time.Since(start); took < ttl-ttl/100-2*time.Millisecond {
		t.Fatalf("the lost lock was granted again %v after its grant, before its %v TTL", took, ttl)
	}
}

// TestPostgresRestart: PostgreSQL restarted under a running proxy gives
// TRYAGAIN errors (never a false OK) while it is down, and the proxy
// reconnects by itself.
func TestPostgresRestart(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			c := pgClient(t, startPostgresProxyOn(t, dsn, strategy))
			ctx := t.Context()
			// The advisory strategy fences this key until its TTL after
			// the crash, and only this key; the lease strategy's lock must
			// still be there after the restart, however long a loaded
			// machine takes for it (2 s was not always enough).
			ttl := time.Minute
			if err := c.SetArgs(ctx, "restart:before", "tok", redis.SetArgs{Mode: "NX", TTL: ttl}).Err(); err != nil {
				t.Fatal(err)
			}
			pg.Kill()
			if err := c.SetArgs(ctx, "restart:down", "tok", redis.SetArgs{Mode: "NX", TTL: 60 * time.Second}).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
				t.Fatalf("SET NX while PostgreSQL is down = %v; want TRYAGAIN", err)
			}
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				err := c.SetArgs(ctx, "restart:after", "tok", redis.SetArgs{Mode: "NX", TTL: 60 * time.Second}).Err()
				if err == nil {
					break
				}
				if !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Now().After(deadline) {
					t.Fatalf("SET NX after PostgreSQL came back = %v", err)
				}
				time.Sleep(100 * time.Millisecond) // polling for the reconnect
			}
			// The advisory strategy's locks died with PostgreSQL's sessions:
			// the instance fences the key again until its TTL (GET shows
			// the fence, SET NX answers nil, the owner's release 0); the
			// lease strategy's are in its logged table. (fsync is off in
			// the test cluster, so this is not a test of durability.)
			v, err := c.Get(ctx, "restart:before").Result()
			switch {
			case strategy == pgbridge.Advisory && (v != backend.FenceToken || err != nil):
				t.Fatalf("advisory: GET of a lock from before the crash = %q, %v; want the fence %s", v, err, backend.FenceToken)
			case strategy == pgbridge.Lease && (v != "tok" || err != nil):
				t.Fatalf("lease: GET of a lock from before the restart = %q, %v; want tok", v, err)
			}
			if strategy == pgbridge.Advisory {
				if err := c.SetArgs(ctx, "restart:before", "new", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err(); !errors.Is(err, redis.Nil) {
					t.Fatalf("advisory: SET NX of a lock from before the crash = %v; want nil", err)
				}
				if n, err := c.Eval(ctx, releaseScript, []string{"restart:before"}, "tok").Int(); n != 0 || err != nil {
					t.Fatalf("advisory: release of a lock lost in the crash = %d, %v; want 0", n, err)
				}
			}
		})
	}
}

// TestPostgresAdmin: /metrics shows the postgres backend's sessions,
// leases and pool after real traffic, and /readyz flips to 503 while
// PostgreSQL is down and back once the proxy has reconnected.
func TestPostgresAdmin(t *testing.T) {
	t.Parallel()
	pg := testsrv.StartPostgres(t)
	dsn := pg.NewDatabase(t)
	b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b)
	c := pgClient(t, testsrv.StartLockproxy(t, proxy.Config{Registerer: reg, BackendName: "postgres"}, b))
	admin := httptest.NewServer(proxy.AdminHandler(reg, b))
	defer admin.Close()
	get := func(path string) (int, string) { t.Helper(); return httpGet(t, admin.URL+path) }
	ctx := t.Context()
	// adm:a is held through the crash below: the instance fences it again
	// and is ready within seconds, not after its minute.
	for _, k := range []string{"adm:a", "adm:b"} {
		if err := c.SetArgs(ctx, k, "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.Eval(ctx, releaseScript, []string{"adm:b"}, "tok").Int(); n != 1 || err != nil {
		t.Fatalf("release = %d, %v", n, err)
	}
	if err := c.SetArgs(ctx, "adm:ttl", "tok", redis.SetArgs{Mode: "NX", TTL: 100 * time.Millisecond}).Err(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		_, m := get("/metrics")
		if strings.Contains(m, "lockproxy_lock_expiries_total 1") && strings.Contains(m, "lockproxy_locks_held 1\n") { // held: counted at most once a second
			break
		}
		if time.Now().After(end) {
			t.Fatal("lockproxy_lock_expiries_total did not reach 1, or lockproxy_locks_held fall to 1, after a 100ms lock ended")
		}
		time.Sleep(20 * time.Millisecond) // polling for the expiry
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		"lockproxy_postgres_holders 2",
		"lockproxy_postgres_holders_up 2",
		"lockproxy_postgres_leases_held 1",
		"lockproxy_locks_held 1",
		`lockproxy_lock_acquisitions_total{outcome="acquired"} 3`,
		"lockproxy_postgres_holder_sessions_lost_total 0",
		`lockproxy_postgres_pool_connections{state="total"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %q; want 200", code, body)
	}
	info := opsInfo(t, c)
	for k, want := range map[string]string{"lockproxy_backend": "postgres", "lockproxy_ready": "1", "lockproxy_locks_held": "1",
		"lockproxy_lock_expiries": "1", "lockproxy_lock_acquired": "3", "lockproxy_postgres_strategy": "advisory",
		"lockproxy_postgres_holders": "2", "lockproxy_postgres_holders_up": "2", "lockproxy_postgres_holder_sessions_lost": "0"} {
		if info[k] != want {
			t.Errorf("INFO lockproxy: %s = %q; want %q", k, info[k], want)
		}
	}
	pg.Kill()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); !cond(); {
			if time.Now().After(end) {
				t.Fatalf("not within 30s: %s", what)
			}
			time.Sleep(50 * time.Millisecond) // polling
		}
	}
	eventually("/readyz 503 while PostgreSQL is down", func() bool { code, _ := get("/readyz"); return code == 503 })
	if info := opsInfo(t, c); info["lockproxy_ready"] != "0" || info["lockproxy_not_ready_reason"] == "" {
		t.Errorf("INFO while PostgreSQL is down: lockproxy_ready = %q, reason %q; want 0 and a reason", info["lockproxy_ready"], info["lockproxy_not_ready_reason"])
	}
	// The holders notice on their next ping (1s).
	eventually("/metrics to show the sessions lost and the lease gone", func() bool {
		_, metrics = get("/metrics")
		return strings.Contains(metrics, "lockproxy_postgres_leases_held 0") &&
			!strings.Contains(metrics, "lockproxy_postgres_holder_sessions_lost_total 0")
	})
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	eventually("/readyz 200 once PostgreSQL is back", func() bool { code, _ := get("/readyz"); return code == 200 })
}

// TestPostgresRestartUnderLoad: PostgreSQL is killed and restarted while
// 8 workers loop lock, increment, unlock. Every error a client sees is
// TRYAGAIN, the workers make progress again after the restart, and in the
// lease strategy (its locks are rows that survive the restart) the shared
// counter proves no two workers held the lock at once. The advisory
// strategy's locks end with PostgreSQL's sessions: a worker inside its
// critical section then loses its lock (its release answers 0), so there
// the counter is not a proof and only those answers are checked (that no
// one else is granted the lock before the lost lease's deadline is
// tests/faults' TestPostgresNemesisRestart).
func TestPostgresRestartUnderLoad(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			addr := startPostgresProxyOn(t, dsn, strategy)
			ctx := t.Context()
			var counter, cycles, lost atomic.Int64
			var restarted atomic.Bool
			var afterRestart atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Go(func() {
					c := pgClient(t, addr)
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						tok := fmt.Sprintf("w%d-%d", w, n)
						err := c.SetArgs(ctx, "load:counter", tok, redis.SetArgs{Mode: "NX", TTL: 2 * time.Second}).Err()
						if errors.Is(err, redis.Nil) {
							time.Sleep(time.Millisecond) // contended
							continue
						}
						if err != nil {
							if !strings.HasPrefix(err.Error(), "TRYAGAIN") {
								errs <- fmt.Errorf("worker %d acquire: %v", w, err)
								return
							}
							time.Sleep(20 * time.Millisecond) // PostgreSQL is away
							continue
						}
						v := counter.Load()
						time.Sleep(100 * time.Microsecond) // the critical section
						counter.Store(v + 1)
						released, err := c.Eval(ctx, releaseScript, []string{"load:counter"}, tok).Int()
						switch {
						case err != nil && !strings.HasPrefix(err.Error(), "TRYAGAIN"):
							errs <- fmt.Errorf("worker %d release: %v", w, err)
							return
						case err == nil && released == 1:
							cycles.Add(1)
							if restarted.Load() {
								afterRestart.Add(1)
							}
						default: // 0, or TRYAGAIN: the lock was lost, or PostgreSQL is away
							lost.Add(1)
						}
					}
				})
			}
			time.Sleep(500 * time.Millisecond)
			pg.Kill()
			time.Sleep(300 * time.Millisecond)
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
			restarted.Store(true)
			for end := time.Now().Add(30 * time.Second); afterRestart.Load() < 50; {
				if time.Now().After(end) {
					t.Fatalf("only %d lock cycles within 30s after the restart", afterRestart.Load())
				}
				time.Sleep(50 * time.Millisecond) // waiting for progress
			}
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			t.Logf("%s: %d cycles, %d after the restart, %d locks lost or unconfirmed", strategy, cycles.Load(), afterRestart.Load(), lost.Load())
			if strategy == pgbridge.Lease && lost.Load() == 0 && counter.Load() != cycles.Load() {
				t.Fatalf("counter = %d after %d confirmed cycles: two workers held the lock at once", counter.Load(), cycles.Load())
			}
		})
	}
}

// TestPostgresTLS: the postgres backend reaches PostgreSQL over TLS with
// the DSN's own settings (sslmode=verify-full, sslrootcert), and refuses a
// server whose certificate another CA signed.
func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	files := testsrv.NewTLSFiles(t)
	pg := testsrv.StartPostgresTLS(t, files)
	dsn := pg.NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", "verify-full")
	q.Set("sslrootcert", files.CA)
	u.RawQuery = q.Encode()
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		c := pgClient(t, startPostgresProxyOn(t, u.String(), strategy))
		if err := c.SetArgs(t.Context(), "tls:"+strategy, "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			t.Fatalf("%s over TLS: SET NX = %v", strategy, err)
		}
	}
	sql := pgConn(t, u.String())
	var ssl bool
	if err := sql.QueryRow(t.Context(), `SELECT bool_and(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
		WHERE application_name LIKE 'lockproxy holder %'`).Scan(&ssl); err != nil || !ssl {
		t.Fatalf("holder sessions use TLS = %v, %v", ssl, err)
	}
	q.Set("sslrootcert", files.OtherCA)
	u.RawQuery = q.Encode()
	if _, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: u.String()}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("New against a server of another CA = %v; want a certificate error", err)
	}
}
