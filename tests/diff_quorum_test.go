package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestDifferentialQuorum sends the whole differential corpus to a real
// redis-server and to lockproxy on the quorum backend over three real
// nodes, in RESP2 and RESP3. One backend and one proxy serve every case
// (a new backend per case cost ~35 ms, most of this test's time): before
// each case the nodes are flushed and the proxy's script cache is emptied,
// and the case runs on new connections, so no state crosses cases.
func TestDifferentialQuorum(t *testing.T) {
	t.Parallel()
	cases := append(diffLoadCorpus(t, "quorum"), diffGenerated()...)
	cases = append(cases, diffScriptCases(t)...)
	cases = append(cases, diffAsFunctions(cases)...)
	redis := testsrv.StartRedis(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, testsrv.StartRedis(t).Addr)
	}
	b, err := quorum.New(quorum.Config{Nodes: addrs, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b)
	for _, proto := range []int{2, 3} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("resp%d/%s", proto, c.name), func(t *testing.T) {
				for _, a := range addrs {
					admin := dialRESP(t, a)
					for _, cmd := range [][]string{{"FLUSHALL"}, {"SCRIPT", "FLUSH"}} {
						if r, err := admin.do(cmd...); err != nil || r != "+OK\r\n" {
							t.Fatalf("node %s %v = %q, %v", a, cmd, r, err)
						}
					}
				}
				if r, err := dialRESP(t, proxyAddr).do("SCRIPT", "FLUSH"); err != nil || r != "+OK\r\n" {
					t.Fatalf("lockproxy SCRIPT FLUSH = %q, %v", r, err)
				}
				diffRun(t, redis.Addr, proxyAddr, proto, c)
			})
		}
	}
}
