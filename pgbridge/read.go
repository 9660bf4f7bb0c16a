package pgbridge

import (
	"context"
	"errors"
	"strings"
)

// Reads of the advisory strategy (GET, PTTL, EXISTS, and the holder of a
// key held elsewhere): this process's leases first, then the lease table,
// then, for a lock without a row (deferred.go), pg_locks and the instance
// holding it.

// read returns k's state: this process's lease, the lease table's row,
// or, for a lock another instance holds without a row (deferred.go), that
// instance's answer.
func (a *advisory) read(ctx context.Context, k dbKey) (state, error) {
	if s, ok := a.readOwn(k); ok {
		return s, nil
	}
	s, in, rowless, err := a.readTable(ctx, k)
	if err != nil || !rowless {
		return s, err
	}
	if in == a.b.instance { // granted since readOwn looked
		s, _ := a.readOwn(k)
		return s, nil
	}
	if routed(ctx) {
		return state{}, tryAgain(errors.New("the key's lock changed hands while a read was routed"))
	}
	rep, err := a.router.send(ctx, in, &routeReq{Op: "read", DB: k.db, Key: []byte(k.key)})
	if err != nil {
		return state{}, err
	}
	if err := rep.error(); err != nil {
		return state{}, err
	}
	return state{present: rep.OK, kind: rep.Kind, token: rep.Tok, deadline: rep.N}, nil
}

// readOwn returns k's state when this process holds k's lock or keeps its
// fence.
func (a *advisory) readOwn(k dbKey) (state, bool) {
	st := a.b.stripe(k)
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.owned[k]
	if e == nil {
		return state{}, false
	}
	if e.valid() {
		return e.state, true
	}
	return e.fence(nowMS())
}

// readTable reads k's lease row, if its holder session still holds the
// lock, with the instance holding it; or its fence, held by no instance.
// Without a row: rowless is true and in the instance whose holder session
// holds the lock (deferred.go); otherwise the key is absent, or fenced by
// a session that ended with row-less locks.
func (a *advisory) readTable(ctx context.Context, k dbKey) (s state, in string, rowless bool, err error) {
	var tok []byte
	var kind *int16
	var exp, dead *int64
	var holder, lockHolder *string
	var live *bool
	err = a.b.retryRead(ctx, func() error {
		return a.b.pool.QueryRow(ctx, `SELECT r.token, r.kind, r.deadline_ms, r.holder, r.live,
				CASE WHEN r.holder IS NULL THEN `+a.lockHolderSQL("x.id")+` END,
				CASE WHEN r.holder IS NULL THEN `+a.deadUntilSQL()+` END
			FROM (SELECT hashtextextended($3::text, $1::int::bigint) AS id) x
			LEFT JOIN LATERAL (SELECT * FROM (SELECT l.token, l.kind, l.deadline_ms, l.holder, `+heldByRowHolder+` AS live
				FROM `+a.b.table+` l WHERE l.db = $1 AND l.key = $2) r0 WHERE r0.live OR r0.deadline_ms > `+pgNowMS+`) r ON true`,
			k.db, []byte(k.key), hashText(k.key)).Scan(&tok, &kind, &exp, &holder, &live, &lockHolder, &dead)
	})
	switch {
	case err != nil:
		return state{}, "", false, err
	case holder != nil && !*live:
		return fenceState(*exp), "", false, nil
	case holder != nil:
		s := state{present: true, kind: uint8(*kind), token: tok}
		if exp != nil {
			s.deadline = *exp
		}
		return s, instanceOf(*holder), false, nil
	case lockHolder != nil:
		return state{}, instanceOf(*lockHolder), true, nil
	case dead != nil:
		return fenceState(*dead), "", false, nil
	}
	return state{}, "", false, nil
}

// instanceOf is the instance of a holder name (instance/idx).
func instanceOf(holder string) string {
	in, _, _ := strings.Cut(holder, "/")
	return in
}
