package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// netNodes are quorum nodes reached through in-process toxiproxy proxies,
// so the tests can add latency or cut a node off.
type netNodes struct {
	nodes   []*testsrv.Redis
	proxies []*toxiproxy.Proxy
}

// startNetNodes starts n redis-servers and one toxiproxy proxy in front of
// each (loopback, free ports); the proxies stop when the test ends.
func startNetNodes(t *testing.T, n int) *netNodes {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	nn := &netNodes{nodes: quorumNodes(t, n)}
	for i, r := range nn.nodes {
		p := toxiproxy.NewProxy(srv, fmt.Sprintf("node%d", i), "127.0.0.1:0", r.Addr)
		if err := p.Start(); err != nil {
			t.Fatalf("toxiproxy for %s: %v", r.Addr, err)
		}
		t.Cleanup(p.Stop)
		nn.proxies = append(nn.proxies, p)
	}
	return nn
}

// addrs are the proxies' addresses, for lockproxy's --quorum-nodes.
func (nn *netNodes) addrs() []string {
	out := make([]string, len(nn.proxies))
	for i, p := range nn.proxies {
		out[i] = p.Listen
	}
	return out
}

// addToxic adds a toxic (toxiproxy's JSON form) to node i's proxy.
func (nn *netNodes) addToxic(t *testing.T, i int, json string) {
	t.Helper()
	if _, err := nn.proxies[i].Toxics.AddToxicJson(strings.NewReader(json)); err != nil {
		t.Errorf("add toxic %s to node %d: %v", json, i, err)
	}
}

// removeToxic removes the toxic named name from node i's proxy.
func (nn *netNodes) removeToxic(ctx context.Context, t *testing.T, i int, name string) {
	t.Helper()
	if err := nn.proxies[i].Toxics.RemoveToxic(context.WithoutCancel(ctx), name); err != nil {
		t.Errorf("remove toxic %s from node %d: %v", name, i, err)
	}
}

// TestSlowNode: one node at a time answers later than the TTL (latency in
// both directions, 600ms against a 500ms TTL): whatever it says arrives after
// every lock it could vote for has expired. The other two carry the votes.
func TestSlowNode(t *testing.T) {
	nn := startNetNodes(t, 3)
	lp := startQuorumBinary(t, nn.addrs())
	cycles := 0
	runNemesis(t, nemesis{Name: "latency 600ms (> TTL) on one node", Backend: "quorum", Client: "goredis", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			for i := 0; pause(ctx, 200*time.Millisecond); i++ {
				n := i % 3
				nn.addToxic(t, n, `{"name":"up","type":"latency","stream":"upstream","attributes":{"latency":300}}`)
				nn.addToxic(t, n, `{"name":"down","type":"latency","stream":"downstream","attributes":{"latency":300}}`)
				pause(ctx, 1200*time.Millisecond)
				nn.removeToxic(ctx, t, n, "up")
				nn.removeToxic(ctx, t, n, "down")
				cycles++
			}
		})
	faultRan(t, cycles)
}

// TestPartitionOneNode: one node at a time is cut off: first a black hole
// (its connections stay open and nothing passes either way), then its
// connections are cut and new ones refused; then it is healed.
func TestPartitionOneNode(t *testing.T) {
	nn := startNetNodes(t, 3)
	lp := startQuorumBinary(t, nn.addrs())
	cycles := 0
	runNemesis(t, nemesis{Name: "minority partition (black hole, then cut)", Backend: "quorum", Client: "redislock", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			for i := 0; pause(ctx, 300*time.Millisecond); i++ {
				n := i % 3
				nn.addToxic(t, n, `{"name":"hole-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
				nn.addToxic(t, n, `{"name":"hole-down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
				pause(ctx, 600*time.Millisecond)
				nn.proxies[n].Stop()
				nn.removeToxic(ctx, t, n, "hole-up")
				nn.removeToxic(ctx, t, n, "hole-down")
				pause(ctx, 400*time.Millisecond)
				if err := nn.proxies[n].Start(); err != nil {
					t.Errorf("heal node %d: %v", n, err)
				}
				cycles++
			}
		})
	faultRan(t, cycles)
}
