package model

import (
	"github.com/lockproxy/lockproxy/backend"
)

// LOCKPROXY reads what lockproxy keeps beside a lock (docs/fencing.md):
//
//	LOCKPROXY FENCE key token  the fence of the key's grant when the key
//	                           holds token (a string's value, a hash's
//	                           field, a set's or sorted set's member), else nil
//	LOCKPROXY LOCK key         [token, fence, PTTL] of a live key (token nil
//	                           for a key of another type than string, fence
//	                           nil when none is known), else nil
//	LOCKPROXY HELP
func cmdLockproxy(c *call) (backend.Value, error) {
	sub, err := CheckLockproxy(c.args)
	switch {
	case err != nil:
		return backend.Value{}, err
	case sub == "help":
		return LockproxyHelp, nil
	}
	key := c.key(2)
	sp := c.space(key)
	e, o, live := sp.Lookup(c.db, key, c.v.Now)
	if !live || sub == "fence" && !holds(e, o, string(c.args[3])) {
		return backend.Value{Kind: backend.KindNil}, nil
	}
	e.Fence = sp.ReadFence(c.db, key, e)
	if sub == "fence" {
		if e.Fence == 0 {
			return backend.Value{Kind: backend.KindNil}, nil // none could be given: the backend fails the command
		}
		return backend.Int(int64(e.Fence)), nil
	}
	tok := backend.Value{Kind: backend.KindNil}
	if e.IsString() {
		tok = backend.Bulk(e.Token)
	}
	pttl := int64(-1)
	if e.Deadline != 0 {
		pttl = e.Deadline - c.v.Now
	}
	fence := backend.Value{Kind: backend.KindNil}
	if e.Fence != 0 {
		fence = backend.Int(int64(e.Fence))
	}
	return backend.Array(tok, fence, backend.Int(pttl)), nil
}

// CheckLockproxy checks LOCKPROXY's arguments (args[0] is its name) as
// every backend answers them, and returns the subcommand in lower case:
// fence, lock or help.
func CheckLockproxy(args [][]byte) (string, error) {
	sub := lower(args[1])
	want := 0
	switch sub {
	case "fence":
		want = 4
	case "lock":
		want = 3
	case "help":
		want = 2
	}
	switch {
	case want == 0:
		name := args[1][:min(len(args[1]), 128)] // as Redis prints it: %.128s
		return "", backend.Reply("ERR unknown subcommand '" + string(name) + "'. Try LOCKPROXY HELP.")
	case len(args) != want:
		return "", backend.Reply(backend.ErrWrongArgs("lockproxy|" + sub))
	}
	return sub, nil
}

// holds reports whether a key's value holds tok: a string equal to it, a
// hash with it as a field, a set or sorted set with it as a member.
func holds(e Entry, o Object, tok string) bool {
	switch o := o.(type) {
	case nil:
		return string(e.Token) == tok
	case *Hash:
		return o.o.find(tok) >= 0
	case *Set:
		return o.o.find(tok) >= 0
	case *ZSet:
		_, ok := o.Score(tok)
		return ok
	}
	return false
}

// LockproxyHelp is LOCKPROXY HELP's reply.
var LockproxyHelp = backend.Array(
	backend.BulkString("LOCKPROXY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
	backend.BulkString("FENCE <key> <token>"),
	backend.BulkString("    The fencing token of the key's grant, if the key holds <token>; else nil."),
	backend.BulkString("LOCK <key>"),
	backend.BulkString("    The key's token, fence and PTTL; nil when the key is absent."),
	backend.BulkString("HELP"),
	backend.BulkString("    Print this help."),
)
