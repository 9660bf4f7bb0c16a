package luascripts

import (
	"context"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// BenchmarkRunLoop runs a script of ~40,000 instructions: what the
// instruction hook (budget.go) costs a long script.
func BenchmarkRunLoop(b *testing.B) {
	r := New(Config{})
	s := backend.Script{Src: "local n = 0 for i = 1, 10000 do n = n + i % 7 end return n"}
	c := &echoCaller{data: map[string]string{}}
	ctx := context.Background()
	for b.Loop() {
		if _, err := r.Run(ctx, s, nil, nil, c); err != nil {
			b.Fatal(err)
		}
	}
}
