package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy/backend"
)

// newPostgres connects the postgres backend. It fails at start when the
// database cannot be reached or the lease table cannot be created, with
// PostgreSQL's reason.
func newPostgres(cfg Config, runner *luascripts.Runner, log *slog.Logger) (backend.Backend, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgConnectTimeout)
	defer cancel()
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: cfg.PostgresDSN, Strategy: cfg.PostgresStrategy,
		Schema: cfg.PostgresSchema, Runner: runner, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("postgres-dsn %s: %w", maskDSN(cfg.PostgresDSN), err)
	}
	var warnings []string
	if cfg.PostgresStrategy == pgbridge.Advisory {
		warnings = append(warnings, "postgres advisory strategy: locks end with this instance (its sessions hold them)")
	}
	return b, warnings, nil
}

const pgConnectTimeout = 15 * time.Second

// maskDSN hides the password of a URL DSN for logs and errors.
func maskDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return "(dsn)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.Redacted()
}
