package model

import (
	"cmp"
	"slices"

	"github.com/lockproxy/lockproxy/backend"
)

// Values beyond the string. A key holds a string (Entry.Token) or one
// Object: a *Hash, *Set, *List or *ZSet. Objects are changed in place by
// the commands, and a command that leaves one empty deletes its key, as
// Redis does. Where Redis's reply order depends on its encoding, the
// model gives the order of the small encodings lock libraries see (a
// listpack keeps insertion order, an intset sorts its integers); past
// Redis's listpack limits (128 entries) Redis switches to a hash table
// whose order no client can rely on.

// Object is a value of a type other than string.
type Object interface {
	// Type is the name TYPE answers: "hash", "set", "list" or "zset".
	Type() string
	// Len counts the entries.
	Len() int
	// Clone returns a deep copy (COPY).
	Clone() Object
	// Encoding is what OBJECT ENCODING answers for it.
	Encoding() string
}

// ordered is a set of distinct strings in insertion order, each with a
// value: a hash's fields, a set's members.
type ordered struct {
	keys []string
	vals []string
	idx  map[string]int // key → position; built once the set is larger than orderedScan
}

// orderedScan is the size up to which ordered looks keys up by scanning.
const orderedScan = 16

func (o *ordered) find(k string) int {
	if o.idx != nil {
		if i, ok := o.idx[k]; ok {
			return i
		}
		return -1
	}
	for i, x := range o.keys {
		if x == k {
			return i
		}
	}
	return -1
}

// put sets k's value and reports whether k is new.
func (o *ordered) put(k, v string) bool {
	if i := o.find(k); i >= 0 {
		o.vals[i] = v
		return false
	}
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
	switch {
	case o.idx != nil:
		o.idx[k] = len(o.keys) - 1
	case len(o.keys) > orderedScan:
		o.reindex()
	}
	return true
}

func (o *ordered) get(k string) (string, bool) {
	if i := o.find(k); i >= 0 {
		return o.vals[i], true
	}
	return "", false
}

// del removes k and reports whether it was there.
func (o *ordered) del(k string) bool {
	i := o.find(k)
	if i < 0 {
		return false
	}
	o.keys = slices.Delete(o.keys, i, i+1)
	o.vals = slices.Delete(o.vals, i, i+1)
	if o.idx != nil {
		o.reindex()
	}
	return true
}

func (o *ordered) reindex() {
	o.idx = make(map[string]int, len(o.keys))
	for i, k := range o.keys {
		o.idx[k] = i
	}
}

func (o *ordered) clone() ordered {
	c := ordered{keys: slices.Clone(o.keys), vals: slices.Clone(o.vals)}
	if o.idx != nil {
		c.reindex()
	}
	return c
}

// Hash is a hash: fields and their values, in insertion order.
type Hash struct{ o ordered }

func (h *Hash) Type() string     { return "hash" }
func (h *Hash) Len() int         { return len(h.o.keys) }
func (h *Hash) Clone() Object    { return &Hash{h.o.clone()} }
func (h *Hash) Encoding() string { return encoding(h.Len() <= 128, "listpack", "hashtable") }

// Fields returns the fields and values in order; the caller must not
// change them.
func (h *Hash) Fields() (fields, values []string) { return h.o.keys, h.o.vals }

// Set is a set of members, in insertion order.
type Set struct{ o ordered }

func (s *Set) Type() string  { return "set" }
func (s *Set) Len() int      { return len(s.o.keys) }
func (s *Set) Clone() Object { return &Set{s.o.clone()} }
func (s *Set) Encoding() string {
	_, ints := s.ints()
	return encoding(ints, "intset", "hashtable")
}

// Members returns the members as SMEMBERS lists them: sorted numerically
// when they are all integers (Redis's intset, up to 512 of them), else in
// insertion order.
func (s *Set) Members() []string {
	if n, ok := s.ints(); ok {
		out := slices.Clone(s.o.keys)
		slices.SortFunc(out, func(a, b string) int { return cmp.Compare(n[a], n[b]) })
		return out
	}
	return s.o.keys
}

// ints returns the members as integers when Redis 7.0 keeps them in an
// intset: every one an integer in canonical form, at most 512.
func (s *Set) ints() (map[string]int64, bool) {
	if len(s.o.keys) > 512 {
		return nil, false
	}
	n := make(map[string]int64, len(s.o.keys))
	for _, k := range s.o.keys {
		v, ok := parseStrictInt(k)
		if !ok {
			return nil, false
		}
		n[k] = v
	}
	return n, true
}

// List is a list of elements.
type List struct{ items []string }

func (l *List) Type() string     { return "list" }
func (l *List) Len() int         { return len(l.items) }
func (l *List) Clone() Object    { return &List{slices.Clone(l.items)} }
func (l *List) Encoding() string { return "quicklist" } // Redis 7.0: every list

// Items returns the elements; the caller must not change them.
func (l *List) Items() []string { return l.items }

// ZSet is a sorted set: members ordered by score, then by member bytes.
type ZSet struct {
	score  map[string]float64
	sorted []zEntry
}

type zEntry struct {
	member string
	score  float64
}

func zCompare(a zEntry, score float64, member string) int {
	return cmp.Or(cmp.Compare(a.score, score), cmp.Compare(a.member, member))
}

func (z *ZSet) Type() string { return "zset" }
func (z *ZSet) Len() int     { return len(z.sorted) }
func (z *ZSet) Clone() Object {
	c := &ZSet{score: make(map[string]float64, len(z.score)), sorted: slices.Clone(z.sorted)}
	for k, v := range z.score {
		c.score[k] = v
	}
	return c
}
func (z *ZSet) Encoding() string { return encoding(z.Len() <= 128, "listpack", "skiplist") }

// Score returns member's score.
func (z *ZSet) Score(member string) (float64, bool) {
	s, ok := z.score[member]
	return s, ok
}

// put sets member's score, and reports whether it is new.
func (z *ZSet) put(member string, score float64) bool {
	if z.score == nil {
		z.score = make(map[string]float64)
	}
	old, had := z.score[member]
	if had {
		if old == score {
			return false
		}
		z.remove(member, old)
	}
	z.score[member] = score
	i, _ := slices.BinarySearchFunc(z.sorted, zEntry{member, score}, func(e, t zEntry) int { return zCompare(e, t.score, t.member) })
	z.sorted = slices.Insert(z.sorted, i, zEntry{member, score})
	return !had
}

// del removes member and reports whether it was there.
func (z *ZSet) del(member string) bool {
	s, ok := z.score[member]
	if !ok {
		return false
	}
	z.remove(member, s)
	delete(z.score, member)
	return true
}

func (z *ZSet) remove(member string, score float64) {
	i, found := slices.BinarySearchFunc(z.sorted, zEntry{member, score}, func(e, t zEntry) int { return zCompare(e, t.score, t.member) })
	if found {
		z.sorted = slices.Delete(z.sorted, i, i+1)
	}
}

// rank returns member's 0-based position in score order.
func (z *ZSet) rank(member string) (int, bool) {
	s, ok := z.score[member]
	if !ok {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(z.sorted, zEntry{member, s}, func(e, t zEntry) int { return zCompare(e, t.score, t.member) })
	return i, true
}

func encoding(small bool, a, b string) string {
	if small {
		return a
	}
	return b
}

// parseStrictInt parses s as Redis's string2ll does (backend.ParseInt).
func parseStrictInt(s string) (int64, bool) { return backend.ParseInt([]byte(s)) }
