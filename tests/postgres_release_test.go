package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestPostgresForceRelease: in both strategies, deleting a held lock's
// lease row from SQL is refused (naming the function to use) and leaves
// the lock held; lockproxy.force_release ends it, through another
// instance than the holder's too, so that another client then acquires;
// a lock younger than the row delay (no row yet) is released as well.
func TestPostgresForceRelease(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			addr, dsn := testsrv.StartPostgresProxy(t, strategy)
			other := pgClient(t, startPostgresProxyOn(t, dsn, strategy))
			holder := pgClient(t, addr)
			sql := pgConn(t, dsn)

			// A lock with a TTL over a minute has its row at once.
			if ok, err := holder.SetNX(ctx, "fr:row", "tok-a", 2*time.Minute).Result(); err != nil || !ok {
				t.Fatalf("SET NX = %v, %v", ok, err)
			}
			_, err := sql.Exec(ctx, `DELETE FROM lockproxy.leases WHERE db = 0 AND key = 'fr:row'::bytea`)
			if err == nil || !strings.Contains(err.Error(), "is held; deleting its row would not release it") {
				t.Fatalf("DELETE of a held lock's row: %v; want the guard's refusal", err)
			}
			if _, err := sql.Exec(ctx, `TRUNCATE lockproxy.leases`); err == nil || !strings.Contains(err.Error(), "would leave its locks held") {
				t.Fatalf("TRUNCATE of the lease table: %v; want the guard's refusal", err)
			}
			var n int
			if err := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.leases WHERE key = 'fr:row'::bytea`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("rows of fr:row after the refused DELETE = %d, %v; want 1", n, err)
			}
			if ok, err := other.SetNX(ctx, "fr:row", "tok-b", time.Minute).Result(); err != nil || ok {
				t.Fatalf("SET NX on the held key after the refused DELETE = %v, %v; want nil", ok, err)
			}

			forceRelease(t, sql, "fr:row", true)
			acquireSoon(t, other, "fr:row", "tok-b")
			if v, err := holder.Eval(ctx, releaseScript, []string{"fr:row"}, "tok-a").Int(); err != nil || v != 0 {
				t.Errorf("the old holder's release = %v, %v; want 0", v, err)
			}
			forceRelease(t, sql, "absent-key", false)

			// A short lock: without a row yet in the advisory strategy.
			if ok, err := holder.SetNX(ctx, "fr:young", "tok-a", 30*time.Second).Result(); err != nil || !ok {
				t.Fatalf("SET NX = %v, %v", ok, err)
			}
			forceRelease(t, sql, "fr:young", true)
			acquireSoon(t, other, "fr:young", "tok-b")

			// A dead row goes by DELETE as before.
			if ok, err := holder.SetNX(ctx, "fr:dead", "tok-a", 2*time.Minute).Result(); err != nil || !ok {
				t.Fatalf("SET NX = %v, %v", ok, err)
			}
			if err := holder.Del(ctx, "fr:dead").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := sql.Exec(ctx, `DELETE FROM lockproxy.leases WHERE key = 'fr:dead'::bytea`); err != nil {
				t.Errorf("DELETE of a released lock's row: %v; want it allowed", err)
			}
		})
	}
}

// forceRelease runs SELECT lockproxy.force_release(key) and checks its
// answer: whether the key was held.
func forceRelease(t *testing.T, sql *pgx.Conn, key string, want bool) {
	t.Helper()
	var got bool
	if err := sql.QueryRow(t.Context(), `SELECT lockproxy.force_release($1)`, key).Scan(&got); err != nil || got != want {
		t.Fatalf("force_release(%s) = %v, %v; want %v", key, got, err, want)
	}
}

// acquireSoon polls SET key token NX until it is granted: a force
// release in the advisory strategy happens on the holding instance once
// the function's transaction committed, a round trip later.
func acquireSoon(t *testing.T, c *redis.Client, key, token string) {
	t.Helper()
	wait.Until(t, fmt.Sprintf("SET %s NX granted after force_release", key), func() (bool, any) {
		ok, err := c.SetNX(t.Context(), key, token, time.Minute).Result()
		return err == nil && ok, fmt.Sprintf("SET NX = %v, %v", ok, err)
	})
}
