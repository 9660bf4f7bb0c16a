package pgbridge

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// leaseStore is the lease strategy: the lease table is the truth and
// PostgreSQL's clock the only clock. Each write is one short transaction
// that takes pg_try_advisory_xact_lock(hashtextextended(key, db)) on its
// keys (so SQL users of the same advisory lock exclude it, and concurrent
// writers of one key, from any instance, run one after the other), reads
// the rows, and writes back what changed. Locks survive a restart of
// lockproxy; nothing lives in this process between operations.
type leaseStore struct {
	b        *Backend
	releases luascripts.Releases // catalogued release scripts seen (evalFast)
	expired  atomic.Uint64       // rows this instance reaped after their deadlines
	heldLast atomic.Int64        // the last count of live rows (heldLocks)
}

// lockTries and lockPause bound how long a write waits for a key's
// transaction lock that another writer holds (other lockproxy
// transactions hold it for a round trip or two). A key still locked after
// that is held by an SQL session.
const (
	lockTries = 20
	lockPause = 2 * time.Millisecond
)

type leaseTx struct {
	s      *leaseStore
	conn   *pgxpool.Conn
	keys   []dbKey
	states map[dbKey]state
	// pgNow is PostgreSQL's now() (the transaction's start, Unix ms): the
	// operation runs at it, so deadlines load and store as the rows hold
	// them (an absolute expiry reads back to the millisecond), a TTL
	// counts from the transaction's start (after the client sent the
	// command: it ends up to a round trip late, never early), and a PTTL
	// read at once never exceeds the TTL just set.
	pgNow int64
}

func (t *leaseTx) before() map[dbKey]state { return t.states }

func (t *leaseTx) clock() time.Time { return time.UnixMilli(t.pgNow) }

func (s *leaseStore) prepare(ctx context.Context, keys []dbKey) (tx, error) {
	conn, err := s.b.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	t := &leaseTx{s: s, conn: conn, keys: keys, states: make(map[dbKey]state, len(keys))}
	for try := 0; ; try++ {
		ok, err := t.begin(ctx)
		if err != nil {
			t.discard()
			return nil, err
		}
		if ok {
			return t, nil
		}
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.discard()
			return nil, err
		}
		if try == lockTries {
			conn.Release()
			return nil, &heldError{keys: keys, instances: make([]string, len(keys))}
		}
		time.Sleep(lockPause) // another writer holds a key's transaction lock
	}
}

// begin opens the transaction, takes the keys' transaction locks and reads
// their rows; ok is false when a lock was taken by another session.
func (t *leaseTx) begin(ctx context.Context) (bool, error) {
	var pb pgx.Batch
	pb.Queue("BEGIN")
	pb.Queue(`SELECT ` + pgNowMS)
	for _, k := range t.keys {
		pb.Queue(`SELECT pg_try_advisory_xact_lock(hashtextextended($1::text, $2::int::bigint))`, hashText(k.key), k.db)
	}
	for _, k := range t.keys {
		pb.Queue(`SELECT token, kind, deadline_ms, fencing_token, granted_ms, client_addr, client_name, client_user, granted_by
			FROM `+t.s.b.table+` WHERE db = $1 AND key = $2 FOR UPDATE`, k.db, []byte(k.key))
	}
	br := t.conn.SendBatch(ctx, &pb)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return false, err
	}
	if err := br.QueryRow().Scan(&t.pgNow); err != nil {
		return false, err
	}
	all := true
	for range t.keys {
		var ok bool
		if err := br.QueryRow().Scan(&ok); err != nil {
			return false, err
		}
		all = all && ok
	}
	for _, k := range t.keys {
		var tok []byte
		var kind int16
		var dl, fencing *int64
		var gc grantCols
		err := br.QueryRow().Scan(append([]any{&tok, &kind, &dl, &fencing}, gc.dest()...)...)
		f := int64(0)
		if fencing != nil {
			f = *fencing
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			t.states[k] = state{}
		case err != nil:
			return false, err
		case dl == nil:
			t.states[k] = state{present: true, kind: uint8(kind), token: tok, fencing: f, grant: gc.grant()}
		case *dl > t.pgNow:
			t.states[k] = state{present: true, kind: uint8(kind), token: tok, deadline: *dl, fencing: f, grant: gc.grant()}
		default:
			t.states[k] = state{}
		}
	}
	return all, br.Close()
}

// commit writes the changed rows and commits, their deadlines as the
// operation left them (on PostgreSQL's clock: pgNow).
func (t *leaseTx) commit(ctx context.Context, after map[dbKey]state) error {
	defer t.conn.Release()
	var pb pgx.Batch
	for _, k := range t.keys {
		s, old := after[k], t.states[k]
		if s.same(old) {
			continue
		}
		if !s.present {
			pb.Queue(`DELETE FROM `+t.s.b.table+` WHERE db = $1 AND key = $2`, k.db, []byte(k.key))
			continue
		}
		pb.Queue(`INSERT INTO `+t.s.b.table+` (db, key, lock_id, token, kind, deadline_ms, holder, fencing_token,
				granted_ms, client_addr, client_name, client_user, granted_by)
			VALUES ($1::int, $2, hashtextextended($3::text, $1::int::bigint), $4, $6, $5, 'lease', $7, $8, $9, $10, $11, $12)
			ON CONFLICT (db, key) DO UPDATE SET token = EXCLUDED.token, kind = EXCLUDED.kind, deadline_ms = EXCLUDED.deadline_ms,
				fencing_token = EXCLUDED.fencing_token, granted_ms = EXCLUDED.granted_ms, client_addr = EXCLUDED.client_addr,
				client_name = EXCLUDED.client_name, client_user = EXCLUDED.client_user, granted_by = EXCLUDED.granted_by`,
			append([]any{k.db, []byte(k.key), hashText(k.key), s.token, deadlineParam(s.deadline), int16(s.kind), fencingParam(s.fencing)}, grantParams(s.grant)...)...)
	}
	pb.Queue("COMMIT")
	if err := t.conn.SendBatch(ctx, &pb).Close(); err != nil {
		t.conn.Conn().Close(context.Background()) // the transaction's fate is unknown; never reuse the session
		return err
	}
	return nil
}

// rollback ends the transaction within the backend's OpTimeout: it runs
// under a stripe lock, so a dead connection must not hold the stripe for
// longer than that. A ROLLBACK that fails or times out closes the session
// (pgconn closes it without the graceful goodbye once ctx is done).
func (t *leaseTx) rollback() {
	defer t.conn.Release()
	ctx, cancel := context.WithTimeout(context.Background(), t.s.b.cfg.OpTimeout)
	defer cancel()
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.conn.Conn().Close(ctx)
	}
}

// discard closes a session whose transaction state is unknown.
func (t *leaseTx) discard() {
	t.conn.Conn().Close(context.Background())
	t.conn.Release()
}

func (s *leaseStore) read(ctx context.Context, k dbKey) (state, error) {
	var tok []byte
	var kind int16
	var left *int64
	err := s.b.retryRead(ctx, func() error {
		return s.b.pool.QueryRow(ctx, `SELECT token, kind, deadline_ms - `+pgNowMS+`
			FROM `+s.b.table+` WHERE db = $1 AND key = $2 AND `+leaseLive("deadline_ms"),
			k.db, []byte(k.key)).Scan(&tok, &kind, &left)
	})
	local := nowMS()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return state{}, nil
	case err != nil:
		return state{}, err
	case left == nil:
		return state{present: true, kind: uint8(kind), token: tok}, nil
	case *left <= 0:
		return state{}, nil
	}
	return state{present: true, kind: uint8(kind), token: tok, deadline: addMS(local, *left)}, nil
}

func newLeaseStore(b *Backend) *leaseStore { return &leaseStore{b: b} }

// The lease strategy's table is LOGGED: it is the locks. It has no other
// table.
func (s *leaseStore) logged() bool { return true }

func (s *leaseStore) extraDDL() []string { return nil }

// start starts the reaper of expired rows.
func (s *leaseStore) start(context.Context) error {
	s.b.wg.Add(1)
	go s.reap()
	return nil
}

// countLive counts the rows of db whose deadline has not come by
// PostgreSQL's clock.
func (s *leaseStore) countLive(ctx context.Context, db int, except [][]byte) (int64, error) {
	var n int64
	err := s.b.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.b.table+` WHERE db = $1 AND NOT (key = ANY($2))
		AND `+leaseLive("deadline_ms"), db, except).Scan(&n)
	return n, err
}

// route: the lease strategy has no routing. A key held beyond reach is
// locked by another transaction for longer than lockTries allows (an SQL
// session), which no instance can be asked to end.
func (s *leaseStore) route(_ context.Context, h *heldError, _ *routeReq) (*routeReply, error) {
	return nil, heldReply(h)
}

// reap deletes expired lease rows every Config.ReapInterval, in batches, so the
// table follows the live locks under acquire/expire churn. A row whose
// key a transaction has locked right now is left for the next round.
func (s *leaseStore) reap() {
	defer s.b.wg.Done()
	t := time.NewTicker(s.b.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.b.ctx.Done():
			return
		case <-t.C:
		}
		for {
			ctx, cancel := context.WithTimeout(s.b.ctx, s.b.cfg.OpTimeout)
			tag, err := s.b.pool.Exec(ctx, `DELETE FROM `+s.b.table+` WHERE ctid = ANY(ARRAY(
				SELECT ctid FROM `+s.b.table+` WHERE deadline_ms < `+pgNowMS+` LIMIT 1000))
				AND deadline_ms < `+pgNowMS+` AND pg_try_advisory_xact_lock(lock_id)`)
			cancel()
			if err != nil {
				if s.b.ctx.Err() == nil {
					s.b.log.Warn("pgbridge: reaping expired leases", "err", err)
				}
				break
			}
			s.expired.Add(uint64(tag.RowsAffected()))
			if tag.RowsAffected() < 1000 {
				break
			}
		}
	}
}

func (s *leaseStore) check(ctx context.Context) error { return s.b.pool.Ping(ctx) }

func (s *leaseStore) close() {}

func (s *leaseStore) drain(context.Context) {}

// The two commands nearly every lock client sends, SET … NX with a TTL
// and the catalogued release script, run in the lease strategy as one
// autocommit statement each instead of a transaction of two round trips
// on the reference model. Each does what the general path would do: it
// takes the key's transaction lock first (so SQL users of the advisory
// lock still exclude it, and writers of one key still run one after the
// other), treats a row whose deadline has come (by PostgreSQL's clock) as
// absent, and stores a TTL as now() + TTL. When the transaction lock is
// taken by someone else, or the statement could not be sent, the general
// path runs instead: it retries the lock and the connection as before.

// acquire is SET key token NX with a TTL in whole milliseconds (PX, or EX),
// under its stripe's lock; any other SET … NX takes the general path.
func (s *leaseStore) acquire(ctx context.Context, k dbKey, token []byte, o backend.SetOptions) (backend.SetResult, bool, error) {
	if o.KeepTTL || !o.Expiry.At.IsZero() || o.Expiry.TTL <= 0 || o.Expiry.TTL%time.Millisecond != 0 {
		return backend.SetResult{}, false, nil
	}
	unlock := s.b.lockStripes([]dbKey{k})
	written, done, err := s.acquireTTL(ctx, k, token, o.Expiry.TTL)
	unlock()
	return backend.SetResult{Written: written}, done, err
}

// evalFast runs a catalogued release script (luascripts.IsRelease) on its
// one key as one statement (release), under the key's stripe lock; every
// catalogued script answers 1 when it deleted the key, 0 otherwise.
func (s *leaseStore) evalFast(ctx context.Context, sc backend.Script, keys []dbKey, args [][]byte, ro bool) (backend.Value, bool, error) {
	if ro || len(keys) != 1 || len(args) < 1 || !s.releases.Is(sc) {
		return backend.Value{}, false, nil
	}
	unlock := s.b.lockStripes(keys)
	deleted, done, err := s.release(ctx, keys[0], args[0])
	unlock()
	switch {
	case !done || err != nil:
		return backend.Value{}, done, err
	case deleted:
		return backend.Int(1), true, nil
	}
	return backend.Int(0), true, nil
}

// acquireTTL is SET key token NX PX ttl as one statement; done is false
// when the general path must run.
func (s *leaseStore) acquireTTL(ctx context.Context, k dbKey, token []byte, ttl time.Duration) (written, done bool, err error) {
	var locked bool
	err = s.b.pool.QueryRow(ctx, `WITH l AS MATERIALIZED (
			SELECT pg_try_advisory_xact_lock(hashtextextended($3::text, $1::int::bigint)) AS ok),
		w AS (INSERT INTO `+s.b.table+` AS t (db, key, lock_id, token, deadline_ms, holder,
				granted_ms, client_addr, client_name, client_user, granted_by)
			SELECT $1::int, $2::bytea, hashtextextended($3::text, $1::int::bigint), $4::bytea,
				LEAST(`+pgNowMS+`::numeric + $5::bigint, 9223372036854775807)::bigint, 'lease',
				`+pgNowMS+`, $6::text, $7::text, $8::text, $9::text
			FROM l WHERE ok
			ON CONFLICT (db, key) DO UPDATE SET token = EXCLUDED.token, kind = 0, deadline_ms = EXCLUDED.deadline_ms,
				fencing_token = NULL, granted_ms = EXCLUDED.granted_ms, client_addr = EXCLUDED.client_addr,
				client_name = EXCLUDED.client_name, client_user = EXCLUDED.client_user, granted_by = EXCLUDED.granted_by
				WHERE NOT `+leaseLive("t.deadline_ms")+`
			RETURNING 1)
		SELECT (SELECT ok FROM l), EXISTS (SELECT 1 FROM w)`,
		append([]any{k.db, []byte(k.key), hashText(k.key), nonNil(token), ttl.Milliseconds()}, grantParams(backend.Grant{Holder: backend.HolderOf(ctx)})[1:]...)...).Scan(&locked, &written)
	done, err = s.fastResult(ctx, locked, err)
	return written, done, err
}

// release runs a catalogued release script (luascripts.IsRelease) on key:
// the row goes if it holds token and its deadline has not come. Every
// catalogued script answers 1 then, 0 otherwise.
func (s *leaseStore) release(ctx context.Context, k dbKey, token []byte) (deleted, done bool, err error) {
	var locked bool
	err = s.b.pool.QueryRow(ctx, `WITH l AS MATERIALIZED (
			SELECT pg_try_advisory_xact_lock(hashtextextended($3::text, $1::int::bigint)) AS ok),
		d AS (DELETE FROM `+s.b.table+` t USING l
			WHERE l.ok AND t.db = $1 AND t.key = $2 AND t.token = $4 AND t.kind = 0
				AND `+leaseLive("t.deadline_ms")+`
			RETURNING 1)
		SELECT (SELECT ok FROM l), EXISTS (SELECT 1 FROM d)`,
		k.db, []byte(k.key), hashText(k.key), nonNil(token)).Scan(&locked, &deleted)
	done, err = s.fastResult(ctx, locked, err)
	if done && err == nil && !deleted {
		// Nothing deleted (the rare case of a lock cycle): a value of
		// another type makes the script's GET answer WRONGTYPE, the
		// general path's to give.
		var typed bool
		if s.b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.b.table+` t
			WHERE t.db = $1 AND t.key = $2 AND t.kind <> 0 AND `+leaseLive("t.deadline_ms")+`)`,
			k.db, []byte(k.key)).Scan(&typed) != nil || typed {
			return false, false, nil
		}
	}
	return deleted, done, err
}

// fastResult turns a fast statement's outcome into done (it decided the
// command) and the error to answer. A failure after the statement may have
// reached PostgreSQL is TRYAGAIN, never a retry, which could answer a lock
// this client was just granted as held; a failed connection also drops the
// pool's others (Backend.dropPool), so that one TRYAGAIN is all a restart
// of PostgreSQL costs.
func (s *leaseStore) fastResult(ctx context.Context, locked bool, err error) (bool, error) {
	switch {
	case err == nil:
		s.b.outage.ok()
		return locked, nil
	case pgconn.SafeToRetry(err):
		return false, nil
	}
	s.b.dropPool(ctx, err)
	return true, tryAgain(err)
}

// nonNil keeps an empty token a value: a nil []byte is NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
