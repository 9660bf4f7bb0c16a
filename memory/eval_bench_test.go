package memory

import (
	"context"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// BenchmarkEvalScript runs a Lua script that is not catalogued, reading
// and writing its key (redsync's extend: GET, then PEXPIRE): what a
// script costs on the memory backend, the journal of its writes
// included.
func BenchmarkEvalScript(b *testing.B) {
	be := New(Config{})
	defer be.Close(context.Background())
	ctx := context.Background()
	be.Set(ctx, 0, "k", []byte("tok"), backend.SetOptions{})
	const src = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`
	s := backend.Script{Src: src}
	keys, args := []string{"k"}, [][]byte{[]byte("tok"), []byte("10000")}
	b.ReportAllocs()
	for b.Loop() {
		if v, err := be.Eval(ctx, 0, s, keys, args, false); err != nil || v.Int != 1 {
			b.Fatal(v, err)
		}
	}
}
