package quorum_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestUnorderedReadsAgree: nodes that hold the same hash and set, each
// listing its members in another order (written in another order: a small
// hash or set keeps insertion order), answer HKEYS, HVALS, HGETALL and
// SMEMBERS by meaning, not TRYAGAIN.
func TestUnorderedReadsAgree(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	ctx := context.Background()
	orders := [][]string{{"a", "b", "c"}, {"c", "a", "b"}, {"b", "c", "a"}}
	for i, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		for _, f := range orders[i] {
			c.HSet(ctx, "h", f, "v"+f)
			c.SAdd(ctx, "s", f)
		}
		c.Close()
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"HKEYS", "h"}, []string{"a", "b", "c"}},
		{[]string{"HVALS", "h"}, []string{"va", "vb", "vc"}},
		{[]string{"HGETALL", "h"}, []string{"a", "va", "b", "vb", "c", "vc"}},
		{[]string{"SMEMBERS", "s"}, []string{"a", "b", "c"}},
	} {
		args := make([][]byte, len(tc.args))
		for i, a := range tc.args {
			args[i] = []byte(a)
		}
		v, err := b.Do(ctx, 0, []string{tc.args[1]}, args)
		if err != nil {
			t.Errorf("%v: %v; want the members", tc.args, err)
			continue
		}
		var got []string
		if tc.args[0] == "HGETALL" { // field-value pairs, in some node's order
			var pairs []string
			for i := 0; i+1 < len(v.Elems); i += 2 {
				pairs = append(pairs, string(v.Elems[i].Str)+"\x00"+string(v.Elems[i+1].Str))
			}
			slices.Sort(pairs)
			for _, p := range pairs {
				f, val, _ := strings.Cut(p, "\x00")
				got = append(got, f, val)
			}
		} else {
			for _, e := range v.Elems {
				got = append(got, string(e.Str))
			}
			slices.Sort(got)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v = %v (%v); want %v", tc.args, got, v.Kind, tc.want)
		}
	}
}
