package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
)

// scaleKey is the i-th key of the scale tests.
func scaleKey(i int) string { return fmt.Sprintf("scale:%d", i) }

// setMany sends SET scale:i tok NX PX 600000 for i in [0, n) through
// conns pipelining clients, and returns each reply's error (nil: OK).
func setMany(t *testing.T, addr string, n, conns int) []error {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, PoolSize: conns, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	errs := make([]error, n)
	const chunk = 100
	var wg sync.WaitGroup
	next := make(chan int)
	for range conns {
		wg.Go(func() {
			for from := range next {
				p := c.Pipeline()
				cmds := make([]*redis.StatusCmd, 0, chunk)
				for i := from; i < min(from+chunk, n); i++ {
					cmds = append(cmds, p.SetArgs(t.Context(), scaleKey(i), "tok", redis.SetArgs{Mode: "NX", TTL: 10 * time.Minute}))
				}
				p.Exec(t.Context())
				for j, cmd := range cmds {
					errs[from+j] = cmd.Err()
				}
			}
		})
	}
	for from := 0; from < n; from += chunk {
		next <- from
	}
	close(next)
	wg.Wait()
	return errs
}

// refusedNX checks that SET NX of each of keys, from a client of addr,
// answers nil: the key is still held.
func refusedNX(t *testing.T, addr string, keys []string) {
	t.Helper()
	c := pgClient(t, addr)
	for from := 0; from < len(keys); from += 1000 {
		p := c.Pipeline()
		var cmds []*redis.StatusCmd
		for _, k := range keys[from:min(from+1000, len(keys))] {
			cmds = append(cmds, p.SetArgs(t.Context(), k, "other", redis.SetArgs{Mode: "NX", TTL: 10 * time.Minute}))
		}
		p.Exec(t.Context())
		for i, cmd := range cmds {
			if err := cmd.Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("SET %s other NX from another client = %v; want nil (held)", keys[from+i], err)
			}
		}
	}
}

// heldAdvisory counts the advisory locks the lockproxy holder sessions of
// dsn's database hold, from pg_locks.
func heldAdvisory(t *testing.T, dsn string) int {
	t.Helper()
	var n int
	err := pgConn(t, dsn).QueryRow(t.Context(), `SELECT count(*) FROM pg_locks p JOIN pg_stat_activity a USING (pid)
		WHERE p.locktype = 'advisory' AND p.granted AND a.application_name LIKE 'lockproxy holder %'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPostgresAdvisoryCapacity: on a PostgreSQL whose lock table is small
// (max_locks_per_transaction = 10), SET NX of more keys than it holds
// grants until the instance's advisory lock limit, then answers each
// further one alone with an OOM error that names the setting to raise;
// no holder session is lost, every lock granted is still held (pg_locks,
// and SET NX from another client nil), and a released lock makes room.
func TestPostgresAdvisoryCapacity(t *testing.T) {
	pg := testsrv.StartPostgresWith(t, "max_locks_per_transaction=10")
	dsn := pg.NewDatabase(t)
	b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
	if err != nil {
		t.Fatal(err)
	}
	v := serveViews(t, "postgres", b)
	addr, admin := v.c.Options().Addr, v.admin
	const n = 8000 // past the lock table's 10 × (300 connections + 22 other processes) and its slack
	errs := setMany(t, addr, n, 8)
	var granted []string
	refused := 0
	for i, err := range errs {
		switch {
		case err == nil:
			granted = append(granted, scaleKey(i))
		case strings.HasPrefix(err.Error(), "OOM ") && strings.Contains(err.Error(), "max_locks_per_transaction"):
			refused++
		default:
			t.Fatalf("SET %s NX = %v; want OK or OOM naming max_locks_per_transaction", scaleKey(i), err)
		}
	}
	if refused == 0 || len(granted) < 1000 {
		t.Fatalf("%d granted, %d refused of %d; want some refused past the limit and at least 1000 granted", len(granted), refused, n)
	}
	if got := heldAdvisory(t, dsn); got != len(granted) {
		t.Fatalf("pg_locks: the holder sessions hold %d advisory locks; want the %d granted", got, len(granted))
	}
	refusedNX(t, addr, granted)
	c := pgClient(t, addr)
	info := opsInfo(t, c)
	if info["lockproxy_postgres_holder_sessions_lost"] != "0" {
		t.Fatalf("INFO: holder sessions lost = %q; want 0", info["lockproxy_postgres_holder_sessions_lost"])
	}
	if info["lockproxy_postgres_advisory_locks"] != fmt.Sprint(len(granted)) || info["lockproxy_postgres_advisory_locks_limit"] == "" {
		t.Fatalf("INFO: advisory locks %q of %q; want %d of a limit", info["lockproxy_postgres_advisory_locks"], info["lockproxy_postgres_advisory_locks_limit"], len(granted))
	}
	held := fmt.Sprint(len(granted))
	if _, page := httpGet(t, admin+"/"); !strings.Contains(page, "advisory locks</dt><dd><span class=\"bad\">"+held+" of "+held+": full") {
		t.Errorf("the status page does not show the advisory locks full at %s:\n%s", held, page)
	}
	if _, m := httpGet(t, admin+"/metrics"); !strings.Contains(m, "lockproxy_postgres_advisory_locks "+held+"\n") ||
		!strings.Contains(m, "lockproxy_postgres_advisory_locks_limit "+held+"\n") || !strings.Contains(m, "lockproxy_postgres_lock_table_size 3000\n") {
		t.Errorf("/metrics lacks the advisory locks, their limit %s and the lock table's 3000", held)
	}
	// At the limit, what takes no lock for good still runs: a DEL of an
	// absent key, a GET, a script that only reads.
	if n, err := c.Del(t.Context(), "scale:absent").Result(); n != 0 || err != nil {
		t.Fatalf("DEL of an absent key at the limit = %d, %v; want 0", n, err)
	}
	if v, err := c.Eval(t.Context(), `return redis.call("get", KEYS[1])`, []string{granted[1]}).Text(); v != "tok" || err != nil {
		t.Fatalf("a reading script at the limit = %q, %v; want tok", v, err)
	}
	if err := c.Eval(t.Context(), `return redis.call("set", KEYS[1], "v")`, []string{"scale:by-script"}).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM ") {
		t.Fatalf("a script creating a key at the limit = %v; want OOM", err)
	}
	// A release makes room for one more.
	if n, err := c.Eval(t.Context(), releaseScript, []string{granted[0]}, "tok").Int(); n != 1 || err != nil {
		t.Fatalf("release = %d, %v", n, err)
	}
	if err := c.SetArgs(t.Context(), "scale:new", "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
		t.Fatalf("SET NX after a release = %v; want OK", err)
	}
	if err := c.SetArgs(t.Context(), "scale:one-more", "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM ") {
		t.Fatalf("SET NX at the limit again = %v; want OOM", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresAdvisoryLocksSetting: postgres-advisory-locks beyond 3/4 of
// the server's lock table fails at start, naming the setting to raise and
// the value that would do; within it, it is the limit INFO shows.
func TestPostgresAdvisoryLocksSetting(t *testing.T) {
	t.Parallel()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	_, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, AdvisoryLocks: 1_000_000})
	if err == nil || !strings.Contains(err.Error(), "postgres-advisory-locks 1000000 is more than 3/4 of PostgreSQL's lock table") ||
		!strings.Contains(err.Error(), "raise max_locks_per_transaction to") {
		t.Fatalf("New with postgres-advisory-locks 1000000 = %v; want a start error naming max_locks_per_transaction", err)
	}
	b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, AdvisoryLocks: 100})
	if err != nil {
		t.Fatal(err)
	}
	info := opsInfo(t, pgClient(t, testsrv.StartLockproxy(t, proxy.Config{BackendName: "postgres"}, b)))
	if info["lockproxy_postgres_advisory_locks_limit"] != "100" {
		t.Fatalf("INFO: advisory locks limit = %q; want 100", info["lockproxy_postgres_advisory_locks_limit"])
	}
}

// TestScaleHundredThousandLocks: 100,000 locks held at once, in each
// strategy: every SET NX answers OK, and every lock is still held once all
// are granted (the lease rows, or the holder sessions' advisory locks in
// pg_locks, counted from SQL; SET NX of a sample from another client nil).
// The lease strategy holds them on a PostgreSQL of default settings; the
// advisory strategy on one whose lock table holds them
// (max_locks_per_transaction 1400: docs/postgres.md, Capacity). Named
// apart from TestPostgres*, which test.sh runs again at another lease row
// delay: once is enough for a capacity test of three minutes under -race.
func TestScaleHundredThousandLocks(t *testing.T) {
	t.Parallel()
	const n = 100_000
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			settings := []string{"max_connections=100"} // PostgreSQL's default, not the tests' 300
			if strategy == pgbridge.Advisory {
				settings = append(settings, "max_locks_per_transaction=1400")
			}
			dsn := testsrv.StartPostgresWith(t, settings...).NewDatabase(t)
			b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
			if err != nil {
				t.Fatal(err)
			}
			addr := testsrv.StartLockproxy(t, proxy.Config{BackendName: "postgres"}, b)
			start := time.Now()
			// Many connections, so that the holders' batches are large:
			// each transaction on a holder session costs PostgreSQL time
			// in proportion to the locks it holds (docs/postgres.md).
			for i, err := range setMany(t, addr, n, 400) {
				if err != nil {
					t.Fatalf("SET %s NX = %v; want OK", scaleKey(i), err)
				}
			}
			t.Logf("%d SET NX answered in %v", n, time.Since(start))
			if strategy == pgbridge.Advisory {
				if got := heldAdvisory(t, dsn); got != n {
					t.Fatalf("pg_locks: the holder sessions hold %d advisory locks; want %d", got, n)
				}
			} else {
				var rows int
				if err := pgConn(t, dsn).QueryRow(t.Context(), `SELECT count(*) FROM lockproxy.leases WHERE token = 'tok' AND expires_at > now()`).Scan(&rows); err != nil || rows != n {
					t.Fatalf("live lease rows = %d, %v; want %d", rows, err, n)
				}
			}
			var sample []string
			for i := 0; i < n; i += 97 {
				sample = append(sample, scaleKey(i))
			}
			refusedNX(t, addr, append(sample, scaleKey(n-1)))
			if info := opsInfo(t, pgClient(t, addr)); strategy == pgbridge.Advisory && info["lockproxy_postgres_holder_sessions_lost"] != "0" {
				t.Fatalf("INFO: holder sessions lost = %q; want 0", info["lockproxy_postgres_holder_sessions_lost"])
			}
		})
	}
}
