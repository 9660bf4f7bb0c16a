package pgbridge_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// whole runs a command on the whole key space of db 0.
func whole(t *testing.T, b *pgbridge.Backend, args ...string) backend.Value {
	t.Helper()
	ba := make([][]byte, len(args))
	for i, a := range args {
		ba[i] = []byte(a)
	}
	v, err := b.Do(t.Context(), 0, nil, ba)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// bulkStrings lists an array reply's strings, sorted.
func bulkStrings(v backend.Value) []string {
	var out []string
	for _, e := range v.Elems {
		out = append(out, string(e.Str))
	}
	slices.Sort(out)
	return out
}

// TestWholeKeySpace: KEYS, SCAN and RANDOMKEY list every live key of the
// database from every instance, locks without a row yet (held by other
// instances) included; FLUSHDB deletes them all, releasing the locks
// where they are held; FLUSHALL every database. A script is refused the
// commands, as its model holds its own keys only.
func TestWholeKeySpace(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			var bes []*pgbridge.Backend
			for _, d := range []time.Duration{time.Minute, time.Minute, 0} { // two keep their rows back
				bes = append(bes, newBackendStrict(t, pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: d}))
			}
			var want []string
			for i, be := range bes {
				for j := range 3 {
					key := fmt.Sprintf("%d:%d", i, j)
					if r, err := be.Set(ctx, 0, key, []byte("tok"), nx(30*time.Second)); err != nil || !r.Written {
						t.Fatalf("SET NX %s = %+v, %v", key, r, err)
					}
					want = append(want, key)
				}
			}
			mustDo(t, bes[0], ":1", "hset", "h", "f", "v")
			want = append(want, "h")
			slices.Sort(want)
			if _, err := bes[1].Set(ctx, 1, "other-db", []byte("v"), backend.SetOptions{}); err != nil {
				t.Fatal(err)
			}
			for i, be := range bes {
				if got := bulkStrings(whole(t, be, "keys", "*")); !slices.Equal(got, want) {
					t.Errorf("instance %d: KEYS * = %v; want %v", i, got, want)
				}
				if got := bulkStrings(whole(t, be, "keys", "1:*")); !slices.Equal(got, []string{"1:0", "1:1", "1:2"}) {
					t.Errorf("instance %d: KEYS 1:* = %v", i, got)
				}
				var seen []string
				for cursor, pages := "0", 0; ; pages++ {
					v := whole(t, be, "scan", cursor, "count", "3")
					cursor = string(v.Elems[0].Str)
					for _, e := range v.Elems[1].Elems {
						seen = append(seen, string(e.Str))
					}
					if cursor == "0" {
						break
					}
					if pages > 20 {
						t.Fatal("SCAN did not end")
					}
				}
				slices.Sort(seen)
				if !slices.Equal(slices.Compact(seen), want) {
					t.Errorf("instance %d: SCAN COUNT 3 saw %v; want %v", i, seen, want)
				}
				if got := whole(t, be, "scan", "0", "type", "hash").Elems[1]; len(got.Elems) != 1 || string(got.Elems[0].Str) != "h" {
					t.Errorf("instance %d: SCAN 0 TYPE hash = %v", i, got)
				}
				if k := string(whole(t, be, "randomkey").Str); !slices.Contains(want, k) {
					t.Errorf("instance %d: RANDOMKEY = %q", i, k)
				}
			}
			keys := scriptOf(`return redis.call('keys', '*')`)
			if _, err := bes[0].Eval(ctx, 0, keys, []string{"h"}, nil, false); err == nil || !strings.Contains(err.Error(), "does not run 'keys' from scripts") {
				t.Errorf("KEYS in a script = %v; want the refusal", err)
			}
			if v := whole(t, bes[2], "flushdb"); v.String() != "+OK" {
				t.Fatalf("FLUSHDB = %v", v)
			}
			for i, be := range bes {
				if n, err := be.DBSize(ctx, 0); err != nil || n != 0 {
					t.Errorf("instance %d: DBSIZE after FLUSHDB = %d, %v", i, n, err)
				}
			}
			// Instance 0's locks were released where it held them.
			if r, err := bes[1].Set(ctx, 0, "0:0", []byte("new"), nx(30*time.Second)); err != nil || !r.Written {
				t.Errorf("SET NX of a flushed key held by another instance = %+v, %v; want written", r, err)
			}
			if n, _ := bes[0].DBSize(ctx, 1); n != 1 {
				t.Errorf("FLUSHDB emptied database 1 too: DBSIZE %d", n)
			}
			whole(t, bes[0], "flushall")
			for db := range 2 {
				if n, err := bes[2].DBSize(ctx, db); err != nil || n != 0 {
					t.Errorf("DBSIZE of %d after FLUSHALL = %d, %v", db, n, err)
				}
			}
			if v := whole(t, bes[0], "randomkey"); !v.IsNil() {
				t.Errorf("RANDOMKEY of an empty database = %v", v)
			}
		})
	}
}
