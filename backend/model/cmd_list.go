package model

import (
	"slices"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
)

var listHandlers = map[string]handler{
	"lpush": cmdPush, "rpush": cmdPush, "lpushx": cmdPush, "rpushx": cmdPush,
	"lpop": cmdPop, "rpop": cmdPop, "lindex": cmdLIndex, "lrange": cmdLRange,
	"lrem": cmdLRem, "llen": cmdLLen, "lset": cmdLSet, "ltrim": cmdLTrim,
	"lmove": cmdLMove, "rpoplpush": cmdLMove,
}

// cmdLMove is LMOVE src dst LEFT|RIGHT LEFT|RIGHT and RPOPLPUSH src dst
// (RIGHT LEFT), as Redis runs them: the sides are read first, then src
// (nil when absent), then dst's type, before anything moves; src and dst
// may be one list (a rotation).
func cmdLMove(c *call) (backend.Value, error) {
	from, to := "right", "left"
	if c.name() == "lmove" {
		from, to = strings.ToLower(string(c.args[3])), strings.ToLower(string(c.args[4]))
		if (from != "left" && from != "right") || (to != "left" && to != "right") {
			return backend.Value{}, backend.Reply(backend.MsgSyntax)
		}
	}
	src, dst := c.key(1), c.key(2)
	l, ok, err := lookup[*List](c, src)
	if err != nil || !ok {
		return backend.NilValue, err
	}
	if _, _, err := lookup[*List](c, dst); err != nil {
		return backend.Value{}, err
	}
	var v string
	if from == "left" {
		v, l.items = l.items[0], l.items[1:]
	} else {
		v, l.items = l.items[len(l.items)-1], l.items[:len(l.items)-1]
	}
	d, err := create(c, dst, newList)
	if err != nil {
		return backend.Value{}, err
	}
	if to == "left" {
		d.items = slices.Insert(d.items, 0, v)
	} else {
		d.items = append(d.items, v)
	}
	c.settle(src, l)
	return backend.BulkString(v), nil
}

func newList() *List { return &List{} }

// cmdPush is LPUSH, RPUSH and their X forms (only onto an existing list).
func cmdPush(c *call) (backend.Value, error) {
	n := c.name()
	key := c.key(1)
	var l *List
	var err error
	if n == "lpushx" || n == "rpushx" {
		var ok bool
		if l, ok, err = lookup[*List](c, key); err != nil || !ok {
			return backend.Int(0), err
		}
	} else if l, err = create(c, key, newList); err != nil {
		return backend.Value{}, err
	}
	for _, a := range c.args[2:] {
		if n[0] == 'l' {
			l.items = slices.Insert(l.items, 0, string(a))
		} else {
			l.items = append(l.items, string(a))
		}
	}
	return backend.Int(int64(len(l.items))), nil
}

// cmdPop is LPOP and RPOP, with an optional count (then an array, nil
// array for an absent key).
func cmdPop(c *call) (backend.Value, error) {
	if len(c.args) > 3 {
		return backend.Value{}, backend.Reply(backend.ErrWrongArgs(c.name()))
	}
	count, hasCount, err := c.countArg()
	if err != nil {
		return backend.Value{}, err
	}
	key := c.key(1)
	l, ok, err := lookup[*List](c, key)
	switch {
	case err != nil:
		return backend.Value{}, err
	case !ok && hasCount:
		return backend.Value{Kind: backend.KindNilArray}, nil
	case !ok:
		return backend.NilValue, nil
	case hasCount && count == 0:
		return backend.Array(), nil
	}
	count = min(count, int64(len(l.items)))
	var out []string
	if c.name() == "lpop" {
		out = slices.Clone(l.items[:count])
		l.items = slices.Delete(l.items, 0, int(count))
	} else {
		for i := int64(0); i < count; i++ {
			out = append(out, l.items[len(l.items)-1-int(i)])
		}
		l.items = l.items[:len(l.items)-int(count)]
	}
	c.settle(key, l)
	if !hasCount {
		return backend.BulkString(out[0]), nil
	}
	return bulks(out), nil
}

// cmdLIndex looks the key up before it parses the index, as Redis does.
// countArg is the optional count of LPOP, RPOP, ZPOPMIN and ZPOPMAX
// (argument 2): 1 when absent.
func (c *call) countArg() (count int64, given bool, err error) {
	if len(c.args) < 3 {
		return 1, false, nil
	}
	n, ok := backend.ParseInt(c.args[2])
	if !ok || n < 0 {
		return 0, true, backend.Reply(backend.MsgNotPositive)
	}
	return n, true, nil
}

// index parses argument 2, a list index (negative: from the end), after
// the key was looked up, as Redis does; ok is false when it lies outside
// a list of n.
func (c *call) index(n int64) (i int64, ok bool, err error) {
	if i, err = c.intArg(2); err != nil {
		return 0, false, err
	}
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n, nil
}

func cmdLIndex(c *call) (backend.Value, error) {
	l, ok, err := lookup[*List](c, c.key(1))
	if err != nil || !ok {
		return backend.NilValue, err
	}
	i, in, err := c.index(int64(len(l.items)))
	if err != nil || !in {
		return backend.NilValue, err
	}
	return backend.BulkString(l.items[i]), nil
}

// span clips Redis's inclusive start and stop (negative: from the end) to
// a list of n, and returns the half-open range; empty when from >= to.
func span(start, stop, n int64) (from, to int64) {
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	start = max(start, 0)
	if start > stop || start >= n {
		return 0, 0
	}
	return start, min(stop, n-1) + 1
}

func (c *call) span(n int64) (from, to int64, err error) {
	start, err := c.intArg(2)
	if err != nil {
		return 0, 0, err
	}
	stop, err := c.intArg(3)
	if err != nil {
		return 0, 0, err
	}
	from, to = span(start, stop, n)
	return from, to, nil
}

func cmdLRange(c *call) (backend.Value, error) {
	if _, _, err := c.span(0); err != nil {
		return backend.Value{}, err
	}
	l, ok, err := lookup[*List](c, c.key(1))
	if err != nil || !ok {
		return backend.Array(), err
	}
	from, to, _ := c.span(int64(len(l.items)))
	return bulks(l.items[from:to]), nil
}

// cmdLTrim keeps the range; a list left empty goes.
func cmdLTrim(c *call) (backend.Value, error) {
	if _, _, err := c.span(0); err != nil {
		return backend.Value{}, err
	}
	key := c.key(1)
	l, ok, err := lookup[*List](c, key)
	if err != nil || !ok {
		return backend.OKValue, err
	}
	from, to, _ := c.span(int64(len(l.items)))
	l.items = slices.Clone(l.items[from:to])
	c.settle(key, l)
	return backend.OKValue, nil
}

// cmdLRem removes count occurrences of the element: from the head when
// count > 0, from the tail when < 0, all when 0.
func cmdLRem(c *call) (backend.Value, error) {
	count, err := c.intArg(2)
	if err != nil {
		return backend.Value{}, err
	}
	key := c.key(1)
	l, ok, err := lookup[*List](c, key)
	if err != nil || !ok {
		return backend.Int(0), err
	}
	elem := string(c.args[3])
	var removed int64
	limit := count
	if limit < 0 {
		limit = -limit
	}
	if count >= 0 {
		kept := l.items[:0:0]
		for _, x := range l.items {
			if x == elem && (limit == 0 || removed < limit) {
				removed++
				continue
			}
			kept = append(kept, x)
		}
		l.items = kept
	} else {
		for i := len(l.items) - 1; i >= 0 && removed < limit; i-- {
			if l.items[i] == elem {
				l.items = slices.Delete(l.items, i, i+1)
				removed++
			}
		}
	}
	c.settle(key, l)
	return backend.Int(removed), nil
}

func cmdLLen(c *call) (backend.Value, error) {
	l, ok, err := lookup[*List](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	return backend.Int(int64(len(l.items))), nil
}

// cmdLSet looks the key up before it parses the index, as Redis does.
func cmdLSet(c *call) (backend.Value, error) {
	l, ok, err := lookup[*List](c, c.key(1))
	switch {
	case err != nil:
		return backend.Value{}, err
	case !ok:
		return backend.Value{}, backend.Reply(backend.MsgNoSuchKey)
	}
	i, in, err := c.index(int64(len(l.items)))
	switch {
	case err != nil:
		return backend.Value{}, err
	case !in:
		return backend.Value{}, backend.Reply(backend.MsgIndexOutOfRange)
	}
	l.items[i] = string(c.args[3])
	return backend.OKValue, nil
}
