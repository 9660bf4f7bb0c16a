package tests

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
)

// TestQuorumRefusalKeepsSameValue: two clients send the same acquire with
// the same value (npm redis-lock's deadline, a hand-written `SET lock 1 NX`,
// a client re-sending its own SET NX). The second is refused, and the
// first one's lock must stay: GET still answers the value, through
// lockproxy and on every node, as Redis does. A refusal that undoes with an
// owner-checked delete removes the holder's lock, since the owner check
// cannot tell the two apart (issue 23 item 2). Both front ends.
func TestQuorumRefusalKeepsSameValue(t *testing.T) {
	t.Parallel()
	const script = `if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then return 1 end return 0`
	cases := []struct {
		name          string
		cmd           []string // on key "k"
		first, second string   // raw replies: granted, refused
	}{
		{"SET NX PX", []string{"SET", "k", "v", "NX", "PX", "50000"}, "+OK\r\n", "$-1\r\n"},
		{"SET PX NX", []string{"SET", "k", "v", "PX", "50000", "NX"}, "+OK\r\n", "$-1\r\n"},
		{"SETNX", []string{"SETNX", "k", "v"}, ":1\r\n", ":0\r\n"},
		{"acquiring script", []string{"EVAL", script, "1", "k", "v", "50000"}, ":1\r\n", ":0\r\n"},
	}
	for _, path := range []string{proxy.DataPathLoops, proxy.DataPathGoroutines} {
		for _, tc := range cases {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				addr, nodes := testsrv.StartQuorumProxyWith(t, 3, time.Second, proxy.Config{BackendName: "quorum", DataPath: path})
				a, b := dialRESP(t, addr), dialRESP(t, addr)
				if got, err := a.do(tc.cmd...); err != nil || got != tc.first {
					t.Fatalf("client 1: %q = %q, %v; want %q", tc.cmd, got, err, tc.first)
				}
				if got, err := b.do(tc.cmd...); err != nil || got != tc.second {
					t.Fatalf("client 2: %q = %q, %v; want %q", tc.cmd, got, err, tc.second)
				}
				if got, err := a.do("GET", "k"); err != nil || got != "$1\r\nv\r\n" {
					t.Errorf("GET k = %q, %v after the refused %s; want %q (the first client's lock)", got, err, tc.name, "$1\r\nv\r\n")
				}
				for i, n := range nodes {
					if got, err := dialRESP(t, n.Addr).do("GET", "k"); err != nil || got != "$1\r\nv\r\n" {
						t.Errorf("node %d: GET k = %q, %v; want %q", i, got, err, "$1\r\nv\r\n")
					}
				}
			})
		}
	}
}
