package quorum

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// createdKeys counts a key as created by the script when it holds one of
// the script's arguments after it and did not hold that value before:
// absent before, or another's token (the reads around the script are not
// atomic with it: the other lock may have ended in between).
func TestCreatedKeys(t *testing.T) {
	mget := func(vs ...any) backend.Value {
		out := backend.Value{Kind: backend.KindArray}
		for _, v := range vs {
			if v == nil {
				out.Elems = append(out.Elems, backend.Value{Kind: backend.KindNil})
			} else {
				out.Elems = append(out.Elems, backend.Value{Kind: backend.KindBulk, Str: []byte(v.(string))})
			}
		}
		return out
	}
	keys := []string{"absent", "refreshed", "taken-over", "others", "unset"}
	args := [][]byte{[]byte("mine"), []byte("10000")}
	pre := mget(nil, "mine", "other", "other", nil)
	post := mget("mine", "mine", "mine", "other", nil)
	got := createdKeys(keys, pre, post, args)
	want := map[string]string{"absent": "mine", "taken-over": "mine"}
	if !maps.Equal(got, want) {
		t.Fatalf("createdKeys = %v; want %v", got, want)
	}
}

// okReply and nilReply are a node's replies to a plain SET NX.
func okReply() nodeReply {
	return nodeReply{vals: []backend.Value{{Kind: backend.KindStatus, Str: []byte("OK")}}, done: true}
}
func nilReply() nodeReply {
	return nodeReply{vals: []backend.Value{{Kind: backend.KindNil}}, done: true}
}

// A refused acquire undoes its token only where a node wrote it, never on
// a node that refused: with values that are not unique (npm redis-lock's
// deadline, a bare "1") the key a refusing node holds is another holder's
// lock with the same bytes. A node whose reply no longer counts (it was
// quarantined meanwhile) still reports that it wrote, and is undone.
func TestSetOutcomeUndoesOnlyWrites(t *testing.T) {
	b := &Backend{q: 2, nodes: []*node{{addr: "a"}, {addr: "b"}, {addr: "c"}}, cfg: Config{}.withDefaults()}
	acquire := backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}
	quarantinedOK := okReply()
	quarantinedOK.err = errQuarantined
	for _, c := range []struct {
		name    string
		replies []nodeReply
		written bool
		undo    []bool
	}{
		{"refused by a majority", []nodeReply{nilReply(), nilReply(), nilReply()}, false, nil},
		{"refused, one wrote", []nodeReply{okReply(), nilReply(), nilReply()}, false, []bool{true, false, false}},
		{"granted", []nodeReply{okReply(), okReply(), nilReply()}, true, nil},
		{"refused, quarantined node wrote", []nodeReply{quarantinedOK, nilReply(), nilReply()}, false, []bool{true, false, false}},
	} {
		res, err, undo := b.setOutcome(acquire, true, "px", time.Minute, c.replies, time.Millisecond)
		if err != nil || res.Written != c.written || !slices.Equal(undo, c.undo) {
			t.Errorf("%s: setOutcome = %v, %v, undo %v; want written %v, undo %v", c.name, res, err, undo, c.written, c.undo)
		}
	}
}

// An acquiring script that created its key on one node while another
// refused did two different things: its 1 and the other's 0 are not "the
// same reply a little later" (voteTime), so with the third node down there
// is no agreement, and the key it created is undone. Before, the time
// vote settled on 0 and kept the created key for its whole TTL: contended
// acquisitions by script fell to a tenth with one node down.
func TestEvalOutcomeCreatedNodeIsNotTimeVoted(t *testing.T) {
	b := &Backend{q: 2, nodes: []*node{{addr: "a"}, {addr: "b"}, {addr: "c"}}, cfg: Config{}.withDefaults()}
	keys := []string{"k"}
	args := [][]byte{[]byte("tok"), []byte("5000")}
	bulk := func(s string) backend.Value { return backend.Value{Kind: backend.KindBulk, Str: []byte(s)} }
	arr := func(v backend.Value) backend.Value {
		return backend.Value{Kind: backend.KindArray, Elems: []backend.Value{v}}
	}
	nilv := backend.Value{Kind: backend.KindNil}
	created := nodeReply{vals: []backend.Value{arr(nilv), backend.Int(1), arr(bulk("tok")), backend.Int(5000)}, done: true}
	refused := nodeReply{vals: []backend.Value{arr(bulk("other")), backend.Int(0), arr(bulk("other")), backend.Int(4000)}, done: true}
	down := nodeReply{err: errNodeTimeout, done: true}
	_, err, u := b.evalOutcome(keys, args, watchKeys, []nodeReply{created, refused, down}, time.Millisecond)
	if err == nil {
		t.Fatalf("1 from one node, 0 from another, third down: no error; want TRYAGAIN")
	}
	reqs := u.requests(b.q)
	if reqs == nil || reqs[0] == nil || reqs[1] != nil {
		t.Fatalf("undo requests = %v; want node 0's created key undone, node 1 untouched", reqs)
	}
}

// TestScriptValidity: a script's grant gets Redlock's validity check —
// keys it created (watched by keys) or changed with an expiry (watched by
// value) on a majority must outlive the vote's time plus the drift, or
// the client gets TRYAGAIN and everything is undone — but only for TTLs
// a lock can have (lockTTL: at least the node timeout): Redisson's 10ms
// unlock latch, late, is no failed grant.
func TestScriptValidity(t *testing.T) {
	b := &Backend{q: 2, nodes: []*node{{addr: "a"}, {addr: "b"}, {addr: "c"}}, cfg: Config{}.withDefaults()}
	bulk := func(s string) backend.Value { return backend.Value{Kind: backend.KindBulk, Str: []byte(s)} }
	nilV := backend.Value{Kind: backend.KindNil}
	arr := func(vs ...backend.Value) backend.Value { return backend.Value{Kind: backend.KindArray, Elems: vs} }
	keysReplies := func(ttl int64) []nodeReply {
		// MGET before, the script's reply, MGET after, the key's PTTL.
		r := nodeReply{vals: []backend.Value{arr(nilV), backend.Int(1), arr(bulk("mine")), backend.Int(ttl)}, done: true}
		return []nodeReply{r, r, r}
	}
	valuesReplies := func(ttl int64) []nodeReply {
		// DUMP and PEXPIRETIME before, the script's reply, DUMP, PTTL and
		// PEXPIRETIME after.
		r := nodeReply{vals: []backend.Value{nilV, backend.Int(-2), nilV, bulk("dump"), backend.Int(ttl), backend.Int(1_900_000_000_000)}, done: true}
		return []nodeReply{r, r, r}
	}
	args := [][]byte{[]byte("mine")}
	for _, c := range []struct {
		name    string
		ttl     int64
		elapsed time.Duration
		late    bool
	}{
		{"a lock's grant in time", 300, 10 * time.Millisecond, false},
		{"a lock's grant too late", 300, 297 * time.Millisecond, true},
		{"a 10ms marker, late", 10, 9 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err, _, _, undoAll := b.keysOutcome([]string{"k"}, args, watchKeys, 1, keysReplies(c.ttl), c.elapsed)
			if late := err != nil; late != c.late || undoAll != c.late {
				t.Errorf("watched by keys: error %v, undo all %v; want late %v", err, undoAll, c.late)
			}
			_, err, u := b.valuesOutcome([]string{"k"}, valuesReplies(c.ttl), c.elapsed)
			if late := err != nil; late != c.late || u.all != c.late {
				t.Errorf("watched by value: error %v, undo all %v; want late %v", err, u.all, c.late)
			}
		})
	}
}

// TestVoteTime: replies that differ by when the nodes ran a script settle
// as the smaller, but only for what can be a lock's time to live (at
// least the node timeout); flags and counts that differ never do
// (TestSplitReleaseIsNoTimeVote).
func TestVoteTime(t *testing.T) {
	b := &Backend{q: 2, nodes: []*node{{addr: "a"}, {addr: "b"}, {addr: "c"}}, cfg: Config{NodeTimeout: 50 * time.Millisecond}.withDefaults()}
	for _, c := range []struct {
		name   string
		ints   []int64 // -100: no reply
		want   int64
		agreed bool
	}{
		{"a PTTL read a little later", []int64{29998, 29990, -100}, 29990, true},
		{"PTTLs too far apart", []int64{29998, 20000, -100}, 0, false},
		{"a release's 1 beside a 0", []int64{1, 0, -100}, 0, false},
		{"counts that differ", []int64{2, 1, -100}, 0, false},
		{"a PTTL below the node timeout", []int64{40, 39, -100}, 0, false},
		{"not held beside a PTTL", []int64{-3, 29998, -100}, 0, false},
	} {
		vals := make([]backend.Value, len(c.ints))
		ok := make([]bool, len(c.ints))
		for i, n := range c.ints {
			vals[i], ok[i] = backend.Int(n), n != -100
		}
		v, agreed := b.voteTime(vals, ok)
		if agreed != c.agreed || (agreed && v.Int != c.want) {
			t.Errorf("%s: voteTime(%v) = %d, %v; want %d, %v", c.name, c.ints, v.Int, agreed, c.want, c.agreed)
		}
	}
}
