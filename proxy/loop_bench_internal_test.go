package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/memory"
)

// BenchmarkLoopLockCycle runs one lock cycle as lockbench sends it (SET …
// NX PX, then the release script by EVALSHA) through the event loop's
// command path, metrics on as in the binary: the user-space part of a
// cycle, without gnet and the system calls.
func BenchmarkLoopLockCycle(b *testing.B) {
	be := memory.New(memory.Config{})
	defer be.Close(context.Background())
	s := New(Config{DataPath: DataPathLoops, Registerer: prometheus.NewRegistry()}, be)
	const release = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	if _, v, ok := s.load([]byte(release)); !ok {
		b.Fatal(v)
	}
	sha := luascripts.SHA1(release)
	lc := newLoopConn(s, "127.0.0.1:1")
	cmd := func(args ...string) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
		}
		return sb.String()
	}
	set := []byte(cmd("set", "lockbench:17", "lockbench-abcdefgh-17", "ex", "10", "nx"))
	rel := []byte(cmd("evalsha", sha, "1", "lockbench:17", "lockbench-abcdefgh-17"))
	want := "+OK\r\n:1\r\n"
	b.ReportAllocs()
	for b.Loop() {
		lc.out = lc.out[:0]
		for _, in := range [][]byte{set, rel} {
			lc.serveInput(in)
			if len(lc.in) > 0 {
				b.Fatalf("%d bytes left unserved", len(lc.in))
			}
		}
		if string(lc.out) != want {
			b.Fatalf("replies %q, want %q", lc.out, want)
		}
	}
}
