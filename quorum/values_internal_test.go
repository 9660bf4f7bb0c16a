package quorum

import (
	"testing"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// execReplies hands on EXEC's array as the commands' own replies; a
// transaction that did not run is one reply, its first error.
func TestExecReplies(t *testing.T) {
	ok, queued := backend.Value{Kind: backend.KindStatus, Str: []byte("OK")}, backend.Value{Kind: backend.KindStatus, Str: []byte("QUEUED")}
	errv := func(s string) backend.Value { return backend.Value{Kind: backend.KindError, Str: []byte(s)} }
	ran := []backend.Value{ok, queued, queued, {Kind: backend.KindArray, Elems: []backend.Value{backend.Int(1), errv("NOSCRIPT No matching script.")}}}
	if got := execReplies(ran); len(got) != 2 || got[0].Int != 1 || !noScript(got[1]) {
		t.Errorf("execReplies(ran) = %v; want [1, NOSCRIPT]", got)
	}
	loading := []backend.Value{errv("LOADING Redis is loading"), errv("LOADING Redis is loading"), errv("EXECABORT Transaction discarded")}
	if got := execReplies(loading); len(got) != 1 || !isTransient(got[0].Str) {
		t.Errorf("execReplies(loading) = %v; want the LOADING error alone", got)
	}
}

// readValues: a key changed when its DUMP after differs from before;
// the script set its expiry when it created the key or moved its
// PEXPIRETIME. An unchanged key is nothing to put back.
func TestReadValues(t *testing.T) {
	bulk := func(s string) backend.Value { return backend.Value{Kind: backend.KindBulk, Str: []byte(s)} }
	null := backend.Value{Kind: backend.KindNil}
	keys := []string{"created", "same", "tidied"}
	vals := []backend.Value{
		null, backend.Int(-2), bulk("A"), backend.Int(5000), bulk("B"), backend.Int(7000), // before
		backend.Int(1), // the script
		bulk("C"), backend.Int(900), backend.Int(9000), bulk("A"), backend.Int(800), backend.Int(5000), bulk("B2"), backend.Int(700), backend.Int(7000),
	}
	rv, ok := readValues(keys, vals)
	if !ok || rv.v.Int != 1 || len(rv.changes) != 2 {
		t.Fatalf("readValues = %+v, %v; want two changes", rv, ok)
	}
	if c := rv.changes[0]; c.key != "created" || c.pre != nil || string(c.post) != "C" || !rv.expSet[0] {
		t.Errorf("created: %+v, expiry set %v", c, rv.expSet[0])
	}
	if c := rv.changes[1]; c.key != "tidied" || string(c.pre) != "B" || c.at != 7000 || rv.expSet[2] {
		t.Errorf("tidied: %+v, expiry set %v; want its expiry untouched", c, rv.expSet[2])
	}
	if _, ok := readValues(keys, vals[:5]); ok {
		t.Error("readValues of a short reply: ok")
	}
}

// A restore kept for a later connection (link.redo) is sent there as the
// restore of its own key with its own DUMPs, and an owner-checked delete
// as the delete it is: the undoRec carries the restore, not its token.
func TestReplaceRequestRedoesRestores(t *testing.T) {
	c := valueChange{key: "sem", pre: []byte("\x00pre"), post: []byte("post\xff"), at: 1700000000123}
	r := restoreRequest([]valueChange{c})
	redo := append(r.undo, undoRec{key: "lock", token: "tok"})
	req := replaceRequest([]int64{7}, redo)
	if req.N != 3 {
		t.Fatalf("replace request has %d commands; want 3 (kill, restore, delete)", req.N)
	}
	want := [][]string{
		{"client", "kill", "id", "7"},
		{"eval", restoreScript.src, "1", "sem", "post\xff", "\x00pre", "1700000000123"},
		{"eval", delIfScript.src, "1", "lock", "tok", "eq"},
	}
	var exp resp.Request
	for _, w := range want {
		exp.Strs(w...)
	}
	if string(req.B) != string(exp.B) {
		t.Errorf("replace request =\n%q\nwant\n%q", req.B, exp.B)
	}
}
