package tests

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestDifferentialPostgres sends the whole differential corpus to a real
// redis-server and to lockproxy on the postgres backend (each strategy,
// one proxy and database each), in RESP2 and RESP3. Between cases every
// key left in the lease table is deleted through the proxy, and the
// proxy's script cache is emptied.
func TestDifferentialPostgres(t *testing.T) {
	cases := append(diffLoadCorpus(t, "postgres"), diffGenerated()...)
	cases = append(cases, diffScriptCases(t)...)
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			redis := testsrv.StartRedis(t) // one each: diffRun flushes it
			proxyAddr, dsn := testsrv.StartPostgresProxy(t, strategy)
			db, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.Background())
			for _, proto := range []int{2, 3} {
				for _, c := range cases {
					t.Run(fmt.Sprintf("resp%d/%s", proto, c.name), func(t *testing.T) {
						pgFlush(t, db, proxyAddr)
						diffRun(t, redis.Addr, proxyAddr, proto, c)
					})
				}
			}
		})
	}
}

// pgFlush deletes, through the proxy at addr, every key of the lease table
// of db, and empties the proxy's script cache.
func pgFlush(t *testing.T, db *pgx.Conn, addr string) {
	t.Helper()
	rows, err := db.Query(t.Context(), "SELECT db, key FROM lockproxy.leases")
	if err != nil {
		t.Fatal(err)
	}
	type dk struct {
		db  int
		key []byte
	}
	var keys []dk
	for rows.Next() {
		var k dk
		if err := rows.Scan(&k.db, &k.key); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	c := dialRESP(t, addr)
	for _, k := range keys {
		if r, err := c.do("SELECT", strconv.Itoa(k.db)); err != nil || r != "+OK\r\n" {
			t.Fatalf("SELECT %d = %q, %v", k.db, r, err)
		}
		if _, err := c.do("DEL", string(k.key)); err != nil {
			t.Fatalf("DEL %q: %v", k.key, err)
		}
	}
	if r, err := c.do("SCRIPT", "FLUSH"); err != nil || r != "+OK\r\n" {
		t.Fatalf("lockproxy SCRIPT FLUSH = %q, %v", r, err)
	}
}
