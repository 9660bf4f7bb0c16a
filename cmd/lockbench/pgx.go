package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// measurePgx runs the baselines of the postgres backend straight on
// PostgreSQL with pgx, one connection per client:
//
//   - pgx:DSN, the advisory loop: pg_try_advisory_lock then
//     pg_advisory_unlock of hashtextextended(key, 0);
//   - pgx-lease:DSN, the lease-table loop: INSERT … ON CONFLICT (taking an
//     expired row) then a token-checked DELETE, on a table of its own
//     (lockbench_leases, created if missing).
//
// Neither has what lockproxy adds (tokens and TTLs for the advisory loop,
// a script surface, one address for every client): they are the floor
// docs/performance.md compares against.
func measurePgx(ctx context.Context, c config, addr string) (Result, error) {
	lease := strings.HasPrefix(addr, "pgx-lease:")
	dsn := addr[strings.Index(addr, ":")+1:]
	conns := make([]*pgx.Conn, c.clients)
	for i := range conns {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return Result{}, err
		}
		defer conn.Close(context.Background())
		conns[i] = conn
	}
	if lease {
		if _, err := conns[0].Exec(ctx, `CREATE TABLE IF NOT EXISTS lockbench_leases
			(key text PRIMARY KEY, token text NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
			return Result{}, err
		}
	}
	token := "lockbench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	name := "pgx advisory loop"
	if lease {
		name = "pgx lease-table loop"
	}
	r, err := loop(ctx, c, name, func(ctx context.Context, i int, key string) (bool, func() error, error) {
		conn := conns[i]
		if !lease {
			var ok bool
			err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok)
			return ok, func() error {
				var released bool
				if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key).Scan(&released); err != nil {
					return err
				}
				if !released {
					return fmt.Errorf("pg_advisory_unlock(%q) found no lock", key)
				}
				return nil
			}, err
		}
		tok := token + "-" + strconv.Itoa(i)
		tag, err := conn.Exec(ctx, `INSERT INTO lockbench_leases (key, token, expires_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
			ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
			WHERE lockbench_leases.expires_at < now()`, key, tok, c.ttl.Milliseconds())
		return err == nil && tag.RowsAffected() == 1, func() error {
			_, err := conn.Exec(ctx, `DELETE FROM lockbench_leases WHERE key = $1 AND token = $2`, key, tok)
			return err
		}, err
	})
	r.Addr = name
	return r, err
}
