package proxy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
)

// The operator's LOCKPROXY subcommands (docs/operations.md), served here
// on top of what every backend answers (SCAN, LOCKPROXY LOCK, DEL); FENCE,
// LOCK and HELP are key commands (keycmd, model), scripts included. The
// admin port's /locks routes (admin.go) share listLocks and forceRelease.
//
//	LOCKPROXY LOCKS cursor [MATCH pattern] [COUNT n]
//	    the held keys of the selected database, paged as SCAN pages them:
//	    [cursor, [[key, token, fence, PTTL, holder] ...]] (holder: the
//	    map of model.HolderValue)
//	LOCKPROXY RELEASE key
//	    deletes the key whoever holds it: admin users only (NOPERM for
//	    others, as FLUSHALL), logged and counted; 1 when it was held

// Lock is one held key as the operator's views show it: LOCKPROXY LOCKS,
// the admin port's /locks (as JSON, by these tags) and its status page.
type Lock struct {
	Key string `json:"key"`
	// Token is the key's value; nil for a key of another type than a
	// string (a hash or a set: a semaphore library's).
	Token *string `json:"token"`
	// Fence is the fencing token of the key's grant; nil when none is
	// known (docs/fencing.md).
	Fence *int64 `json:"fence"`
	// TTLMillis is the time left, as PTTL: -1 when the key has no expiry.
	TTLMillis int64 `json:"ttl_ms"`
	// FencedUntilMillis is, for a fenced key (its holder was lost while
	// its lease ran: backend.FenceToken), when the fence ends (Unix ms):
	// nobody holds it, and nobody is granted it before then. nil for a
	// held key.
	FencedUntilMillis *int64 `json:"fenced_until_ms"`
	// Holder is what is known of the grant (model.HolderValue); its
	// strings are empty and GrantedMillis nil when unknown.
	Holder LockHolder    `json:"holder"`
	holder backend.Value // as LOCKPROXY LOCK answered it, for LOCKS
}

// LockHolder is who a lock was granted to, where and when.
type LockHolder struct {
	GrantedMillis *int64 `json:"granted_ms"`
	ClientAddr    string `json:"client_addr"`
	ClientName    string `json:"client_name"`
	ClientUser    string `json:"client_user"`
	Instance      string `json:"instance"`
	// Nodes are, on quorum, each node's address and whether it holds the
	// key's token; empty on the other backends.
	Nodes map[string]bool `json:"nodes"`
	// PostgresPID is, for a lock a PostgreSQL session holds from SQL (not
	// through lockproxy), that session's backend pid; the client fields
	// are then its client_addr, application_name and role, GrantedMillis
	// when the session began. Absent otherwise.
	PostgresPID *int64 `json:"postgres_pid,omitempty"`
	// Legacy is, during a migration, the address of the legacy Redis for
	// a lock only it holds (taken there by a client not yet moved, which
	// it does not name). Absent otherwise.
	Legacy string `json:"legacy,omitempty"`
}

// Who is the holder in a few words, for the status page: the client's
// name (else its address), its user when not the default one, and the
// instance; on quorum, the nodes that hold it. Empty when unknown.
func (h LockHolder) Who() string {
	switch {
	case h.PostgresPID != nil:
		who := fmt.Sprintf("PostgreSQL session pid %d (SQL, not lockproxy)", *h.PostgresPID)
		var of []string
		if h.ClientName != "" {
			of = append(of, "application_name "+h.ClientName)
		}
		if h.ClientUser != "" {
			of = append(of, "user "+h.ClientUser)
		}
		if h.ClientAddr != "" {
			of = append(of, "from "+h.ClientAddr)
		}
		if len(of) > 0 {
			who += ": " + strings.Join(of, ", ")
		}
		return who
	case h.Legacy != "":
		return "a client of the legacy Redis " + h.Legacy + " (not through lockproxy)"
	}
	who := h.ClientName
	if who == "" {
		who = h.ClientAddr
	}
	if h.ClientUser != "" && h.ClientUser != "default" {
		who += " (" + h.ClientUser + ")"
	}
	if h.Instance != "" {
		who += " via " + h.Instance
	}
	if len(h.Nodes) > 0 {
		n := 0
		for _, held := range h.Nodes {
			if held {
				n++
			}
		}
		who = strings.TrimPrefix(who+fmt.Sprintf(", on %d of %d nodes", n, len(h.Nodes)), ", ")
	}
	return strings.TrimPrefix(who, " via ")
}

// holderOf reads model.HolderValue's map.
func holderOf(v backend.Value) LockHolder {
	h := LockHolder{Nodes: map[string]bool{}}
	for i := 0; i+1 < len(v.Elems); i += 2 {
		f, x := string(v.Elems[i].Str), v.Elems[i+1]
		switch f {
		case "granted_ms":
			h.GrantedMillis = optInt(x)
		case "client_addr":
			h.ClientAddr = string(x.Str)
		case "client_name":
			h.ClientName = string(x.Str)
		case "client_user":
			h.ClientUser = string(x.Str)
		case "instance":
			h.Instance = string(x.Str)
		case "postgres_pid":
			h.PostgresPID = optInt(x)
		case "legacy":
			h.Legacy = string(x.Str)
		case "nodes":
			for j := 0; j+1 < len(x.Elems); j += 2 {
				h.Nodes[string(x.Elems[j].Str)] = x.Elems[j+1].Int == 1
			}
		}
	}
	return h
}

// optInt is an integer field of a holder, nil when it has none.
func optInt(x backend.Value) *int64 {
	if x.Kind != backend.KindInt {
		return nil
	}
	n := x.Int
	return &n
}

// LockPage is one page of LOCKPROXY LOCKS: Cursor "0" ends the iteration.
type LockPage struct {
	Cursor string `json:"cursor"`
	Locks  []Lock `json:"locks"`
}

// lockOf reads LOCKPROXY LOCK key's reply v into a Lock; ok is false when
// the key is free.
func lockOf(key string, v backend.Value) (l Lock, ok bool) {
	if v.Kind != backend.KindArray || len(v.Elems) != 4 {
		return Lock{}, false
	}
	l = Lock{Key: key, TTLMillis: v.Elems[2].Int, Holder: holderOf(v.Elems[3]), holder: v.Elems[3]}
	if t := v.Elems[0]; !t.IsNil() {
		s := string(t.Str)
		l.Token = &s
		if s == backend.FenceToken && l.TTLMillis > 0 {
			until := time.Now().UnixMilli() + l.TTLMillis
			l.FencedUntilMillis = &until
		}
	}
	if f := v.Elems[1]; f.Kind == backend.KindInt {
		n := f.Int
		l.Fence = &n
	}
	return l, true
}

// value is l as one entry of LOCKPROXY LOCKS: [key, token, fence, PTTL,
// holder].
func (l Lock) value() backend.Value {
	tok, fence := backend.Value{Kind: backend.KindNil}, backend.Value{Kind: backend.KindNil}
	if l.Token != nil {
		tok = backend.BulkString(*l.Token)
	}
	if l.Fence != nil {
		fence = backend.Int(*l.Fence)
	}
	return backend.Array(backend.BulkString(l.Key), tok, fence, backend.Int(l.TTLMillis), l.holder)
}

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
	ctx, cancel := cl.commandCtx()
	defer cancel()
	if sub == "release" {
		if !cl.admin() {
			return backend.ErrorValue(backend.ErrNoPerm("lockproxy|release")), true
		}
		held, err := cl.s.forceRelease(ctx, cl.store(), cl.db, args[2], "user", cl.userName(), "client", cl.addr, "conn_id", cl.id)
		if err != nil {
			return cl.errorValue("lockproxy", err), true
		}
		return backend.Int(b2i(held)), true
	}
	page, err := listLocks(ctx, cl.store(), cl.db, args[2:])
	if err != nil {
		return cl.errorValue("lockproxy", err), true
	}
	out := make([]backend.Value, len(page.Locks))
	for i, l := range page.Locks {
		out[i] = l.value()
	}
	return backend.Array(backend.BulkString(page.Cursor), backend.Array(out...)), true
}

// listLocks is LOCKS: SCAN of db with the same cursor and options
// (scanArgs: cursor [MATCH pattern] [COUNT n]), then each key's LOCKPROXY
// LOCK; a key gone meanwhile is left out. Errors are those of the backend
// (a ReplyError for a bad option, in SCAN's words).
func listLocks(ctx context.Context, b backend.Backend, db int, scanArgs [][]byte) (LockPage, error) {
	scan := keycmd.Lookup([]byte("scan"))
	page, err := scan.Exec(ctx, b, db, append([][]byte{[]byte("scan")}, scanArgs...))
	if err != nil {
		return LockPage{}, err
	}
	if page.Kind != backend.KindArray || len(page.Elems) != 2 {
		return LockPage{}, backend.Reply(backend.MsgInternal)
	}
	out := LockPage{Cursor: string(page.Elems[0].Str), Locks: []Lock{}}
	for _, k := range page.Elems[1].Elems {
		l, ok, err := readLock(ctx, b, db, k.Str)
		if err != nil {
			return LockPage{}, err
		}
		if ok {
			out.Locks = append(out.Locks, l)
		}
	}
	return out, nil
}

// readLock is LOCKPROXY LOCK key as a Lock; ok is false when key is free.
func readLock(ctx context.Context, b backend.Backend, db int, key []byte) (Lock, bool, error) {
	v, err := keycmd.Lookup([]byte("lockproxy")).Exec(ctx, b, db, [][]byte{[]byte("lockproxy"), []byte("lock"), key})
	if err != nil {
		return Lock{}, false, err
	}
	l, ok := lockOf(string(key), v)
	return l, ok, nil
}

// forceRelease is RELEASE, whoever asks (a RESP client or the admin
// port, already found allowed): it deletes key in db of b, logs it at warn
// with who (the user, the client and how it came) and counts it when the
// key was held. held reports whether it was.
func (s *Server) forceRelease(ctx context.Context, b backend.Backend, db int, key []byte, who ...any) (held bool, err error) {
	v, err := keycmd.Lookup([]byte("del")).Exec(ctx, b, db, [][]byte{[]byte("del"), key})
	if err != nil {
		return false, err
	}
	s.log.Warn("lock force-released", append([]any{"key", string(key), "db", db, "held", v.Int == 1}, who...)...)
	if s.metrics != nil && v.Int == 1 {
		s.metrics.forceReleases.Inc()
	}
	return v.Int == 1, nil
}

// userName is the connection's user as ACL names it.
func (cl *client) userName() string {
	if cl.user == "" {
		return "default"
	}
	return cl.user
}
