package model

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestScanTrimKeepsThePage: a page over the trimmed parts of a key space
// is the page over the whole, whatever the cursor, count and split (hash
// ties included: keys repeat across parts' draws only by name).
func TestScanTrimKeepsThePage(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var all []KeyType
		parts := make([][]KeyType, 1+r.IntN(5))
		for i := range r.IntN(60) {
			k := KeyType{Key: "k" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Type: "string"}
			all = append(all, k)
			p := r.IntN(len(parts))
			parts[p] = append(parts[p], k)
		}
		sc := Scan{Count: 1 + int64(r.IntN(12))}
		if r.IntN(2) == 0 && len(all) > 0 {
			sc.Cursor = scanHash(all[r.IntN(len(all))].Key)
		}
		var trimmed []KeyType
		for _, p := range parts {
			trimmed = append(trimmed, sc.Trim(p)...)
		}
		if got, want := sc.Page(trimmed), sc.Page(all); !reflect.DeepEqual(got, want) {
			t.Fatalf("Page over trimmed parts (cursor %d, count %d) = %v; want %v", sc.Cursor, sc.Count, got, want)
		}
	}
}
