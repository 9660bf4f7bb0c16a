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

// BenchmarkLoopContended runs refused acquires (SET … NX PX on a held key)
// through the event loop's command path, metrics on: the path the status
// page's contended-keys summary (opsView) is written on. "one-key" refuses
// the same key every time (found in the summary); "1024-keys" cycles over
// more keys than the summary keeps, so every refusal replaces an entry
// (its worst case: a key copied each time).
func BenchmarkLoopContended(b *testing.B) {
	for _, n := range []int{1, 1024} {
		name := "one-key"
		if n > 1 {
			name = fmt.Sprintf("%d-keys", n)
		}
		b.Run(name, func(b *testing.B) {
			be := memory.New(memory.Config{})
			defer be.Close(context.Background())
			s := New(Config{DataPath: DataPathLoops, Registerer: prometheus.NewRegistry()}, be)
			lc := newLoopConn(s, "127.0.0.1:1")
			cmd := func(args ...string) []byte {
				var sb strings.Builder
				fmt.Fprintf(&sb, "*%d\r\n", len(args))
				for _, a := range args {
					fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
				}
				return []byte(sb.String())
			}
			sets := make([][]byte, n)
			for i := range sets {
				key := fmt.Sprintf("lockbench:%d", i)
				lc.serveInput(cmd("set", key, "holder", "px", "600000"))
				sets[i] = cmd("set", key, "lockbench-abcdefgh-17", "px", "10000", "nx")
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				lc.out = lc.out[:0]
				lc.serveInput(sets[i])
				if string(lc.out) != "$-1\r\n" {
					b.Fatalf("reply %q, want nil", lc.out)
				}
				i = (i + 1) % n
			}
		})
	}
}
