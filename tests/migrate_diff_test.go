package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/proxy"
)

// TestMigratingDifferential sends the whole differential corpus to a real
// redis-server and to lockproxy migrating from a legacy redis-server
// (memory backend), in RESP2 and RESP3: while nobody uses the legacy Redis
// directly, a migrating lockproxy must answer as Redis does. One legacy
// Redis serves every case, flushed before each; each case gets a fresh
// memory backend and proxy.
func TestMigratingDifferential(t *testing.T) {
	t.Parallel()
	cases := append(diffLoadCorpus(t, "migrating"), diffGenerated()...)
	cases = append(cases, diffScriptCases(t)...)
	redis := testsrv.StartRedis(t)
	legacy := testsrv.StartRedis(t)
	for _, proto := range []int{2, 3} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("resp%d/%s", proto, c.name), func(t *testing.T) {
				admin := dialRESP(t, legacy.Addr)
				for _, cmd := range [][]string{{"FLUSHALL"}, {"SCRIPT", "FLUSH"}} {
					if r, err := admin.do(cmd...); err != nil || r != "+OK\r\n" {
						t.Fatalf("legacy %v = %q, %v", cmd, r, err)
					}
				}
				b, err := migrate.New(memory.New(memory.Config{}), migrate.Config{URL: "redis://" + legacy.Addr, Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				diffRun(t, redis.Addr, testsrv.StartLockproxy(t, proxy.Config{BackendName: "memory"}, b), proto, c)
			})
		}
	}
}
