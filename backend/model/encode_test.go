package model

import (
	"bytes"
	"math"
	"testing"
)

// TestEncodeRoundTrip: each type comes back from its bytes with its
// entries in the order the replies show them, and equal values have equal
// bytes (the postgres backend compares them to see what changed).
func TestEncodeRoundTrip(t *testing.T) {
	s := &Space{}
	v := &View{Now: now, Spaces: []*Space{s}}
	for _, c := range [][]string{
		{"hset", "h", "b", "2", "a", "", "", "1"},
		{"sadd", "s", "x", "", "y"},
		{"sadd", "i", "10", "-3", "7"},
		{"rpush", "l", "a", "a", "", "b"},
		{"zadd", "z", "2", "b", "1", "c", "-inf", "n", "inf", "p", "1", "a", "-0", "m"},
	} {
		if _, err := do(t, v, c...); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	reads := map[string][]string{
		"h": {"hgetall", "h"}, "s": {"smembers", "s"}, "i": {"smembers", "i"},
		"l": {"lrange", "l", "0", "-1"}, "z": {"zrange", "z", "0", "-1", "withscores"},
	}
	for key, read := range reads {
		_, o, _ := s.Lookup(0, key, now)
		kind, data := Encode(o)
		back, err := Decode(kind, data)
		if err != nil {
			t.Fatalf("%s: Decode: %v", key, err)
		}
		if k2, d2 := Encode(back); k2 != kind || !bytes.Equal(d2, data) {
			t.Errorf("%s: encoded again as %d %q; want %d %q", key, k2, d2, kind, data)
		}
		want, _ := do(t, v, read...)
		s2 := &Space{}
		s2.PutObject(0, key, back, 0)
		got, _ := do(t, &View{Now: now, Spaces: []*Space{s2}}, read...)
		if got.String() != want.String() {
			t.Errorf("%s after a round trip: %v = %s; want %s", key, read, got, want)
		}
	}
}

// TestDecodeRefusesMalformed: bytes that are not a value of their kind are
// an error, never a panic or a partial value.
func TestDecodeRefusesMalformed(t *testing.T) {
	h := &Hash{}
	h.o.put("f", "v")
	_, hb := Encode(h)
	z := &ZSet{}
	z.put("m", math.Pi)
	_, zb := Encode(z)
	for _, c := range []struct {
		kind uint8
		data []byte
	}{
		{KindString, []byte{1, 1, 'a'}},
		{9, hb},
		{KindHash, nil},
		{KindHash, hb[:len(hb)-1]},
		{KindHash, append(hb, 0)},
		{KindHash, []byte{2, 1, 'f', 1, 'f', 1, 'a', 1, 'b'}}, // a field twice
		{KindSet, []byte{0}}, // empty: such a key does not exist
		{KindSet, []byte{200}},
		{KindList, []byte{1, 5, 'a'}},
		{KindZSet, zb[:len(zb)-3]},
		{KindZSet, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		if o, err := Decode(c.kind, c.data); err == nil {
			t.Errorf("Decode(%d, %q) = %v; want an error", c.kind, c.data, o)
		}
	}
}
