package model

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
)

var zsetHandlers = map[string]handler{
	"zadd": cmdZAdd, "zincrby": cmdZAdd, "zrem": cmdZRem, "zscore": cmdZScore, "zmscore": cmdZScore,
	"zcard": cmdZCard, "zcount": cmdZCount, "zrank": cmdZRank, "zrevrank": cmdZRank,
	"zrange": cmdZRange, "zrangebyscore": cmdZRange, "zrevrangebyscore": cmdZRange,
	"zrevrange": cmdZRange, "zrangebylex": cmdZRange, "zrevrangebylex": cmdZRange,
	"zremrangebyscore": cmdZRemRangeByScore, "zpopmin": cmdZPop, "zpopmax": cmdZPop,
}

func newZSet() *ZSet { return &ZSet{} }

// zaddFlags are ZADD's options.
type zaddFlags struct{ nx, xx, gt, lt, ch, incr bool }

// cmdZAdd is ZADD and ZINCRBY (ZADD … INCR), in Redis's order of checks:
// options, pairs, conflicts, scores, then the key's type.
func cmdZAdd(c *call) (backend.Value, error) {
	var f zaddFlags
	at := 2
	if c.name() == "zincrby" {
		f.incr = true
	} else {
	opts:
		for ; at < len(c.args); at++ {
			switch strings.ToLower(string(c.args[at])) {
			case "nx":
				f.nx = true
			case "xx":
				f.xx = true
			case "gt":
				f.gt = true
			case "lt":
				f.lt = true
			case "ch":
				f.ch = true
			case "incr":
				f.incr = true
			default:
				break opts
			}
		}
	}
	n := len(c.args) - at
	switch {
	case n == 0 || n%2 != 0:
		return backend.Value{}, backend.Reply(backend.MsgSyntax)
	case f.nx && f.xx:
		return backend.Value{}, backend.Reply(backend.MsgZAddXXNX)
	case (f.gt && f.nx) || (f.lt && f.nx) || (f.gt && f.lt):
		return backend.Value{}, backend.Reply(backend.MsgZAddGTLTNX)
	case f.incr && n > 2:
		return backend.Value{}, backend.Reply(backend.MsgZAddIncrPair)
	}
	scores := make([]float64, n/2)
	for i := range scores {
		s, err := c.floatArg(at + 2*i)
		if err != nil {
			return backend.Value{}, err
		}
		scores[i] = s
	}
	key := c.key(1)
	z, ok, err := lookup[*ZSet](c, key)
	if err != nil {
		return backend.Value{}, err
	}
	var added, updated, processed int64
	var score float64
	if ok || !f.xx {
		if !ok {
			z = newZSet()
			c.space(key).PutObject(c.db, key, z, 0)
		}
		for i, s := range scores {
			res, news := zAdd(z, string(c.args[at+2*i+1]), s, f)
			if res == zNaN {
				c.settle(key, z)
				return backend.Value{}, backend.Reply(backend.MsgScoreNaN)
			}
			switch res {
			case zAdded:
				added++
			case zUpdated:
				updated++
			}
			if res != zNop {
				processed++
			}
			score = news
		}
		c.settle(key, z)
	}
	switch {
	case f.incr && processed > 0:
		return double(score), nil
	case f.incr:
		return backend.NilValue, nil
	case f.ch:
		return backend.Int(added + updated), nil
	}
	return backend.Int(added), nil
}

type zResult uint8

const (
	zSame    zResult = iota // present, score unchanged
	zAdded                  // new member
	zUpdated                // score changed
	zNop                    // refused by NX, XX, GT or LT
	zNaN                    // INCR reached NaN
)

// zAdd is Redis's zsetAdd: it returns what it did and the member's score
// after it.
func zAdd(z *ZSet, member string, score float64, f zaddFlags) (zResult, float64) {
	cur, had := z.Score(member)
	if !had {
		if f.xx {
			return zNop, score
		}
		z.put(member, score+0) // -0 is kept as 0, as Redis's listpack does; the reply keeps the sign
		return zAdded, score
	}
	if f.nx {
		return zNop, cur
	}
	if f.incr {
		score += cur
		if math.IsNaN(score) {
			return zNaN, cur
		}
	}
	if (f.gt && score <= cur) || (f.lt && score >= cur) {
		return zNop, cur
	}
	if score == cur {
		return zSame, score
	}
	z.put(member, score+0)
	return zUpdated, score
}

func cmdZRem(c *call) (backend.Value, error) {
	key := c.key(1)
	z, ok, err := lookup[*ZSet](c, key)
	if err != nil || !ok {
		return backend.Int(0), err
	}
	var n int64
	for _, m := range c.args[2:] {
		if z.del(string(m)) {
			n++
		}
	}
	c.settle(key, z)
	return backend.Int(n), nil
}

// cmdZScore is ZSCORE (a double or nil) and ZMSCORE (an array of them).
func cmdZScore(c *call) (backend.Value, error) {
	z, ok, err := lookup[*ZSet](c, c.key(1))
	if err != nil {
		return backend.Value{}, err
	}
	out := make([]backend.Value, len(c.args)-2)
	for i, m := range c.args[2:] {
		if ok {
			if s, has := z.Score(string(m)); has {
				out[i] = double(s)
			}
		}
	}
	if c.name() == "zscore" {
		return out[0], nil
	}
	return backend.Array(out...), nil
}

func cmdZCard(c *call) (backend.Value, error) {
	z, ok, err := lookup[*ZSet](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	return backend.Int(int64(z.Len())), nil
}

func cmdZRank(c *call) (backend.Value, error) {
	z, ok, err := lookup[*ZSet](c, c.key(1))
	if err != nil || !ok {
		return backend.NilValue, err
	}
	r, has := z.rank(string(c.args[2]))
	if !has {
		return backend.NilValue, nil
	}
	if c.name() == "zrevrank" {
		r = z.Len() - 1 - r
	}
	return backend.Int(int64(r)), nil
}

// scoreRange is a ZRANGEBYSCORE range: min and max, each inclusive or not.
type scoreRange struct {
	min, max     float64
	minEx, maxEx bool
}

func (r scoreRange) has(s float64) bool {
	return (s > r.min || (!r.minEx && s == r.min)) && (s < r.max || (!r.maxEx && s == r.max))
}

// parseBound parses one bound of a score range: "(" makes it exclusive.
func parseBound(b []byte) (float64, bool, bool) {
	ex := len(b) > 0 && b[0] == '('
	if ex {
		b = b[1:]
	}
	f, err := parseBoundFloat(b)
	return f, ex, err
}

// parseBoundFloat is strtod as zslParseRange uses it: leading spaces,
// nothing after the number, no NaN; an empty string is 0 and out of range
// is ±Inf.
func parseBoundFloat(b []byte) (float64, bool) {
	s := strings.TrimLeft(string(b), " \t\n\r\v\f")
	if s == "" {
		return 0, true
	}
	f, err := strtod(s)
	if err != nil && (!errors.Is(err, strconv.ErrRange) || f == 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

func parseScoreRange(lo, hi []byte) (scoreRange, error) {
	var r scoreRange
	var ok1, ok2 bool
	r.min, r.minEx, ok1 = parseBound(lo)
	r.max, r.maxEx, ok2 = parseBound(hi)
	if !ok1 || !ok2 {
		return r, backend.Reply(backend.MsgMinMaxNotFloat)
	}
	return r, nil
}

// lexBound is one bound of a BYLEX range: "[x" inclusive, "(x"
// exclusive, "-" and "+" the ends.
type lexBound struct {
	s   string
	ex  bool
	inf int // -1: "-", 1: "+"
}

func parseLex(b []byte) (lexBound, bool) {
	switch {
	case len(b) == 1 && b[0] == '-':
		return lexBound{inf: -1}, true
	case len(b) == 1 && b[0] == '+':
		return lexBound{inf: 1}, true
	case len(b) > 0 && b[0] == '[':
		return lexBound{s: string(b[1:])}, true
	case len(b) > 0 && b[0] == '(':
		return lexBound{s: string(b[1:]), ex: true}, true
	}
	return lexBound{}, false
}

func (l lexBound) below(m string) bool { // l <= m as a minimum
	switch l.inf {
	case -1:
		return true
	case 1:
		return false
	}
	return m > l.s || (!l.ex && m == l.s)
}

func (l lexBound) above(m string) bool { // m <= l as a maximum
	switch l.inf {
	case -1:
		return false
	case 1:
		return true
	}
	return m < l.s || (!l.ex && m == l.s)
}

// zrange is one parsed range query of the ZRANGE family.
type zrange struct {
	by             string // "rank", "score" or "lex"
	rev            bool
	withScores     bool
	offset, limit  int64
	start, stop    int64
	scores         scoreRange
	lexMin, lexMax lexBound
}

// parseZRange parses the ZRANGE family's arguments as
// zrangeGenericCommand does; by and rev are preset ("" and false for
// ZRANGE itself, which reads them from the options).
func parseZRange(c *call, by string, rev bool) (zrange, error) {
	q := zrange{by: by, rev: rev, limit: -1}
	revSet := c.name() != "zrange"
	for j := 4; j < len(c.args); j++ {
		left := len(c.args) - j - 1
		switch opt := strings.ToLower(string(c.args[j])); {
		case opt == "withscores":
			q.withScores = true
		case opt == "limit" && left >= 2:
			off, err := c.intArg(j + 1)
			if err != nil {
				return q, err
			}
			lim, err := c.intArg(j + 2)
			if err != nil {
				return q, err
			}
			q.offset, q.limit = off, lim
			j += 2
		case opt == "rev" && !revSet:
			q.rev, revSet = true, true
		case opt == "bylex" && q.by == "":
			q.by = "lex"
		case opt == "byscore" && q.by == "":
			q.by = "score"
		default:
			return q, backend.Reply(backend.MsgSyntax)
		}
	}
	if q.by == "" {
		q.by = "rank"
	}
	hasLimit := q.limit != -1 || q.offset != 0
	switch {
	case hasLimit && q.by == "rank":
		return q, backend.Reply(backend.MsgZRangeLimit)
	case q.withScores && q.by == "lex":
		return q, backend.Reply(backend.MsgZRangeLexScores)
	}
	lo, hi := c.args[2], c.args[3]
	if q.rev && q.by != "rank" {
		lo, hi = hi, lo
	}
	switch q.by {
	case "rank":
		var err error
		if q.start, err = c.intArg(2); err != nil {
			return q, err
		}
		if q.stop, err = c.intArg(3); err != nil {
			return q, err
		}
	case "score":
		var err error
		if q.scores, err = parseScoreRange(lo, hi); err != nil {
			return q, err
		}
	case "lex":
		var ok1, ok2 bool
		q.lexMin, ok1 = parseLex(lo)
		q.lexMax, ok2 = parseLex(hi)
		if !ok1 || !ok2 {
			return q, backend.Reply(backend.MsgMinMaxNotLex)
		}
	}
	return q, nil
}

// zrangePreset is what each command of the family fixes before the
// options.
var zrangePreset = map[string]struct {
	by  string
	rev bool
}{
	"zrange": {"", false}, "zrevrange": {"rank", true},
	"zrangebyscore": {"score", false}, "zrevrangebyscore": {"score", true},
	"zrangebylex": {"lex", false}, "zrevrangebylex": {"lex", true},
}

func cmdZRange(c *call) (backend.Value, error) {
	p := zrangePreset[c.name()]
	q, err := parseZRange(c, p.by, p.rev)
	if err != nil {
		return backend.Value{}, err
	}
	z, ok, err := lookup[*ZSet](c, c.key(1))
	if err != nil || !ok {
		return backend.Array(), err
	}
	picked := q.pick(z)
	out := make([]backend.Value, 0, len(picked))
	for _, e := range picked {
		out = append(out, backend.BulkString(e.member))
		if q.withScores {
			out = append(out, double(e.score))
		}
	}
	if q.withScores {
		return backend.Value{Kind: backend.KindPairs, Elems: out}, nil
	}
	return backend.Array(out...), nil
}

// pick returns the entries q selects from z, in reply order.
func (q zrange) pick(z *ZSet) []zEntry {
	n := int64(len(z.sorted))
	order := func(i int64) zEntry {
		if q.rev {
			return z.sorted[n-1-i]
		}
		return z.sorted[i]
	}
	var out []zEntry
	if q.by == "rank" {
		from, to := span(q.start, q.stop, n)
		for i := from; i < to; i++ {
			out = append(out, order(i))
		}
		return out
	}
	if q.offset < 0 || (q.offset > 0 && q.offset >= n) {
		return nil
	}
	skip, limit := q.offset, q.limit
	for i := int64(0); i < n && limit != 0; i++ {
		e := order(i)
		if !q.matches(e) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		out = append(out, e)
		if limit > 0 {
			limit--
		}
	}
	return out
}

func (q zrange) matches(e zEntry) bool {
	if q.by == "score" {
		return q.scores.has(e.score)
	}
	return q.lexMin.below(e.member) && q.lexMax.above(e.member)
}

func cmdZCount(c *call) (backend.Value, error) {
	r, err := parseScoreRange(c.args[2], c.args[3])
	if err != nil {
		return backend.Value{}, err
	}
	z, ok, err := lookup[*ZSet](c, c.key(1))
	if err != nil || !ok {
		return backend.Int(0), err
	}
	var n int64
	for _, e := range z.sorted {
		if r.has(e.score) {
			n++
		}
	}
	return backend.Int(n), nil
}

func cmdZRemRangeByScore(c *call) (backend.Value, error) {
	r, err := parseScoreRange(c.args[2], c.args[3])
	if err != nil {
		return backend.Value{}, err
	}
	key := c.key(1)
	z, ok, err := lookup[*ZSet](c, key)
	if err != nil || !ok {
		return backend.Int(0), err
	}
	var gone []string
	for _, e := range z.sorted {
		if r.has(e.score) {
			gone = append(gone, e.member)
		}
	}
	for _, m := range gone {
		z.del(m)
	}
	c.settle(key, z)
	return backend.Int(int64(len(gone))), nil
}

// cmdZPop is ZPOPMIN and ZPOPMAX: without a count one [member, score]
// pair, flat; with one, pairs (backend.KindPairs).
func cmdZPop(c *call) (backend.Value, error) {
	if len(c.args) > 3 {
		return backend.Value{}, backend.Reply(backend.MsgSyntax)
	}
	count, hasCount, err := c.countArg()
	if err != nil {
		return backend.Value{}, err
	}
	key := c.key(1)
	z, ok, err := lookup[*ZSet](c, key)
	if err != nil || !ok || count == 0 {
		return backend.Array(), err
	}
	var out []backend.Value
	for ; count > 0 && z.Len() > 0; count-- {
		e := z.sorted[0]
		if c.name() == "zpopmax" {
			e = z.sorted[z.Len()-1]
		}
		z.del(e.member)
		out = append(out, backend.BulkString(e.member), double(e.score))
	}
	c.settle(key, z)
	if !hasCount {
		return backend.Array(out...), nil
	}
	return backend.Value{Kind: backend.KindPairs, Elems: out}, nil
}
