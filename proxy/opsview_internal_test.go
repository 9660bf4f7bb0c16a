package proxy

import (
	"fmt"
	"strings"
	"testing"
)

// TestOpsViewContended: the space-saving summary keeps at most topKeys
// keys, a heavy key stays first among many light ones, and its count is
// exact when it never left; db tells keys apart; long keys are cut.
func TestOpsViewContended(t *testing.T) {
	var o opsView
	for i := range 5000 {
		o.contended(0, []byte(fmt.Sprintf("light:%d", i)))
		if i%3 == 0 {
			o.contended(0, []byte("heavy"))
		}
	}
	o.contended(1, []byte("heavy"))
	top := o.topContended()
	if len(top) != topKeys {
		t.Fatalf("summary of 5001 keys holds %d; want %d", len(top), topKeys)
	}
	if top[0].Key() != "heavy" || top[0].DB != 0 || top[0].Count != 1667 || top[0].Err != 0 {
		t.Errorf("first = %s db %d count %d ±%d; want heavy db 0 count 1667 ±0", top[0].Key(), top[0].DB, top[0].Count, top[0].Err)
	}
	for i := 1; i < len(top); i++ {
		if top[i].Count > top[i-1].Count {
			t.Errorf("summary not sorted at %d: %d after %d", i, top[i].Count, top[i-1].Count)
		}
	}
	long := strings.Repeat("k", 500)
	var p opsView
	p.contended(0, []byte(long))
	p.contended(0, []byte(long))
	if got := p.topContended(); len(got) != 1 || got[0].Key() != long[:maxKeyShown] || got[0].Count != 2 {
		t.Errorf("a 500-byte key kept as %d bytes, count %d; want one entry cut at %d, count 2", len(got[0].Key()), got[0].Count, maxKeyShown)
	}
}

// TestOpsViewTryagain: the ring keeps the last recentTryagain replies,
// newest first.
func TestOpsViewTryagain(t *testing.T) {
	var o opsView
	if got := o.recentTryagains(); len(got) != 0 {
		t.Fatalf("empty ring = %v", got)
	}
	for i := range 25 {
		o.sawTryagain("set", []byte(fmt.Sprintf("TRYAGAIN #%d", i)))
	}
	got := o.recentTryagains()
	if len(got) != recentTryagain || got[0].Message != "TRYAGAIN #24" || got[len(got)-1].Message != "TRYAGAIN #5" || got[0].Command != "set" {
		t.Errorf("ring after 25 replies: %d kept, newest %q, oldest %q; want %d, #24 … #5", len(got), got[0].Message, got[len(got)-1].Message, recentTryagain)
	}
}

// BenchmarkOpsViewContended is what a refused acquire adds to its path:
// "hit" refuses a key already in the summary, "churn" cycles over more
// keys than it keeps (every call replaces an entry). Neither allocates.
func BenchmarkOpsViewContended(b *testing.B) {
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("lockbench:%d", i))
	}
	b.Run("hit", func(b *testing.B) {
		var o opsView
		b.ReportAllocs()
		for b.Loop() {
			o.contended(0, keys[0])
		}
	})
	b.Run("churn", func(b *testing.B) {
		var o opsView
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			o.contended(0, keys[i])
			i = (i + 1) % len(keys)
		}
	})
}
