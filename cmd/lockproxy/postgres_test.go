package main

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestBinaryPostgres runs the binary on the postgres backend against a
// database of the shared test PostgreSQL: a lock cycle, the admin
// endpoints, SIGTERM.
func TestBinaryPostgres(t *testing.T) {
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	runBinary(t, []string{"--backend", "postgres", "--postgres-dsn", dsn}, "backend=postgres", "a lock without a TTL ends with this instance")
}

// TestMaskDSN: no form of DSN pgx accepts shows its passwords in a log
// line or an error.
func TestMaskDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://app:s3cret@db:5432/locks?sslmode=verify-full", "postgres://app:xxxxx@db:5432/locks?sslmode=verify-full"},
		{"postgres://app@db/locks?password=s3cret&sslpassword=s3cret", "postgres://app@db/locks?password=xxxxx&sslpassword=xxxxx"},
		{"postgresql://db/locks", "postgresql://db/locks"},
		{"host=db user=app password=s3cret dbname=locks", "host=db user=app password=xxxxx dbname=locks"},
		{"host=db password = 's3 cr\\'et' sslpassword=s3cret", "host=db password = xxxxx sslpassword=xxxxx"},
		{"PASSWORD=s3cret host=db", "PASSWORD=xxxxx host=db"},
	} {
		got := maskDSN(tc.dsn)
		if got != tc.want || strings.Contains(got, "s3") {
			t.Errorf("maskDSN(%q) = %q; want %q", tc.dsn, got, tc.want)
		}
	}
}
