package tests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestDifferentialPostgres sends the whole differential corpus to a real
// redis-server and to lockproxy on the postgres backend (each strategy,
// one proxy and database each), in RESP2 and RESP3. Between cases the
// proxy is flushed (FLUSHALL) and its script cache emptied.
func TestDifferentialPostgres(t *testing.T) {
	t.Parallel()
	cases := append(diffLoadCorpus(t, "postgres"), diffGenerated()...)
	cases = append(cases, diffScriptCases(t)...)
	cases = append(cases, diffAsFunctions(cases)...)
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			redis := testsrv.StartRedis(t) // one each: diffRun flushes it
			proxyAddr, _ := testsrv.StartPostgresProxy(t, strategy)
			prev := diffCase{lines: []diffLine{{args: []string{"SELECT"}}}} // the first flush is whole
			for _, proto := range []int{2, 3} {
				for _, c := range cases {
					t.Run(fmt.Sprintf("resp%d/%s", proto, c.name), func(t *testing.T) {
						pgFlush(t, proxyAddr, prev)
						diffRun(t, redis.Addr, proxyAddr, proto, c)
					})
					prev = c
				}
			}
		})
	}
}

// pgFlush empties what the case before (prev) may have written, and the
// script cache, of the proxy at addr, through it (locks without a row yet
// too): every database after a case that SELECTs or MOVEs, database 0
// otherwise (a FLUSHALL is sixteen listings of the lease table).
func pgFlush(t *testing.T, addr string, prev diffCase) {
	t.Helper()
	flush := []string{"FLUSHDB"}
	if slices.ContainsFunc(prev.lines, func(l diffLine) bool {
		return len(l.args) > 0 && (strings.EqualFold(l.args[0], "select") || strings.EqualFold(l.args[0], "move") || strings.EqualFold(l.args[0], "flushall") || strings.Contains(strings.ToLower(strings.Join(l.args, " ")), "select"))
	}) {
		flush = []string{"FLUSHALL"}
	}
	c := dialRESP(t, addr)
	for _, cmd := range [][]string{flush, {"SCRIPT", "FLUSH"}} {
		if r, err := c.do(cmd...); err != nil || r != "+OK\r\n" {
			t.Fatalf("lockproxy %v = %q, %v", cmd, r, err)
		}
	}
}
