package quorum

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// A client's script runs in lockproxy, never on a node (SPEC §3): its
// keys' states are read from the nodes (this file), the script runs once
// on a model.Space built from the state a majority agrees on, and what it
// changed is committed to each node by compare-and-set (commit.go;
// evalmodel.go puts it together). The nodes run only readScript,
// applyScript and releaseScript, lockproxy's own, each bounded by the size
// of the keys it is given and of the states it writes.

// readScript leases each of KEYS on one node for the operation, then
// reads it. ARGV: the operation's nonce, this instance's prefix of
// nonces, the lease's length in ms, the leases' database and hash
// (leasesKey), then the database of each key. A key leased by another
// instance's operation (its lease not expired by the node's clock) makes
// the node answer "leased", having taken nothing: another writer is
// between its read and its decision there, and what the node holds may
// be a write that is put back yet. A lease of this instance's is taken
// over: the operation holds the key's stripe, so the one before it on the
// key has decided (its lease's release may still be on its way). Otherwise each key's field
// in the hash becomes "<nonce>:<expiry>", and each key, in its database
// (a script's SELECT is its own in Redis 7: the connection's database
// stays as it was), is read: its type, PTTL, absolute expiry
// (PEXPIRETIME), the SHA1 of its DUMP (the node's own encoding: the check
// value a commit compares against, "" for absent) and its value as a list
// of strings (a string: itself; a hash: field, value …; a set: its
// members; a list: its items; a sorted set: member, score …). One call
// per operation, O(size of the keys).
var readScript = newNodeScript(`local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('select', ARGV[4])
for i = 1, #KEYS do
  local cur = redis.call('hget', ARGV[5], ARGV[5+i] .. ':' .. KEYS[i])
  if cur then
    local sep = string.find(cur, ':', 1, true)
    if string.sub(cur, 1, #ARGV[2]) ~= ARGV[2] and tonumber(string.sub(cur, sep + 1)) > now then
      return 'leased'
    end
  end
end
for i = 1, #KEYS do
  redis.call('hset', ARGV[5], ARGV[5+i] .. ':' .. KEYS[i], ARGV[1] .. ':' .. (now + tonumber(ARGV[3])))
end
local out = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  redis.call('select', ARGV[5+i])
  local t = redis.call('type', k).ok
  local v = {}
  if t == 'string' then v = {redis.call('get', k)}
  elseif t == 'hash' then v = redis.call('hgetall', k)
  elseif t == 'set' then v = redis.call('smembers', k)
  elseif t == 'list' then v = redis.call('lrange', k, 0, -1)
  elseif t == 'zset' then v = redis.call('zrange', k, 0, -1, 'withscores')
  end
  local d = redis.call('dump', k)
  out[i] = {t, redis.call('pttl', k), redis.call('pexpiretime', k), d and redis.sha1hex(d) or '', v}
end
return out`)

// leasesKey is the hash, in markerDB beside the horizon marker, of the
// keys leased by operations between their read and their decision
// (readScript): field "<db>:<key>", value "<nonce>:<expiry, Unix ms by
// the node's clock>". Like the marker it is neither listed, counted nor
// flushed (keyspace.go), and a client cannot reach it.
const leasesKey = "lockproxy:quorum-leases"

// keyState is a key's value: its type ("none" for absent) and its parts,
// as readScript lists them.
type keyState struct {
	typ   string
	parts [][]byte
}

// nodeKey is one key as one node showed it (readScript).
type nodeKey struct {
	keyState
	pttl   int64  // -2 absent, -1 no expiry, else ms
	at     int64  // PEXPIRETIME: -2, -1, or Unix ms by the node's clock
	digest string // SHA1 of the node's DUMP; "" for absent
}

// dbKey is a key in its database: a script may SELECT.
type dbKey struct {
	db  int
	key string
}

// readRequest is readScript's call over keys for the operation nonce,
// leasing them for lease (EVAL for eval).
func readRequest(keys []dbKey, nonce string, lease time.Duration, eval bool) *req {
	r := &req{}
	if !eval {
		r.load = readScript.ref()
	}
	names := make([]string, len(keys))
	self, _, _ := strings.Cut(nonce, ".")
	args := [][]byte{[]byte(nonce), []byte(self + "."), strconv.AppendInt(nil, lease.Milliseconds(), 10), strconv.AppendInt(nil, markerDB, 10), []byte(leasesKey)}
	for i, k := range keys {
		names[i] = k.key
		args = append(args, strconv.AppendInt(nil, int64(k.db), 10))
	}
	runScript(&r.cmds, readScript, eval, names, args...)
	return r
}

// readFallback sends readScript by EVAL to a node that did not know it.
func readFallback(keys []dbKey, nonce string, lease time.Duration) func(int, nodeReply) *req {
	return func(_ int, r nodeReply) *req {
		if r.err != nil || len(r.vals) != 1 || !noScript(r.vals[0]) {
			return nil
		}
		return readRequest(keys, nonce, lease, true)
	}
}

// leased reports a node's answer to readRequest that another operation
// holds a lease there.
func leased(r nodeReply) bool {
	return r.err == nil && len(r.vals) == 1 && isStr(r.vals[0]) && string(r.vals[0].Str) == "leased"
}

// parseRead reads one node's reply to readRequest over n keys; ok is
// false for a failure or a reply of another shape. What it keeps is
// copied.
func parseRead(r nodeReply, n int) (_ []nodeKey, ok bool) {
	if r.err != nil || len(r.vals) != 1 {
		return nil, false
	}
	v := r.vals[0]
	if v.Kind != backend.KindArray || len(v.Elems) != n {
		return nil, false
	}
	out := make([]nodeKey, n)
	for i, e := range v.Elems {
		if e.Kind != backend.KindArray || len(e.Elems) != 5 {
			return nil, false
		}
		t, pttl, at, dg, parts := e.Elems[0], e.Elems[1], e.Elems[2], e.Elems[3], e.Elems[4]
		if !isStr(t) || pttl.Kind != backend.KindInt || at.Kind != backend.KindInt || !isStr(dg) || parts.Kind != backend.KindArray {
			return nil, false
		}
		nk := nodeKey{keyState: keyState{typ: string(t.Str)}, pttl: pttl.Int, at: at.Int, digest: string(dg.Str)}
		nk.parts = make([][]byte, len(parts.Elems))
		for j, p := range parts.Elems {
			if !isStr(p) {
				return nil, false
			}
			nk.parts[j] = bytes.Clone(p.Str)
		}
		out[i] = nk
	}
	return out, true
}

func isStr(v backend.Value) bool { return v.Kind == backend.KindBulk || v.Kind == backend.KindStatus }

// meaning is s in a form where two nodes holding the same value compare
// equal, whatever order their encodings keep: a hash's pairs and a set's
// members sorted. A list keeps its order, and a sorted set's ZRANGE order
// is Redis's own (by score, then member).
func (s keyState) meaning() string {
	var b []byte
	b = append(b, s.typ...)
	b = append(b, 0)
	switch s.typ {
	case "hash":
		pairs := make([]string, 0, len(s.parts)/2)
		for i := 0; i+1 < len(s.parts); i += 2 {
			pairs = append(pairs, string(lenPrefixed(lenPrefixed(nil, s.parts[i]), s.parts[i+1])))
		}
		slices.Sort(pairs)
		for _, p := range pairs {
			b = append(b, p...)
		}
	case "set":
		ms := make([]string, len(s.parts))
		for i, p := range s.parts {
			ms[i] = string(p)
		}
		slices.Sort(ms)
		for _, m := range ms {
			b = lenPrefixed(b, []byte(m))
		}
	default:
		for _, p := range s.parts {
			b = lenPrefixed(b, p)
		}
	}
	return string(b)
}

func lenPrefixed(b, s []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }

// snapshot is what a majority of the nodes holds for a script's keys, and
// what each node showed (its check values).
type snapshot struct {
	keys  []dbKey
	nodes [][]nodeKey // by node; nil: the node's read failed
	state []keyState  // by key: the majority's
	ttl   []int64     // by key: the majority's PTTL (the shortest among it), -1 for none
	late  *lateReads  // the nodes heard from after it was decided (readSnapshot)
	busy  []bool      // by node: it answered "leased" (readScript), so it was not read
}

// ttlTolerance is how far apart two nodes' PTTLs of one value may be and
// still agree: the writes that set them reach the nodes within a node
// timeout of each other, and their clocks drift (Backend.drift).
func (b *Backend) ttlTolerance(ttl int64) int64 {
	return (2*b.cfg.NodeTimeout + b.drift(time.Duration(ttl)*time.Millisecond)).Milliseconds()
}

// voteSnapshot decides the snapshot from the nodes' replies to
// readRequest over keys: for every key, Q nodes must agree on its value by
// meaning (keyState.meaning) and on its TTL within ttlTolerance (all
// without one, or all with one). Otherwise it fails, naming the first key
// without a majority.
func (b *Backend) voteSnapshot(keys []dbKey, replies []nodeReply) (*snapshot, error) {
	s := &snapshot{keys: keys, nodes: make([][]nodeKey, len(replies)), state: make([]keyState, len(keys)),
		ttl: make([]int64, len(keys))}
	answered := 0
	for i, r := range replies {
		if nk, ok := parseRead(r, len(keys)); ok {
			s.nodes[i] = nk
			answered++
		}
	}
	if answered < b.q {
		busy := 0
		for _, r := range replies {
			if leased(r) {
				busy++
			}
		}
		if busy > 0 && answered+busy >= b.q {
			return nil, errLeased
		}
		return nil, b.errNoQuorum(replies)
	}
	busy := slices.ContainsFunc(replies, leased)
	for j := range keys {
		if !b.voteKey(s, j) {
			if busy {
				return nil, errLeased // the leased nodes may hold what a majority agrees on
			}
			return nil, &backend.ReplyError{Reply: fmt.Sprintf(
				"TRYAGAIN quorum not reached: %d of %d nodes answered, and no %d of them agree on key '%s'", answered, len(replies), b.q, keys[j].key)}
		}
	}
	return s, nil
}

// voteKey finds Q nodes that agree on key j (voteSnapshot) and records
// their state in s.
func (b *Backend) voteKey(s *snapshot, j int) bool {
	type member struct {
		node int
		pttl int64
	}
	groups := map[string][]member{}
	var order []string
	for i, nk := range s.nodes {
		if nk == nil {
			continue
		}
		k := nk[j]
		m := k.meaning()
		if k.pttl >= 0 {
			m += "\x00ttl" // with an expiry: not the same as without
		}
		if _, ok := groups[m]; !ok {
			order = append(order, m)
		}
		groups[m] = append(groups[m], member{i, k.pttl})
	}
	for _, m := range order {
		g := groups[m]
		if len(g) < b.q {
			continue
		}
		// The widest run of PTTLs within the tolerance (every one -1 or -2
		// when the value has none).
		slices.SortFunc(g, func(a, c member) int { return cmp.Compare(a.pttl, c.pttl) })
		for lo := 0; lo+b.q <= len(g); lo++ {
			hi := lo
			for hi+1 < len(g) && g[hi+1].pttl-g[lo].pttl <= b.ttlTolerance(g[hi+1].pttl) {
				hi++
			}
			if hi-lo+1 < b.q {
				continue
			}
			first := s.nodes[g[lo].node][j]
			s.state[j] = first.keyState
			s.ttl[j] = g[lo].pttl // the shortest
			if first.typ == "none" || first.pttl < 0 {
				s.ttl[j] = -1
			}
			return true
		}
	}
	return false
}

// errLeased is a read that found too many nodes leased by other
// operations for a majority: contention, tried again.
var errLeased = &backend.ReplyError{Reply: "TRYAGAIN quorum not reached: another operation on the script's keys is under way on the nodes"}

// agrees reports whether a node that showed k for key j (a read that
// came after the vote) holds the snapshot's state: the same value, and a
// TTL within the tolerance of the majority's.
func (b *Backend) agrees(s *snapshot, j int, k nodeKey) bool {
	if k.meaning() != s.state[j].meaning() || (k.pttl >= 0) != (s.ttl[j] >= 0) {
		return false
	}
	return s.ttl[j] < 0 || k.pttl-s.ttl[j] <= b.ttlTolerance(k.pttl) && s.ttl[j]-k.pttl <= b.ttlTolerance(s.ttl[j])
}

// errNotModel is the refusal of a key whose value the model cannot hold.
func errNotModel(key, typ string) error {
	return backend.Reply(fmt.Sprintf("ERR lockproxy: key '%s' holds a %s, which scripts on the quorum backend cannot use", key, typ))
}

// load writes the snapshot into sp, at now (Unix ms by this process's
// clock): each key's deadline is now plus the majority's PTTL. now is read
// after the nodes answered, so a key's deadline here is never before it
// is on the nodes that agreed: the model finds a key gone only once those
// nodes do.
func (s *snapshot) load(sp *model.Space, now int64) error {
	for j, dk := range s.keys {
		db, k := dk.db, dk.key
		st := s.state[j]
		var deadline int64
		if s.ttl[j] >= 0 {
			deadline = now + max(s.ttl[j], 1)
		}
		switch st.typ {
		case "none":
		case "string":
			if len(st.parts) != 1 {
				return errNotModel(k, st.typ)
			}
			sp.Put(db, k, model.Entry{Token: st.parts[0], Deadline: deadline})
		default:
			o, err := st.object()
			if err != nil {
				return err
			}
			if o == nil {
				return errNotModel(k, st.typ)
			}
			sp.PutObject(db, k, o, deadline)
		}
	}
	return nil
}

// object is s as a model Object (nil for a type the model does not hold),
// built through model.Decode from Encode's form.
func (s keyState) object() (model.Object, error) {
	var kind uint8
	var data []byte
	switch s.typ {
	case "hash":
		if len(s.parts)%2 != 0 {
			return nil, nil
		}
		kind = model.KindHash
		data = binary.AppendUvarint(nil, uint64(len(s.parts)/2))
		for i := 0; i < len(s.parts); i += 2 {
			data = lenPrefixed(data, s.parts[i])
		}
		for i := 1; i < len(s.parts); i += 2 {
			data = lenPrefixed(data, s.parts[i])
		}
	case "set", "list":
		kind = model.KindSet
		if s.typ == "list" {
			kind = model.KindList
		}
		data = binary.AppendUvarint(nil, uint64(len(s.parts)))
		for _, p := range s.parts {
			data = lenPrefixed(data, p)
		}
	case "zset":
		if len(s.parts)%2 != 0 {
			return nil, nil
		}
		kind = model.KindZSet
		data = binary.AppendUvarint(nil, uint64(len(s.parts)/2))
		for i := 0; i < len(s.parts); i += 2 {
			f, err := strconv.ParseFloat(string(s.parts[i+1]), 64)
			if err != nil {
				return nil, nil
			}
			data = lenPrefixed(data, s.parts[i])
			data = binary.BigEndian.AppendUint64(data, math.Float64bits(f))
		}
	default:
		return nil, nil
	}
	return model.Decode(kind, data)
}

// stateOf reads key back from sp at now: its state, in readScript's form,
// and its deadline (0 for none). enc is the value's bytes in model's
// encoding, for comparing.
func stateOf(sp *model.Space, db int, key string, now int64) (st keyState, deadline int64, enc []byte) {
	e, o, ok := sp.Lookup(db, key, now)
	switch {
	case !ok:
		return keyState{typ: "none"}, 0, nil
	case o == nil:
		return keyState{typ: "string", parts: [][]byte{e.Token}}, e.Deadline, e.Token
	}
	kind, data := model.Encode(o)
	return decodeState(kind, data), e.Deadline, append([]byte{kind}, data...)
}

// decodeState turns model.Encode's form into readScript's.
func decodeState(kind uint8, data []byte) keyState {
	d := data
	count := func() int {
		n, w := binary.Uvarint(d)
		d = d[w:]
		return int(n)
	}
	str := func() []byte {
		n := count()
		s := d[:n]
		d = d[n:]
		return s
	}
	n := count()
	switch kind {
	case model.KindHash:
		parts := make([][]byte, 2*n)
		for i := range n {
			parts[2*i] = str()
		}
		for i := range n {
			parts[2*i+1] = str()
		}
		return keyState{typ: "hash", parts: parts}
	case model.KindSet, model.KindList:
		parts := make([][]byte, n)
		for i := range parts {
			parts[i] = str()
		}
		if kind == model.KindSet {
			return keyState{typ: "set", parts: parts}
		}
		return keyState{typ: "list", parts: parts}
	case model.KindZSet:
		parts := make([][]byte, 0, 2*n)
		for range n {
			m := str()
			f := math.Float64frombits(binary.BigEndian.Uint64(d))
			d = d[8:]
			parts = append(parts, m, []byte(formatScore(f)))
		}
		return keyState{typ: "zset", parts: parts}
	}
	return keyState{typ: "none"}
}

// formatScore writes a score so that a node reads back the same double.
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// readSnapshot leases and reads keys on every node for the operation
// nonce, and votes (voteSnapshot). It ends as soon as the replies so far
// give a snapshot: a slow node costs nothing. A node heard from later is
// handed to the snapshot's lateReads: the commit includes it when its read
// came before the commit was sent, and sends it its own compare-and-set
// afterwards otherwise (commit). With all it waits for every node (or its
// timeout) instead. leasedOn says, by node, where the read
// may have taken leases (every node that was sent it and did not answer
// "leased"), to release them.
func (b *Backend) readSnapshot(ctx context.Context, db int, keys []dbKey, nonce string, lease time.Duration, all bool) (_ *snapshot, leasedOn []bool, _ error) {
	r := readRequest(keys, nonce, lease, false)
	certain := func(replies []nodeReply) bool {
		done := 0
		for _, nr := range replies {
			if nr.done {
				done++
			}
		}
		if done < b.q {
			return false
		}
		_, err := b.voteSnapshot(keys, replies)
		return err == nil
	}
	if all {
		certain = nil // every node, or its timeout
	}
	o, replies := b.fanoutUntil(ctx, db, keys[0].key, same(r), readFallback(keys, nonce, lease), certain)
	leasedOn = make([]bool, len(replies))
	for i, nr := range replies {
		leasedOn[i] = nr.err != errNotSent && nr.err != errQuarantined && !leased(nr)
	}
	s, err := b.voteSnapshot(keys, replies)
	if err != nil {
		o.onLate(func(int, []backend.Value, error) {})
		return nil, leasedOn, err
	}
	s.late = &lateReads{nodes: make([][]nodeKey, len(replies))}
	s.busy = make([]bool, len(replies))
	for i, nr := range replies {
		s.busy[i] = leased(nr)
	}
	o.onLate(func(i int, vals []backend.Value, err error) {
		if nk, ok := parseRead(nodeReply{vals: vals, err: err, done: true}, len(keys)); ok {
			s.late.put(i, nk)
		}
	})
	return s, leasedOn, nil
}

// lateReads are the reads of the nodes heard from after the snapshot was
// decided. Until the commit is sent they are kept (take); afterwards each
// goes to then.
type lateReads struct {
	mu    sync.Mutex
	nodes [][]nodeKey
	then  func(i int, nk []nodeKey)
}

func (l *lateReads) put(i int, nk []nodeKey) {
	l.mu.Lock()
	then := l.then
	if then == nil {
		l.nodes[i] = nk
	}
	l.mu.Unlock()
	if then != nil {
		then(i, nk)
	}
}

// take hands the reads to come to then, and returns those kept so far
// (with keep) or hands them to then too.
func (l *lateReads) take(then func(i int, nk []nodeKey), keep bool) [][]nodeKey {
	l.mu.Lock()
	l.then = then
	kept := l.nodes
	l.nodes = make([][]nodeKey, len(kept))
	l.mu.Unlock()
	if keep {
		return kept
	}
	for i, nk := range kept {
		if nk != nil {
			then(i, nk)
		}
	}
	return nil
}
