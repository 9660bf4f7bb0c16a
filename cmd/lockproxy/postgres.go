package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// newPostgres connects the postgres backend. It fails at start when the
// database cannot be reached or the lease table cannot be created, with
// PostgreSQL's reason.
func newPostgres(cfg Config, runner *luascripts.Runner, log *slog.Logger) (backend.Backend, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgConnectTimeout)
	defer cancel()
	delay, _ := parseDuration(cfg.PostgresRowDelay) // validated
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: cfg.PostgresDSN, Strategy: cfg.PostgresStrategy,
		Schema: cfg.PostgresSchema, LeaseRowDelay: delay, AdvisoryLocks: cfg.PostgresAdvLocks,
		Runner: runner, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("postgres-dsn %s: %w", maskDSN(cfg.PostgresDSN), err)
	}
	var warnings []string
	if cfg.PostgresStrategy == pgbridge.Advisory {
		warnings = append(warnings, "postgres advisory strategy: a lock without a TTL ends with this instance's PostgreSQL sessions (a lock with one fences its key until its TTL runs out)")
	}
	return b, warnings, nil
}

const pgConnectTimeout = 15 * time.Second

// maskDSN hides the passwords of a DSN for logs and errors: the URL's
// user password and its password/sslpassword parameters, or the
// password/sslpassword values of a key=value DSN.
func maskDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
		return u.Redacted()
	}
	return dsnPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

// dsnPassword is a password or sslpassword setting of a key=value DSN:
// a bare value, or a quoted one with backslash escapes.
var dsnPassword = regexp.MustCompile(`(?i)((?:^|\s)(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
