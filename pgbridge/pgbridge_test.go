package pgbridge_test

import (
	"context"
	"testing"
	"time"

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
