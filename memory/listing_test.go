package memory

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// TestListingShardByShard: KEYS and SCAN, answered one shard at a time,
// give what the whole store answers under its one lock (KEYS as a set,
// SCAN page by page), with types, TTLs and other databases mixed
// in.
func TestListingShardByShard(t *testing.T) {
	b := New(Config{})
	defer b.Close(t.Context())
	ctx := t.Context()
	for i := range 600 {
		key := fmt.Sprintf("k%d", i)
		switch i % 4 {
		case 0:
			b.Set(ctx, 3, key, []byte("v"), backend.SetOptions{})
		case 1:
			b.Do(ctx, 3, []string{key}, [][]byte{[]byte("HSET"), []byte(key), []byte("f"), []byte("v")})
		case 2:
			b.Set(ctx, 4, key, []byte("v"), backend.SetOptions{}) // another database
		case 3:
			b.Do(ctx, 3, []string{key}, [][]byte{[]byte("SET"), []byte(key), []byte("v"), []byte("PX"), []byte("600000")})
		}
	}
	whole := func(args ...string) backend.Value {
		var v backend.Value
		b.all(3, func(mv *model.View) { v, _ = mv.Do(ctx, 3, nil, bytesOf(args)) })
		return v
	}
	shards := func(args ...string) backend.Value {
		v, err := b.Do(ctx, 3, nil, bytesOf(args))
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	for _, pattern := range []string{"*", "k1*", "k[23]?", "nothing*"} {
		got, want := names(shards("KEYS", pattern)), names(whole("KEYS", pattern))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("KEYS %s = %d keys; want %d", pattern, len(got), len(want))
		}
	}
	for _, tail := range [][]string{{"COUNT", "7"}, {"COUNT", "1"}, {"COUNT", "1000"}, {"MATCH", "k1*", "COUNT", "13"}, {"TYPE", "hash"}} {
		cursor, pages := "0", 0
		for {
			args := append([]string{"SCAN", cursor}, tail...)
			got, want := shards(args...), whole(args...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v = %v; want %v", args, got, want)
			}
			if cursor = string(got.Elems[0].Str); cursor == "0" {
				break
			}
			if pages++; pages > 1000 {
				t.Fatalf("SCAN %v did not end", tail)
			}
		}
	}
}

func bytesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func names(v backend.Value) []string {
	var out []string
	for _, e := range v.Elems {
		out = append(out, string(e.Str))
	}
	return out
}

// TestRandomKeyVaries: RANDOMKEY over a few keys (each likely in another
// shard) answers each of them in time, not always the same one (Redis's
// keyspace.tcl "RANDOMKEY" expects both of two keys within 100 tries).
func TestRandomKeyVaries(t *testing.T) {
	b := New(Config{})
	defer b.Close(t.Context())
	ctx := t.Context()
	for _, k := range []string{"foo", "bar", "baz"} {
		b.Set(ctx, 0, k, []byte("v"), backend.SetOptions{})
	}
	seen := map[string]bool{}
	for range 300 {
		v, err := b.Do(ctx, 0, nil, bytesOf([]string{"RANDOMKEY"}))
		if err != nil {
			t.Fatal(err)
		}
		seen[string(v.Str)] = true
	}
	if len(seen) != 3 {
		t.Errorf("RANDOMKEY answered %v in 300 tries; want all of foo, bar, baz", seen)
	}
}
