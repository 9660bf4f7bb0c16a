package proxy

import (
	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
)

// The operator's LOCKPROXY subcommands (docs/operations.md), served here
// on top of what every backend answers (SCAN, LOCKPROXY LOCK, DEL); FENCE,
// LOCK and HELP are key commands (keycmd, model), scripts included.
//
//	LOCKPROXY LOCKS cursor [MATCH pattern] [COUNT n]
//	    the held keys of the selected database, paged as SCAN pages them:
//	    [cursor, [[key, token, fence, PTTL, holder] ...]] (holder: the
//	    map of model.HolderValue)
//	LOCKPROXY RELEASE key
//	    deletes the key whoever holds it: admin users only (NOPERM for
//	    others, as FLUSHALL), logged and counted; 1 when it was held

// lockproxyOperator answers LOCKS and RELEASE (ok false for the other
// subcommands, which the backend answers).
func (cl *client) lockproxyOperator(args [][]byte) (backend.Value, bool) {
	if len(args) < 2 {
		return backend.Value{}, false
	}
	sub := lower(args[1])
	if sub != "locks" && sub != "release" {
		return backend.Value{}, false
	}
	if _, err := model.CheckLockproxy(args); err != nil {
		return cl.errorValue("lockproxy", err), true
	}
	if sub == "release" {
		return cl.forceRelease(args[2]), true
	}
	return cl.listLocks(args[2:]), true
}

// listLocks is LOCKS: SCAN with the same cursor and options, then each
// key's LOCKPROXY LOCK; a key gone meanwhile is left out.
func (cl *client) listLocks(scanArgs [][]byte) backend.Value {
	ctx, cancel := cl.commandCtx()
	defer cancel()
	scan := keycmd.Lookup([]byte("scan"))
	page, err := scan.Exec(ctx, cl.store(), cl.db, append([][]byte{[]byte("scan")}, scanArgs...))
	if err != nil {
		return cl.errorValue("lockproxy", err)
	}
	if page.Kind != backend.KindArray || len(page.Elems) != 2 {
		return backend.ErrorValue(backend.MsgInternal)
	}
	lock := keycmd.Lookup([]byte("lockproxy"))
	var out []backend.Value
	for _, k := range page.Elems[1].Elems {
		v, err := lock.Exec(ctx, cl.store(), cl.db, [][]byte{[]byte("lockproxy"), []byte("lock"), k.Str})
		if err != nil {
			return cl.errorValue("lockproxy", err)
		}
		if v.Kind == backend.KindArray && len(v.Elems) >= 3 { // a key gone meanwhile is nil
			out = append(out, backend.Array(append([]backend.Value{backend.Bulk(k.Str)}, v.Elems...)...))
		}
	}
	return backend.Array(page.Elems[0], backend.Array(out...))
}

// forceRelease is RELEASE.
func (cl *client) forceRelease(key []byte) backend.Value {
	if !cl.admin() {
		return backend.ErrorValue(backend.ErrNoPerm("lockproxy|release"))
	}
	ctx, cancel := cl.commandCtx()
	defer cancel()
	v, err := keycmd.Lookup([]byte("del")).Exec(ctx, cl.store(), cl.db, [][]byte{[]byte("del"), key})
	if err != nil {
		return cl.errorValue("lockproxy", err)
	}
	cl.s.log.Warn("lock force-released", "key", string(key), "db", cl.db, "held", v.Int == 1,
		"user", cl.userName(), "client", cl.addr, "conn_id", cl.id)
	if cl.s.metrics != nil && v.Int == 1 {
		cl.s.metrics.forceReleases.Inc()
	}
	return v
}

// userName is the connection's user as ACL names it.
func (cl *client) userName() string {
	if cl.user == "" {
		return "default"
	}
	return cl.user
}
