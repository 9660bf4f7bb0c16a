package pgbridge_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/proxy/backend/backendtest"
)

// newBackend starts a Backend of strategy on a fresh database of the
// shared test server and closes it when the test ends.
func newBackend(t *testing.T, strategy, dsn string) *pgbridge.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy})
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
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t, strategy, dsn) })
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
