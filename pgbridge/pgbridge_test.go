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
