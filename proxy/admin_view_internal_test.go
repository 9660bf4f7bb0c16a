package proxy

import (
	"slices"
	"testing"
	"time"
)

// TestHumanDuration: a TTL or an age reads as a person says it, cut to
// its two largest units.
func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                     "0 ms",
		850 * time.Millisecond:                "850 ms",
		29499 * time.Millisecond:              "29.4 s",
		59999 * time.Millisecond:              "59.9 s",
		time.Minute:                           "1 min 0 s",
		3*time.Minute + 2900*time.Millisecond: "3 min 2 s",
		2*time.Hour + 5*time.Minute + 59*time.Second: "2 h 5 min",
		76 * time.Hour: "3 d 4 h",
		-time.Second:   "0 ms",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q; want %q", d, got, want)
		}
	}
}

// TestSortLocks: by TTL the soonest to end first, without a TTL last; by
// age the longest held first, of unknown age last; ties by key.
func TestSortLocks(t *testing.T) {
	at := func(ms int64) *int64 { return &ms }
	locks := []Lock{
		{Key: "d", TTLMillis: -1, Holder: LockHolder{GrantedMillis: at(100)}},
		{Key: "c", TTLMillis: 5000},
		{Key: "b", TTLMillis: 300, Holder: LockHolder{GrantedMillis: at(300)}},
		{Key: "a", TTLMillis: 5000, Holder: LockHolder{GrantedMillis: at(200)}},
	}
	for by, want := range map[string][]string{"key": {"a", "b", "c", "d"}, "ttl": {"b", "a", "c", "d"}, "age": {"d", "a", "b", "c"}} {
		sortLocks(locks, by)
		var got []string
		for _, l := range locks {
			got = append(got, l.Key)
		}
		if !slices.Equal(got, want) {
			t.Errorf("sorted by %s: %q; want %q", by, got, want)
		}
	}
}
