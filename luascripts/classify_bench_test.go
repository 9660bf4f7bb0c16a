package luascripts

import (
	"os"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// BenchmarkClassify is the one-time cost of classifying a script (a cache
// miss); BenchmarkClassesHit the per-call cost once it is known;
// BenchmarkClassesGuarded the per-call check of node redlock's extend.
func BenchmarkClassify(b *testing.B) {
	src, _ := os.ReadFile("../tests/testdata/scripts/redislock-release.lua")
	r := New(Config{})
	s := backend.Script{Src: string(src)}
	args := [][]byte{[]byte("tok")}
	for b.Loop() {
		Classify(b.Context(), r, s, []string{"a", "b"}, args)
	}
}

func BenchmarkClassesHit(b *testing.B) {
	src, _ := os.ReadFile("../tests/testdata/scripts/redislock-release.lua")
	var c Classes
	s := backend.Script{Src: string(src), SHA1: SHA1(string(src))}
	args, keys := [][]byte{[]byte("tok")}, []string{"a"}
	for b.Loop() {
		c.Of(b.Context(), s, keys, args)
	}
}

func BenchmarkClassesGuarded(b *testing.B) {
	src, _ := os.ReadFile("../tests/testdata/scripts/redlock5-extend.lua")
	var c Classes
	s := backend.Script{Src: string(src), SHA1: SHA1(string(src))}
	args, keys := [][]byte{[]byte("tok"), []byte("5000")}, []string{"a"}
	for b.Loop() {
		c.Of(b.Context(), s, keys, args)
	}
}
