package model

import (
	"github.com/lockproxy/lockproxy/backend"
)

// LOCKPROXY reads what lockproxy keeps beside a lock (docs/fencing.md):
//
//	LOCKPROXY FENCE key token  the fence of the key's grant when the key
//	                           holds token (a string's value, a hash's
//	                           field, a set's or sorted set's member), else nil
//	LOCKPROXY LOCK key         [token, fence, PTTL, holder] of a live key
//	                           (token nil for a key of another type than
//	                           string, fence nil when none is known; holder
//	                           the map HolderValue describes), else nil
//	LOCKPROXY HELP
//
// LOCKS and RELEASE are the operator's, served by the proxy
// (proxy/cmd_lockproxy.go), not from scripts.
func cmdLockproxy(c *call) (backend.Value, error) {
	sub, err := CheckLockproxy(c.args)
	switch {
	case err != nil:
		return backend.Value{}, err
	case sub == "help":
		return LockproxyHelp, nil
	case sub == "locks" || sub == "release": // the proxy's own (proxy/cmd_lockproxy.go): reached from scripts only
		return backend.Value{}, backend.Reply(NotInScripts(sub))
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
	return backend.Array(tok, fence, backend.Int(pttl), HolderValue(backend.Grant{At: e.Granted, Holder: e.Holder}, nil)), nil
}

// CheckLockproxy checks LOCKPROXY's arguments (args[0] is its name) as
// every backend answers them, and returns the subcommand in lower case:
// fence, lock, help, or the operator's locks and release, which the proxy
// serves itself (SCAN's options after a cursor follow LOCKS).
func CheckLockproxy(args [][]byte) (string, error) {
	sub := lower(args[1])
	want := 0
	switch sub {
	case "fence":
		want = 4
	case "lock", "release":
		want = 3
	case "locks":
		want = -3
	case "help":
		want = 2
	}
	switch {
	case want == 0:
		name := args[1][:min(len(args[1]), 128)] // as Redis prints it: %.128s
		return "", backend.Reply("ERR unknown subcommand '" + string(name) + "'. Try LOCKPROXY HELP.")
	case want > 0 && len(args) != want, want < 0 && len(args) < -want:
		return "", backend.Reply(backend.ErrWrongArgs("lockproxy|" + sub))
	}
	return sub, nil
}

// NotInScripts is the refusal of LOCKPROXY's operator subcommand sub
// from a script.
func NotInScripts(sub string) string {
	return "ERR lockproxy does not run 'lockproxy|" + sub + "' from scripts"
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
	backend.BulkString("    The key's token, fence, PTTL and holder (granted_ms, client_addr, client_name, client_user, instance, nodes); nil when the key is absent."),
	backend.BulkString("LOCKS <cursor> [MATCH <pattern>] [COUNT <count>]"),
	backend.BulkString("    The held keys of the database, as SCAN pages them: [cursor, [[key, token, fence, PTTL, holder] ...]]."),
	backend.BulkString("RELEASE <key>"),
	backend.BulkString("    Deletes the key whoever holds it (admin users only); 1 when it was held."),
	backend.BulkString("HELP"),
	backend.BulkString("    Print this help."),
)
