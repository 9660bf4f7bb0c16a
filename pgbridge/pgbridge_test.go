package pgbridge_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/backendtest"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// rowDelay is the Config.LeaseRowDelay of the tests that do not set their
// own: LOCKPROXY_TEST_PG_ROW_DELAY, or lockproxy's default (200ms). Run
// the package also with LOCKPROXY_TEST_PG_ROW_DELAY=0s (a row at once).
func rowDelay(t *testing.T) time.Duration { return testsrv.PostgresRowDelay(t) }

// newBackend starts a Backend of strategy on a fresh database of the
// shared test server and closes it when the test ends.
func newBackend(t *testing.T, strategy, dsn string) *pgbridge.Backend {
	t.Helper()
	return newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: rowDelay(t)})
}

// newBackendStrict starts a Backend of exactly cfg (LeaseRowDelay
// included: no LOCKPROXY_TEST_PG_ROW_DELAY) and closes it when the test
// ends, failing the test when Close fails.
func newBackendStrict(t *testing.T, cfg pgbridge.Config) *pgbridge.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := pgbridge.New(ctx, cfg)
	if err != nil {
		t.Fatalf("pgbridge.New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy string
		delay    time.Duration
	}{{"advisory", pgbridge.Advisory, 0}, {"advisory-deferred", pgbridge.Advisory, 200 * time.Millisecond}, {"lease", pgbridge.Lease, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				return newBackendStrict(t, pgbridge.Config{DSN: dsn, Strategy: tc.strategy, LeaseRowDelay: tc.delay})
			})
		})
	}
}

// TestNewFailsClearly: an unreachable database and a role without the
// right to create the lease table fail New with a message naming the
// cause and the fix.
func TestNewFailsClearly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if _, err := pgbridge.New(ctx, pgbridge.Config{DSN: "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}); err == nil ||
		!strings.Contains(err.Error(), "cannot reach PostgreSQL") {
		t.Errorf("New on an unreachable database = %v; want cannot reach PostgreSQL", err)
	}
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := fmt.Sprintf("lockproxy_noperm_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP OWNED BY "+role)
		admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	u, _ := url.Parse(dsn)
	u.User = url.User(role)
	_, err = pgbridge.New(ctx, pgbridge.Config{DSN: u.String()})
	if err == nil || !strings.Contains(err.Error(), "grant CREATE") {
		t.Fatalf("New as a role that may not create the schema = %v; want a message that says to grant CREATE", err)
	}
	t.Log(err)
}

// TestReap: the lease table follows the live locks. Lease strategy:
// expired rows are deleted; advisory: rows whose holder session is gone
// (an instance that died without cleaning up) are deleted.
func TestReap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	count := func(t *testing.T, c *pgx.Conn) int {
		t.Helper()
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM lockproxy.leases").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitRows := func(t *testing.T, c *pgx.Conn, want int) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); count(t, c) != want; {
			if time.Now().After(end) {
				t.Fatalf("lease rows = %d after 20s; want %d", count(t, c), want)
			}
			time.Sleep(20 * time.Millisecond) // polling for the reaper
		}
	}
	t.Run("lease", func(t *testing.T) {
		dsn := testsrv.SharedPostgres(t).NewDatabase(t)
		b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Lease, ReapInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background())
		for i := range 30 {
			if _, err := b.Set(ctx, 0, fmt.Sprintf("reap:%d", i), []byte("t"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 50 * time.Millisecond}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Set(ctx, 0, "reap:kept", []byte("t"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		waitRows(t, c, 1)
	})
	t.Run("advisory", func(t *testing.T) {
		dsn := testsrv.SharedPostgres(t).NewDatabase(t)
		b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, ReapInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background())
		if _, err := b.Set(ctx, 0, "reap:live", []byte("t"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		// A row of an instance that died: its holder session (pid 1) holds nothing.
		if _, err := c.Exec(ctx, `INSERT INTO lockproxy.leases (db, key, lock_id, token, holder, holder_pid)
			VALUES (0, 'reap:dead', hashtextextended('reap:dead', 0), 't', 'dead/0', 1)`); err != nil {
			t.Fatal(err)
		}
		waitRows(t, c, 1)
		if v, ok, err := b.Get(ctx, 0, "reap:live"); string(v) != "t" || !ok || err != nil {
			t.Fatalf("the live lock after the reaper ran = %q, %v, %v", v, ok, err)
		}
	})
}

// scriptOf is src as the proxy hands it to a backend: with its SHA1.
func scriptOf(src string) backend.Script {
	h := sha1.Sum([]byte(src))
	return backend.Script{SHA1: hex.EncodeToString(h[:]), Src: src}
}

// TestLeaseFastPaths: in the lease strategy SET … NX PX and the catalogued
// release scripts run as one statement each (lease.go); they must answer
// as the general path does: a live row is held, a row past its deadline
// is absent, only the owner's token releases, the TTL counts from the
// command, and an SQL session holding the key's advisory lock excludes.
func TestLeaseFastPaths(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	b := newBackend(t, pgbridge.Lease, dsn)
	nx := func(ttl time.Duration) backend.SetOptions {
		return backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: ttl}}
	}
	set := func(key, token string, o backend.SetOptions) bool {
		t.Helper()
		r, err := b.Set(ctx, 0, key, []byte(token), o)
		if err != nil {
			t.Fatalf("SET %s %s: %v", key, token, err)
		}
		return r.Written
	}
	for _, src := range []string{
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
		"local token = redis.call('get', KEYS[1])\nif not token or token ~= ARGV[1] then\n    return 0\nend\nredis.call('del', KEYS[1])\nreturn 1",
	} {
		script := scriptOf(src)
		release := func(key, token string) int64 {
			t.Helper()
			v, err := b.Eval(ctx, 0, script, []string{key}, [][]byte{[]byte(token)}, false)
			if err != nil || v.Kind != backend.KindInt {
				t.Fatalf("release %s %s = %+v, %v; want an integer", key, token, v, err)
			}
			return v.Int
		}
		key := "fast:" + script.SHA1[:8]
		if !set(key, "t1", nx(time.Minute)) {
			t.Fatal("SET NX PX on an absent key: not written")
		}
		if set(key, "t2", nx(time.Minute)) {
			t.Fatal("SET NX PX on a held key: written")
		}
		if ms, err := b.PTTL(ctx, 0, key); err != nil || ms <= 59_000 || ms > 60_000 {
			t.Fatalf("PTTL after SET PX 60000 = %d, %v", ms, err)
		}
		if n := release(key, "t2"); n != 0 {
			t.Fatalf("release by another token = %d; want 0", n)
		}
		if n := release(key, "t1"); n != 1 {
			t.Fatalf("release by the owner = %d; want 1", n)
		}
		if n := release(key, "t1"); n != 0 {
			t.Fatalf("second release = %d; want 0", n)
		}
		if _, ok, err := b.Get(ctx, 0, key); ok || err != nil {
			t.Fatalf("GET after release: present %v, %v", ok, err)
		}

		// A row past its deadline (the reaper has not run yet) is absent
		// for both.
		if !set(key, "old", nx(5*time.Millisecond)) {
			t.Fatal("SET NX PX 5: not written")
		}
		time.Sleep(20 * time.Millisecond) // past the 5 ms TTL
		if n := release(key, "old"); n != 0 {
			t.Fatalf("release of an expired lock by its owner = %d; want 0", n)
		}
		if !set(key, "new", nx(time.Minute)) {
			t.Fatal("SET NX PX over an expired row: not written")
		}
		if v, _, err := b.Get(ctx, 0, key); string(v) != "new" || err != nil {
			t.Fatalf("GET = %q, %v; want new", v, err)
		}
		if n := release(key, "new"); n != 1 {
			t.Fatalf("release = %d; want 1", n)
		}

		// A key without a TTL is held forever.
		if !set(key, "forever", backend.SetOptions{}) || set(key, "t", nx(time.Minute)) {
			t.Fatal("SET NX PX over a key without a TTL was written (or the plain SET was not)")
		}
	}

	release := scriptOf(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)
	// An SQL session holding the advisory lock excludes SET NX PX (the
	// fast statement cannot take the transaction lock; the general path
	// then gives up with nil) and the release of a lock taken before: it
	// fails and the lock stays. Once the session lets go, both work.
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('fast:sql', 0))"); err != nil {
		t.Fatal(err)
	}
	if set("fast:sql", "t", nx(time.Minute)) {
		t.Fatal("SET NX PX while an SQL session holds the advisory lock: written")
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended('fast:sql', 0))"); err != nil {
		t.Fatal(err)
	}
	if !set("fast:sql", "t", nx(time.Minute)) {
		t.Fatal("SET NX PX after the SQL session let go: not written")
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('fast:sql', 0))"); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Eval(ctx, 0, release, []string{"fast:sql"}, [][]byte{[]byte("t")}, false); err == nil {
		t.Fatalf("release while an SQL session holds the advisory lock = %+v; want an error", v)
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended('fast:sql', 0))"); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := b.Get(ctx, 0, "fast:sql"); string(v) != "t" || !ok || err != nil {
		t.Fatalf("GET after a refused release = %q, %v, %v; want the lock kept", v, ok, err)
	}
	if v, err := b.Eval(ctx, 0, release, []string{"fast:sql"}, [][]byte{[]byte("t")}, false); err != nil || v.Int != 1 {
		t.Fatalf("release after the SQL session let go = %+v, %v; want 1", v, err)
	}
}

// TestLeaseAfterSessionsEnd: when PostgreSQL ends the pool's sessions (as
// a restart does), the next command meets a dead connection. A fast
// statement (SET NX PX) then answers TRYAGAIN, as its outcome is unknown;
// the general path (a plain SET) retries, since its first step commits
// nothing. Either way the pool's other dead connections are dropped, so
// the commands after it do not meet them one by one.
func TestLeaseAfterSessionsEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	b := newBackend(t, pgbridge.Lease, dsn)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tc := range []struct {
		name     string
		o        backend.SetOptions
		failures int // allowed
	}{
		{"fast", backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}, 1},
		{"general", backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}}, 0},
	} {
		var wg sync.WaitGroup
		for i := range 16 { // fill the pool with connections
			wg.Go(func() {
				if _, err := b.Set(ctx, 0, fmt.Sprintf("warm:%s:%d", tc.name, i), []byte("t"), tc.o); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		var ended int
		if err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&ended); err != nil {
			t.Fatal(err)
		}
		if ended < 4 {
			t.Fatalf("%s: %d pooled sessions to end; the test needs at least 4", tc.name, ended)
		}
		// Within a second of their last use: pgxpool does not ping them.
		failed := 0
		for i := range 20 {
			if _, err := b.Set(ctx, 0, fmt.Sprintf("after:%s:%d", tc.name, i), []byte("t"), tc.o); err != nil {
				failed++
				t.Logf("%s: SET after the sessions ended: %v", tc.name, err)
			}
		}
		if failed > tc.failures {
			t.Errorf("%s: %d of 20 SET failed after %d pooled sessions ended; want at most %d", tc.name, failed, ended, tc.failures)
		}
	}
}

// TestLeasesTextView: operators read key and token as text in
// <schema>.leases_text (psql shows the table's bytea columns in hex), with
// every column of the lease table that docs/postgres.md lists; a view
// made by an earlier version (without the holder columns) gains them when
// an instance starts.
func TestLeasesTextView(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		dsn := testsrv.SharedPostgres(t).NewDatabase(t)
		b := newBackend(t, strategy, dsn)
		ctx := t.Context()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `DROP VIEW lockproxy.leases_text; CREATE VIEW lockproxy.leases_text AS SELECT db, encode(key, 'escape') AS key,
			encode(token, 'escape') AS token, expires_at, holder, holder_pid, lock_id, deadline_ms FROM lockproxy.leases`); err != nil {
			t.Fatal(err)
		}
		newBackend(t, strategy, dsn) // a second instance brings the earlier view up to date
		// A TTL over a minute: its row is written at once, whatever the row delay.
		hctx := backend.WithHolder(ctx, holderSlot(&backend.Holder{Addr: "10.0.0.7:5100", Name: "billing", User: "app", Instance: "inst-a"}))
		if _, err := b.Set(hctx, 0, "lock:report", []byte("tok-1"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 2 * time.Minute}}); err != nil {
			t.Fatal(err)
		}
		var key, token, name, user, by string
		var kind int16
		var granted int64
		var live bool
		err = c.QueryRow(ctx, `SELECT key, token, expires_at > now(), kind, granted_ms, client_name, client_user, granted_by
			FROM lockproxy.leases_text WHERE db = 0`).Scan(&key, &token, &live, &kind, &granted, &name, &user, &by)
		if err != nil || key != "lock:report" || token != "tok-1" || !live || kind != 0 || granted <= 0 || name != "billing" || user != "app" || by != "inst-a" {
			t.Errorf("%s: leases_text = %q, %q, live %v, kind %d, granted_ms %d, client %q/%q, granted_by %q, %v; want lock:report, tok-1, live, 0, the grant's time, billing/app, inst-a",
				strategy, key, token, live, kind, granted, name, user, by, err)
		}
		rows, _ := c.Query(ctx, `SELECT a.column_name::text FROM information_schema.columns a WHERE a.table_schema = 'lockproxy' AND a.table_name = 'leases'
			AND NOT EXISTS (SELECT FROM information_schema.columns v WHERE v.table_schema = 'lockproxy' AND v.table_name = 'leases_text' AND v.column_name = a.column_name)`)
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(cols) > 0 {
			t.Errorf("%s: leases_text lacks the lease table's columns %q (%v)", strategy, cols, err)
		}
	}
}

// holderSlot is a HolderSlot holding h.
func holderSlot(h *backend.Holder) *backend.HolderSlot {
	s := new(backend.HolderSlot)
	s.Store(h)
	return s
}
