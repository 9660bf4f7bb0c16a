package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestRunAgainstRedisAndLockproxy runs a short measurement of lockproxy with
// a real redis-server as the comparison, as docs/performance.md's figures
// are made, with each lock client.
func TestRunAgainstRedisAndLockproxy(t *testing.T) {
	redis := testsrv.StartRedis(t)
	proxy := testsrv.StartMemoryProxy(t)
	for _, client := range []string{"go-redis", "redislock", "lean", "lean-eval", "lean -pipeline 4 -keys 3"} {
		t.Run(client, func(t *testing.T) {
			var out bytes.Buffer
			args := []string{"-addr", proxy, "-compare", redis.Addr, "-clients", "8", "-duration", "300ms", "-json", "-client"}
			err := run(t.Context(), append(args, strings.Fields(client)...), &out)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("want two results and a ratio, got:\n%s", out.String())
			}
			for _, l := range lines[:2] {
				var r Result
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				if r.Cycles == 0 || r.Errors != 0 || r.Acquire.P50 <= 0 || r.Release.P99 < r.Release.P50 {
					t.Errorf("implausible result %+v", r)
				}
			}
		})
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"no clients", []string{"-clients", "0"}},
		{"no duration", []string{"-duration", "0s"}},
		{"resp 4", []string{"-resp", "4"}},
		{"unknown client", []string{"-client", "redsync"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(t.Context(), tt.args, &out); err == nil {
				t.Fatalf("%q accepted", tt.args)
			}
		})
	}
}
