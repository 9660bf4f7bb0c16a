package pgbridge

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/backend"
)

// DBSIZE in the advisory strategy. A lock without a row yet (deferred.go)
// is known only to the instance holding it: PostgreSQL has its advisory
// lock, but the lock id does not tell its database. So DBSIZE counts the
// keys of the instances that may hold row-less locks (a holder session of
// theirs has a rowless_until_ms raised) and its own from their memory, by
// a routed "count" (route.go), and everybody else's from the lease table,
// leaving out the rows that those instances' live sessions hold: each key
// is counted once, by whoever knows it for sure.
//
// An instance counts its own keys from per-session counters, not from its
// row-less count plus the table: a lock that got its row between the
// table's snapshot and the read of that count was counted by neither (the
// holder's DBSIZE answered 1995 for 2001 keys while rows were written), or
// by both. The counters move only when a lease begins or ends, never when
// its row is written. A session that ends takes its counter with it, as
// it takes its locks: its leases are no longer this instance's (they are
// fences, counted from their rows).

// sessionLeases counts, per database, the leases one holder session
// granted (with a row or deferred) that have not ended.
type sessionLeases struct {
	gen   uint64 // the session's generation (holder.gen)
	n     [backend.Databases]atomic.Int64
	locks atomic.Int64 // the advisory locks the session holds, for a lease or one operation (capacity.go)
}

// counted adds one to the count of h's session gen, for a lease it
// begins: a grant in its batch, or a row written for a key locked for one
// operation (deferred.go rowQuery).
func (h *holder) counted(db int, gen uint64) {
	if p := h.leases.Load(); p != nil && p.gen == gen {
		p.n[db].Add(1)
	}
}

// uncounted takes e off its session's count: a lease with a row or
// deferred that ends (its stripe locked). A lease of a session that has
// ended is not counted any more.
func (a *advisory) uncounted(k dbKey, e *held) {
	if p := e.h.leases.Load(); p != nil && p.gen == e.gen {
		p.n[k.db].Add(-1)
	}
}

// ownCount counts this instance's live leases of db (with a row or
// deferred, of sessions that still hold them), but for the keys of except
// (whose stripes the caller holds).
func (a *advisory) ownCount(db int, except [][]byte) int64 {
	var n int64
	for _, h := range a.holders {
		if p := h.leases.Load(); p != nil && p.gen == h.gen.Load() {
			n += p.n[db].Load()
		}
	}
	for _, key := range except {
		k := dbKey{db, string(key)}
		if e := a.b.stripe(k).owned[k]; e != nil && (e.row || e.deferred) && e.valid() {
			n--
		}
	}
	return n
}

// countAll counts the live keys of db but for the keys of except: the
// lease table's rows whose holder session still holds the lock (and whose
// deadline has not come by this process's clock), and the fences, but for
// the rows held by this instance and by those that may hold locks without
// rows, whose keys each of them counts in memory.
func (a *advisory) countAll(ctx context.Context, db int, except [][]byte) (int64, error) {
	var n int64
	var others []string
	err := a.b.pool.QueryRow(ctx, `WITH m AS (SELECT $4::text AS inst
			UNION SELECT split_part(s.holder, '/', 1) FROM `+a.b.cfg.Schema+`.sessions s WHERE s.rowless_until_ms > 0 AND NOT `+markerGone+`)
		SELECT (SELECT count(*) FROM `+a.b.table+` l WHERE l.db = $1 AND NOT (l.key = ANY($3)) AND CASE WHEN `+heldByRowHolder+`
				THEN split_part(l.holder, '/', 1) NOT IN (SELECT inst FROM m) AND (l.deadline_ms IS NULL OR l.deadline_ms > $2 OR l.deadline_ms > `+pgNowMS+`)
				ELSE COALESCE(l.deadline_ms > `+pgNowMS+`, false) END),
			ARRAY(SELECT inst FROM m WHERE inst <> $4)`, db, nowMS(), except, a.b.instance).Scan(&n, &others)
	if err != nil {
		return 0, err
	}
	ns := make([]int64, len(others))
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, in := range others {
		wg.Go(func() {
			rep, err := a.router.send(ctx, in, &routeReq{Op: "count", DB: db})
			if err == nil {
				err = rep.error()
			}
			if err == nil {
				ns[i] = rep.N
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range others {
		if errs[i] != nil {
			return 0, errs[i]
		}
		n += ns[i]
	}
	return n + a.ownCount(db, except), nil
}
