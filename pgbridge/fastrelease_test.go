package pgbridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestAdvisoryReleaseFastPath: a catalogued release of a lease this
// instance holds, with its token, runs on the fast path (advisory.go
// evalFast) and ends the lease as the general path does: the advisory
// lock and any lease row are gone, another instance takes the key at once.
// Any other release (a wrong token, a key held elsewhere or by nobody)
// is left to the general path.
func TestAdvisoryReleaseFastPath(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"row", 0}, {"deferred", deferredDelay}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			cfg := pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: tc.delay}
			b1, b2 := newBackendStrict(t, cfg), newBackendStrict(t, cfg)
			sql, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer sql.Close(context.Background())
			// The release script of the Redis docs, as catalogued (luascripts).
			release := scriptOf(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)
			fast := func(b *pgbridge.Backend, key, tok string) (int64, bool) {
				t.Helper()
				v, done, err := pgbridge.EvalFast(b, 0, release, key, [][]byte{[]byte(tok)})
				if err != nil {
					t.Fatalf("fast release of %s: %v", key, err)
				}
				return v.Int, done
			}
			if _, done := fast(b1, "k", "a"); done {
				t.Errorf("fast path taken for a key nobody holds")
			}
			if r, err := b1.Set(ctx, 0, "k", []byte("a"), nx(time.Minute)); err != nil || !r.Written {
				t.Fatalf("SET NX = %+v, %v", r, err)
			}
			if rowOf(t, sql, "k") != (tc.delay == 0) {
				t.Fatalf("lease row present = %v with delay %v", !(tc.delay == 0), tc.delay)
			}
			if _, done := fast(b1, "k", "b"); done {
				t.Errorf("fast path taken for a wrong token")
			}
			if _, done := fast(b2, "k", "a"); done {
				t.Errorf("fast path taken on an instance that does not hold the key")
			}
			if n, done := fast(b1, "k", "a"); !done || n != 1 {
				t.Fatalf("fast release by the holder = %d, done %v; want 1 on the fast path", n, done)
			}
			var locks int
			if err := sql.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&locks); err != nil {
				t.Fatal(err)
			}
			if locks != 0 || rowOf(t, sql, "k") {
				t.Errorf("after the release: %d advisory locks held, lease row present %v; want none", locks, rowOf(t, sql, "k"))
			}
			if _, ok, err := b1.Get(ctx, 0, "k"); err != nil || ok {
				t.Errorf("GET after the release = %v, %v; want absent", ok, err)
			}
			if r, err := b2.Set(ctx, 0, "k", []byte("c"), nx(time.Minute)); err != nil || !r.Written {
				t.Errorf("SET NX on another instance after the release = %+v, %v; want written", r, err)
			}
		})
	}
}
