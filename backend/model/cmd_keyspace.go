package model

import (
	"cmp"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
)

// The commands on the key space as a whole, over every Space of the View.
// Keys past their deadline are neither listed nor counted.

func cmdKeys(c *call) (backend.Value, error) {
	var out []string
	for _, sp := range c.v.Spaces {
		out = sp.AppendKeys(out, c.db, c.v.Now, c.args[1])
	}
	return bulks(out), nil
}

// AppendKeys appends to dst the live keys of db in s that match pattern:
// one Space's part of KEYS.
func (s *Space) AppendKeys(dst []string, db int, now int64, pattern []byte) []string {
	for k, e := range s.dbs[db] {
		if e.Live(now) && Match(pattern, []byte(k)) {
			dst = append(dst, k)
		}
	}
	return dst
}

// scanHash orders keys for SCAN: a cursor is the hash from which the next
// page starts, so a key present for a whole iteration is returned at least
// once however the key space changes in between, on every backend (the
// hash is fixed: a cursor survives a restart).
func scanHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// Scan is one parsed SCAN cursor [MATCH pattern] [COUNT n] [TYPE type].
type Scan struct {
	Cursor  uint64
	Count   int64
	Pattern []byte // nil: every key
	Type    string // "": every type
}

// ParseScan parses SCAN's arguments (args[0] is the name) with Redis's
// errors.
func ParseScan(args [][]byte) (Scan, error) {
	cursor, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		return Scan{}, backend.Reply(backend.MsgInvalidCursor)
	}
	sc := Scan{Cursor: cursor, Count: 10}
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return Scan{}, backend.Reply(backend.MsgSyntax)
		}
		switch strings.ToLower(string(args[i])) {
		case "count":
			n, ok := backend.ParseInt(args[i+1])
			if !ok {
				return Scan{}, backend.Reply(backend.MsgNotInteger)
			}
			if n < 1 {
				return Scan{}, backend.Reply(backend.MsgSyntax)
			}
			sc.Count = n
		case "match":
			sc.Pattern = args[i+1]
		case "type":
			sc.Type = strings.ToLower(string(args[i+1]))
		default:
			return Scan{}, backend.Reply(backend.MsgSyntax)
		}
	}
	return sc, nil
}

// KeyType is a key and the name of its type, as SCAN pages through them.
type KeyType struct{ Key, Type string }

// Page is SCAN's reply over keys, the live keys of a database: up to
// Count of them in hash order from the cursor (scanHash), filtered by
// MATCH and TYPE after they are picked, as Redis filters; the last page
// answers cursor 0.
func (sc Scan) Page(keys []KeyType) backend.Value {
	all := sc.sorted(keys)
	page := all
	next := uint64(0)
	if int64(len(all)) > sc.Count {
		page = all[:sc.Count]
		// Keys sharing a hash stay on one page, so the cursor skips none.
		for len(page) < len(all) && all[len(page)].h == page[len(page)-1].h {
			page = all[:len(page)+1]
		}
		if len(page) < len(all) {
			next = all[len(page)].h
		}
	}
	var out []string
	for _, k := range page {
		if (sc.Pattern == nil || Match(sc.Pattern, []byte(k.Key))) && (sc.Type == "" || sc.Type == k.Type) {
			out = append(out, k.Key)
		}
	}
	return backend.Array(backend.BulkString(strconv.FormatUint(next, 10)), bulks(out))
}

// Trim keeps of keys, the live keys of one part of a database, those a
// page from the cursor can reach: the part's first Count in hash order,
// the others sharing the last one's hash, and the one after them. Page
// over the trimmed parts of a database answers what it answers over the
// whole: the page's last hash is at most any part's Count-th, so every
// key of the page stays, and the key after the page is a part's first
// past its cut.
func (sc Scan) Trim(keys []KeyType) []KeyType {
	all := sc.sorted(keys)
	if int64(len(all)) > sc.Count {
		n := int(sc.Count)
		for n < len(all) && all[n].h == all[n-1].h {
			n++
		}
		all = all[:min(n+1, len(all))]
	}
	out := make([]KeyType, len(all))
	for i, c := range all {
		out[i] = c.KeyType
	}
	return out
}

// scanKey is a key with its scanHash.
type scanKey struct {
	h uint64
	KeyType
}

// sorted is keys from the cursor on, in the order SCAN pages them.
func (sc Scan) sorted(keys []KeyType) []scanKey {
	var all []scanKey
	for _, k := range keys {
		if h := scanHash(k.Key); h >= sc.Cursor {
			all = append(all, scanKey{h, k})
		}
	}
	slices.SortFunc(all, func(a, b scanKey) int { return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.Key, b.Key)) })
	return all
}

func cmdScan(c *call) (backend.Value, error) {
	sc, err := ParseScan(c.args)
	if err != nil {
		return backend.Value{}, err
	}
	var keys []KeyType
	for _, sp := range c.v.Spaces {
		keys = sp.AppendScan(keys, c.db, c.v.Now, sc.Cursor)
	}
	return sc.Page(keys), nil
}

// AppendScan appends to dst the live keys of db in s that a SCAN page from
// cursor may hold (their scanHash is at least cursor), with their types:
// one Space's part of a page, which Scan.Trim and Scan.Page then pick from.
func (s *Space) AppendScan(dst []KeyType, db int, now int64, cursor uint64) []KeyType {
	for k, e := range s.dbs[db] {
		if !e.Live(now) || scanHash(k) < cursor {
			continue
		}
		t := "string"
		if !e.IsString() {
			t = s.objs[db][k].Type()
		}
		dst = append(dst, KeyType{k, t})
	}
	return dst
}

// CheckFlush checks the arguments of FLUSHDB and FLUSHALL: ASYNC or SYNC
// at most.
func CheckFlush(args [][]byte) error {
	if len(args) > 2 || (len(args) == 2 && !strings.EqualFold(string(args[1]), "async") && !strings.EqualFold(string(args[1]), "sync")) {
		return backend.Reply(backend.MsgSyntax)
	}
	return nil
}

// cmdRandomKey answers a live key of the database, each about as likely as
// another: the spaces are tried from a random one on (the keys of a few
// would otherwise all come from the first space holding one), and each
// space's map in Go's random order.
func cmdRandomKey(c *call) (backend.Value, error) {
	n := len(c.v.Spaces)
	start := rand.IntN(max(n, 1))
	for i := range n {
		for k, e := range c.v.Spaces[(start+i)%n].dbs[c.db] {
			if e.Live(c.v.Now) {
				return backend.BulkString(k), nil
			}
		}
	}
	return backend.NilValue, nil
}

// cmdFlush is FLUSHDB and FLUSHALL, with ASYNC or SYNC (the same here).
func cmdFlush(c *call) (backend.Value, error) {
	if err := CheckFlush(c.args); err != nil {
		return backend.Value{}, err
	}
	dbs := []int{c.db}
	if c.name() == "flushall" {
		dbs = dbs[:0]
		for db := range backend.Databases {
			dbs = append(dbs, db)
		}
	}
	n, freed := 0, (func(int))(nil) // every Space of a View tells the same Freed
	for _, sp := range c.v.Spaces {
		for _, db := range dbs {
			// New maps, not cleared ones: a Go map keeps its buckets.
			n += len(sp.dbs[db]) + len(sp.objs[db])
			sp.dbs[db], sp.objs[db], sp.peak[db] = nil, nil, 0
		}
		if freed == nil {
			freed = sp.Freed
		}
	}
	if freed != nil && n*64 >= LargeValue { // a key takes 64 bytes at least
		freed(n * 64)
	}
	return backend.OKValue, nil
}

// take removes key from db and returns what it held.
func (c *call) take(db int, key string) (Entry, Object, bool) {
	sp := c.space(key)
	e, o, ok := sp.Lookup(db, key, c.v.Now)
	if ok {
		sp.drop(db, key)
	}
	return e, o, ok
}

// place writes a value taken or copied under key in db.
func (c *call) place(db int, key string, e Entry, o Object) {
	sp := c.space(key)
	if o != nil {
		sp.PutObject(db, key, o, e.Deadline)
		return
	}
	e.Fence = 0 // the source's is no fence of this key's (Put)
	sp.Put(db, key, e)
}

// cmdRename is RENAME and RENAMENX: the value moves with its expiry.
func cmdRename(c *call) (backend.Value, error) {
	src, dst := c.key(1), c.key(2)
	nx := c.name() == "renamenx"
	if _, _, ok := c.space(src).Lookup(c.db, src, c.v.Now); !ok {
		return backend.Value{}, backend.Reply(backend.MsgNoSuchKey)
	}
	if src == dst {
		if nx {
			return backend.Int(0), nil
		}
		return backend.OKValue, nil
	}
	if _, _, exists := c.space(dst).Lookup(c.db, dst, c.v.Now); exists && nx {
		return backend.Int(0), nil
	}
	e, o, _ := c.take(c.db, src)
	c.space(dst).drop(c.db, dst)
	c.place(c.db, dst, e, o)
	if nx {
		return backend.Int(1), nil
	}
	return backend.OKValue, nil
}

// cmdCopy is COPY source destination [DB n] [REPLACE].
func cmdCopy(c *call) (backend.Value, error) {
	src, dst := c.key(1), c.key(2)
	db, replace := c.db, false
	for i := 3; i < len(c.args); i++ {
		switch opt := strings.ToLower(string(c.args[i])); {
		case opt == "replace":
			replace = true
		case opt == "db" && i+1 < len(c.args):
			n, err := c.intArg(i + 1)
			if err != nil {
				return backend.Value{}, err
			}
			if n < 0 || n >= backend.Databases {
				return backend.Value{}, backend.Reply(backend.MsgDBOutOfRange)
			}
			db = int(n)
			i++
		default:
			return backend.Value{}, backend.Reply(backend.MsgSyntax)
		}
	}
	if src == dst && db == c.db {
		return backend.Value{}, backend.Reply(backend.MsgSameObject)
	}
	if db != c.db {
		if err := c.v.admit(db, dst); err != nil { // the key in the other database
			return backend.Value{}, err
		}
	}
	e, o, ok := c.space(src).Lookup(c.db, src, c.v.Now)
	if !ok {
		return backend.Int(0), nil
	}
	if _, _, exists := c.space(dst).Lookup(db, dst, c.v.Now); exists {
		if !replace {
			return backend.Int(0), nil
		}
		c.space(dst).drop(db, dst)
	}
	if o != nil {
		o = o.Clone()
	}
	c.place(db, dst, e, o)
	return backend.Int(1), nil
}

// cmdObject serves OBJECT ENCODING; other subcommands (IDLETIME, FREQ,
// REFCOUNT) track what lockproxy does not keep and are refused.
func cmdObject(c *call) (backend.Value, error) {
	sub := strings.ToLower(string(c.args[1]))
	if sub != "encoding" {
		return backend.Value{}, backend.Reply(backend.ErrUnknownSubcommand("object", string(c.args[1])))
	}
	if len(c.args) != 3 {
		return backend.Value{}, backend.Reply(backend.ErrWrongArgs("object|encoding"))
	}
	key := c.key(2)
	e, o, ok := c.space(key).Lookup(c.db, key, c.v.Now)
	switch {
	case !ok:
		return backend.NilValue, nil
	case o != nil:
		return backend.BulkString(o.Encoding()), nil
	}
	if _, isInt := backend.ParseInt(e.Token); isInt {
		return backend.BulkString("int"), nil
	}
	return backend.BulkString(encoding(len(e.Token) <= 44, "embstr", "raw")), nil
}
