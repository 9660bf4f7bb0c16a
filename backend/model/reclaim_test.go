package model

import (
	"strconv"
	"testing"
)

// TestSample: a sample looks at no more than n keys, deletes only those
// past their deadline, and counts them as expired.
func TestSample(t *testing.T) {
	s := &Space{}
	for i := range 30 {
		s.Put(1, "dead"+strconv.Itoa(i), Entry{Token: tok, Deadline: now})
		s.Put(1, "live"+strconv.Itoa(i), Entry{Token: tok, Deadline: now + 1})
	}
	seen, expired := s.Sample(1, 20, now)
	if seen != 20 || expired > 20 || s.Stored() != 60-expired || s.Expired() != uint64(expired) {
		t.Fatalf("Sample(20) = %d seen, %d expired; %d stored, Expired %d", seen, expired, s.Stored(), s.Expired())
	}
	for s.Stored() > 30 {
		s.Sample(1, 20, now)
	}
	if n := s.Count(1, now); n != 30 || s.Expired() != 30 {
		t.Errorf("after sampling to the end: %d live, Expired %d; want 30, 30", n, s.Expired())
	}
	if seen, expired := s.Sample(5, 20, now); seen != 0 || expired != 0 {
		t.Errorf("Sample of an unused database = %d, %d; want 0, 0", seen, expired)
	}
}

func TestShrink(t *testing.T) {
	for _, tc := range []struct {
		name      string
		peak, len int
		want      bool
	}{
		{"never used", 0, 0, false},
		{"small map", ShrinkMin - 1, 10, false},
		{"small map emptied", 10, 0, true},
		{"still full", 4000, 1001, false},
		{"quarter of peak", 4000, 1000, true},
		{"empty", 4000, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Space
			for i := range tc.peak {
				s.Put(1, strconv.Itoa(i), Entry{Token: tok})
			}
			for i := tc.len; i < tc.peak; i++ {
				s.Del(1, strconv.Itoa(i), now)
			}
			if got := s.Shrink(1); got != tc.want {
				t.Fatalf("Shrink = %v; want %v", got, tc.want)
			}
			if len(s.dbs[1]) != tc.len {
				t.Errorf("%d entries after Shrink; want %d", len(s.dbs[1]), tc.len)
			}
			if tc.want && s.peak[1] != tc.len {
				t.Errorf("peak after Shrink = %d; want %d", s.peak[1], tc.len)
			}
		})
	}
}

// TestReset: a reset Space is empty and counts from zero again.
func TestReset(t *testing.T) {
	s := &Space{}
	s.Put(0, "a", Entry{Token: tok, Deadline: now})
	s.Put(15, "b", Entry{Token: tok})
	s.Get(0, "a", now)
	s.Reset()
	if s.Stored() != 0 || s.Expired() != 0 || s.peak[15] != 0 {
		t.Errorf("after Reset: %d stored, Expired %d, peak %d; want all 0", s.Stored(), s.Expired(), s.peak[15])
	}
	if _, ok := s.Get(15, "b", now); ok {
		t.Error("a reset Space still holds a key")
	}
}
