package pgbridge

import "github.com/lockproxy/lockproxy/backend"

// Holders (docs/postgres.md, the lease table): who took a lock is kept in
// its lease row (granted_ms, client_addr, client_name, client_user,
// granted_by: NULL when unknown, as for a row written from SQL or by a
// version before them) and, in the advisory strategy, with the lease in
// process, so that a lock younger than the row delay (no row yet) tells
// it too, on the instance holding it.

// grantParams are g's five column values: granted_ms, client_addr,
// client_name, client_user, granted_by (nil, NULL, when unknown).
func grantParams(g backend.Grant) []any {
	out := []any{nil, nil, nil, nil, nil}
	if g.At > 0 {
		out[0] = g.At
	}
	if h := g.Holder; h != nil {
		out[1], out[2], out[3], out[4] = h.Addr, h.Name, h.User, h.Instance
	}
	return out
}

// grantCols scans the five columns back.
type grantCols struct {
	at                     *int64
	addr, name, user, inst *string
}

func (c *grantCols) dest() []any { return []any{&c.at, &c.addr, &c.name, &c.user, &c.inst} }

// grant is what the columns say; zero when nothing is known.
func (c *grantCols) grant() backend.Grant {
	var g backend.Grant
	if c.at != nil {
		g.At = *c.at
	}
	if c.addr != nil || c.name != nil || c.user != nil || c.inst != nil {
		s := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		g.Holder = &backend.Holder{Addr: s(c.addr), Name: s(c.name), User: s(c.user), Instance: s(c.inst)}
	}
	return g
}

// grantArrays are the grant columns of a batch of acquires, as arrays.
type grantArraysT struct {
	at                   []*int64
	addr, name, user, by []*string
}

func grantArrays(qs []*query) grantArraysT {
	n := len(qs)
	g := grantArraysT{at: make([]*int64, n), addr: make([]*string, n), name: make([]*string, n), user: make([]*string, n), by: make([]*string, n)}
	for i, q := range qs {
		if q.grant.At > 0 {
			g.at[i] = &q.grant.At
		}
		if h := q.grant.Holder; h != nil {
			g.addr[i], g.name[i], g.user[i], g.by[i] = &h.Addr, &h.Name, &h.User, &h.Instance
		}
	}
	return g
}
