package main

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestBinaryPostgres runs the binary on the postgres backend against a
// database of the shared test PostgreSQL: a lock cycle, the admin
// endpoints, SIGTERM.
func TestBinaryPostgres(t *testing.T) {
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	runBinary(t, []string{"--backend", "postgres", "--postgres-dsn", dsn}, "backend=postgres", "locks end with this instance")
}
