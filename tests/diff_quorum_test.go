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
// nodes (flushed before each case), in RESP2 and RESP3.
func TestDifferentialQuorum(t *testing.T) {
	cases := append(diffLoadCorpus(t), diffGenerated()...)
	cases = append(cases, diffScriptCases(t)...)
	redis := testsrv.StartRedis(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, testsrv.StartRedis(t).Addr)
	}
	for _, proto := range []int{2, 3} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("resp%d/%s", proto, c.name), func(t *testing.T) {
				for _, a := range addrs {
					admin := dialRESP(t, a)
					admin.do("FLUSHALL")
					admin.do("SCRIPT", "FLUSH")
				}
				b, err := quorum.New(quorum.Config{Nodes: addrs, NodeTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				diffRun(t, redis.Addr, testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b), proto, c)
			})
		}
	}
}
