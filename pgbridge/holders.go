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

// leasesTextDDL makes the view <schema>.leases_text: every column of the
// lease table (docs/postgres.md), key and token as text (bytes outside
// printable ASCII as \ooo escapes), psql showing bytea in hex otherwise.
// A view made by an earlier version, without the columns after
// deadline_ms, gains them (CREATE OR REPLACE VIEW may only add columns at
// the end); instances starting together take turns (a transaction-level
// advisory lock of the two-int form, which no key's lock uses).
func leasesTextDDL(schema, table string) string {
	return `DO $$ BEGIN
		PERFORM pg_advisory_xact_lock(1819239276, 1);
		IF to_regclass('` + schema + `.leases_text') IS NULL OR NOT EXISTS (SELECT FROM information_schema.columns
				WHERE table_schema = lower('` + schema + `') AND table_name = 'leases_text' AND column_name = 'granted_by') THEN
			CREATE OR REPLACE VIEW ` + schema + `.leases_text AS SELECT db, encode(key, 'escape') AS key,
				encode(token, 'escape') AS token, expires_at, holder, holder_pid, lock_id, deadline_ms,
				kind, fencing_token, granted_ms, client_addr, client_name, client_user, granted_by
			FROM ` + table + `;
		END IF;
	END $$`
}
