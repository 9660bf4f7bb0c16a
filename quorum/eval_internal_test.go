package quorum

import (
	"maps"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// createdKeys counts a key as created by the script when it holds one of
// the script's arguments after it and did not hold that value before:
// absent before, or another's token (the reads around the script are not
// atomic with it: the other lock may have ended in between).
func TestCreatedKeys(t *testing.T) {
	mget := func(vs ...any) backend.Value {
		out := backend.Value{Kind: backend.KindArray}
		for _, v := range vs {
			if v == nil {
				out.Elems = append(out.Elems, backend.Value{Kind: backend.KindNil})
			} else {
				out.Elems = append(out.Elems, backend.Value{Kind: backend.KindBulk, Str: []byte(v.(string))})
			}
		}
		return out
	}
	keys := []string{"absent", "refreshed", "taken-over", "others", "unset"}
	args := [][]byte{[]byte("mine"), []byte("10000")}
	pre := mget(nil, "mine", "other", "other", nil)
	post := mget("mine", "mine", "mine", "other", nil)
	got := createdKeys(keys, pre, post, args)
	want := map[string]string{"absent": "mine", "taken-over": "mine"}
	if !maps.Equal(got, want) {
		t.Fatalf("createdKeys = %v; want %v", got, want)
	}
}
