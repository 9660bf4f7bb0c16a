package model

import (
	"encoding/binary"
	"errors"
	"math"
)

// Kinds number the value types for a store that keeps values as bytes
// (the postgres backend's lease table): 0 is a string, whose bytes are the
// value itself; the others are Objects in Encode's form.
const (
	KindString uint8 = iota
	KindHash
	KindSet
	KindList
	KindZSet
)

// errDecode reports bytes that are not an Object of their kind.
var errDecode = errors.New("model: malformed encoded value")

// Encode returns o's kind and its bytes: the number of entries, then each
// entry as its strings, each one its length (uvarint) and bytes, and a
// sorted set's scores as the 8 bytes of the float64 (big endian) after
// their members. The entries come in the order the model keeps them, so
// equal Objects have equal bytes and Decode restores that order (a hash's
// insertion order, which HGETALL shows).
func Encode(o Object) (kind uint8, data []byte) {
	switch o := o.(type) {
	case *Hash:
		return KindHash, appendStrings(appendStrings(uvarint(nil, len(o.o.keys)), o.o.keys...), o.o.vals...)
	case *Set:
		return KindSet, appendStrings(uvarint(nil, len(o.o.keys)), o.o.keys...)
	case *List:
		return KindList, appendStrings(uvarint(nil, len(o.items)), o.items...)
	case *ZSet:
		b := uvarint(nil, len(o.sorted))
		for _, e := range o.sorted {
			b = appendStrings(b, e.member)
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.score))
		}
		return KindZSet, b
	}
	panic("model: Encode of an unknown Object")
}

// Decode is Encode's inverse.
func Decode(kind uint8, data []byte) (Object, error) {
	d := decoder{b: data}
	n := d.count()
	var o Object
	switch kind {
	case KindHash:
		keys := d.strings(n)
		vals := d.strings(n)
		h := &Hash{}
		for i := range keys {
			if i < len(vals) {
				h.o.put(keys[i], vals[i])
			}
		}
		o = h
	case KindSet:
		s := &Set{}
		for _, m := range d.strings(n) {
			s.o.put(m, "")
		}
		o = s
	case KindList:
		o = &List{items: d.strings(n)}
	case KindZSet:
		z := &ZSet{}
		for range n {
			m := d.string()
			if len(d.b) < 8 {
				d.bad = true
				break
			}
			z.put(m, math.Float64frombits(binary.BigEndian.Uint64(d.b)))
			d.b = d.b[8:]
		}
		o = z
	default:
		return nil, errDecode
	}
	if d.bad || len(d.b) != 0 || o.Len() != n || n == 0 {
		return nil, errDecode
	}
	return o, nil
}

func uvarint(b []byte, n int) []byte { return binary.AppendUvarint(b, uint64(n)) }

func appendStrings(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = append(uvarint(b, len(s)), s...)
	}
	return b
}

type decoder struct {
	b   []byte
	bad bool
}

// count reads a number of entries no larger than the bytes left could
// hold (each entry takes a byte at least).
func (d *decoder) count() int {
	n, w := binary.Uvarint(d.b)
	if w <= 0 || n > uint64(len(d.b)) {
		d.bad = true
		return 0
	}
	d.b = d.b[w:]
	return int(n)
}

func (d *decoder) string() string {
	n := d.count()
	if d.bad || n > len(d.b) {
		d.bad = true
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) strings(n int) []string {
	out := make([]string, 0, n)
	for range n {
		if d.bad {
			return out
		}
		out = append(out, d.string())
	}
	return out
}
