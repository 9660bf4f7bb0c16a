package model

import "github.com/lockproxy/lockproxy/backend"

// HolderValue is the fourth element of LOCKPROXY LOCK's reply (and the
// fifth of each LOCKPROXY LOCKS entry): what is known of the grant, as a
// map (a flat array of field, value under RESP2), each field always there:
//
//	granted_ms   when the grant was made, Unix ms; nil when unknown
//	client_addr  the address of the client it was made for
//	client_name  that client's CLIENT SETNAME name
//	client_user  its ACL user ("default" unless it AUTHed as another)
//	instance     the lockproxy instance that made it
//	nodes        quorum: each node's address, 1 where the node holds the
//	             key's token (or, for a value of another type, the key),
//	             else 0; empty on the other backends
//
// The strings are empty when unknown: a grant made by another instance
// that did not say (quorum), by an earlier process, or written from SQL.
func HolderValue(g backend.Grant, nodes []backend.Value) backend.Value {
	at := backend.Value{Kind: backend.KindNil}
	if g.At > 0 {
		at = backend.Int(g.At)
	}
	h := g.Holder
	if h == nil {
		h = &backend.Holder{}
	}
	if nodes == nil {
		nodes = []backend.Value{}
	}
	return backend.Value{Kind: backend.KindMap, Elems: []backend.Value{
		backend.BulkString("granted_ms"), at,
		backend.BulkString("client_addr"), backend.BulkString(h.Addr),
		backend.BulkString("client_name"), backend.BulkString(h.Name),
		backend.BulkString("client_user"), backend.BulkString(h.User),
		backend.BulkString("instance"), backend.BulkString(h.Instance),
		backend.BulkString("nodes"), {Kind: backend.KindMap, Elems: nodes},
	}}
}
