package pgbridge

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// The commands on the key space as a whole: KEYS, SCAN, RANDOMKEY,
// FLUSHDB and FLUSHALL (not from scripts: a script's model holds its own
// keys only). The live keys of a database are the lease table's rows that
// are live by the strategy's rule, after every lock without a row yet
// (advisory: deferred.go) has been given one: the instances that may
// hold such locks write their rows first, asked by a routed "rows" (this
// instance writes its own). A key granted after that look is ordered
// after the command. SCAN pages over that list by the model's fixed hash
// order, so a cursor goes on across calls and instances, as on memory.
//
// FLUSHDB deletes each key it finds as DEL does (a lock held by another
// instance is deleted there, its advisory lock released), then the rows
// no session holds (the fences a lost holder session left); FLUSHALL does
// so in every database and also clears the fence of a lost session's
// locks without rows (rowless_until_ms), which covers every database. A
// key written while the flush runs may outlive it: the flush is not one
// atomic step, as Redis's is. Another fence a lost session left in an
// instance's memory (a row-less lock it was holding) ends at its
// deadline, at most a minute.

// whole runs a command on the whole key space of db.
func (b *Backend) whole(ctx context.Context, db int, args [][]byte) (backend.Value, error) {
	name := strings.ToLower(string(args[0]))
	if name == "flushdb" || name == "flushall" {
		if err := model.CheckFlush(args); err != nil {
			return backend.Value{}, err
		}
		dbs := []int{db}
		if name == "flushall" {
			dbs = dbs[:0]
			for d := range backend.Databases {
				dbs = append(dbs, d)
			}
		}
		for _, d := range dbs {
			if err := b.flushDB(ctx, d); err != nil {
				return backend.Value{}, err
			}
		}
		if name == "flushall" {
			if err := b.store.unfenceAll(ctx); err != nil {
				return backend.Value{}, tryAgain(err)
			}
		}
		return backend.OKValue, nil
	}
	var sc model.Scan
	if name == "scan" {
		var err error
		if sc, err = model.ParseScan(args); err != nil {
			return backend.Value{}, err
		}
	}
	keys, err := b.liveKeys(ctx, db)
	if err != nil {
		return backend.Value{}, err
	}
	switch name {
	case "scan":
		return sc.Page(keys), nil
	case "randomkey":
		if len(keys) == 0 {
			return backend.NilValue, nil
		}
		return backend.BulkString(keys[rand.IntN(len(keys))].Key), nil
	}
	var out []backend.Value // KEYS
	for _, k := range keys {
		if model.Match(args[1], []byte(k.Key)) {
			out = append(out, backend.BulkString(k.Key))
		}
	}
	return backend.Array(out...), nil
}

// liveKeys lists the live keys of db with their types.
func (b *Backend) liveKeys(ctx context.Context, db int) ([]model.KeyType, error) {
	var keys []model.KeyType
	err := b.retryRead(ctx, func() (err error) {
		keys, err = b.store.listLive(ctx, db)
		return err
	})
	if err != nil {
		return nil, tryAgain(err)
	}
	return keys, nil
}

// flushDB deletes every key of db (the top of this file).
func (b *Backend) flushDB(ctx context.Context, db int) error {
	keys, err := b.liveKeys(ctx, db)
	if err != nil {
		return err
	}
	const batch = 256
	for len(keys) > 0 {
		n := min(batch, len(keys))
		names := make([]string, n)
		for i, k := range keys[:n] {
			names[i] = k.Key
		}
		if _, err := b.Del(ctx, db, names); err != nil {
			return err
		}
		keys = keys[n:]
	}
	if err := b.store.dropFences(ctx, db); err != nil {
		return tryAgain(err)
	}
	return nil
}

// kindType names a lease row's kind as TYPE does.
func kindType(kind int16) string {
	switch uint8(kind) {
	case model.KindHash:
		return "hash"
	case model.KindSet:
		return "set"
	case model.KindList:
		return "list"
	case model.KindZSet:
		return "zset"
	}
	return "string"
}

// rowsQuerier is what a listing runs on: the pool.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// scanKeys reads the rows of a (key, kind) query.
func scanKeys(ctx context.Context, q rowsQuerier, sql string, args ...any) ([]model.KeyType, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []model.KeyType
	for rows.Next() {
		var key []byte
		var kind int16
		if err := rows.Scan(&key, &kind); err != nil {
			return nil, err
		}
		out = append(out, model.KeyType{Key: string(key), Type: kindType(kind)})
	}
	return out, rows.Err()
}

// listLive implements strategy: the rows of db whose deadline has not come
// by PostgreSQL's clock.
func (s *leaseStore) listLive(ctx context.Context, db int) ([]model.KeyType, error) {
	return scanKeys(ctx, s.b.pool, `SELECT key, kind FROM `+s.b.table+` WHERE db = $1 AND `+leaseLive("deadline_ms"), db)
}

// dropFences implements strategy: the lease strategy has no fences.
func (s *leaseStore) dropFences(context.Context, int) error { return nil }

// unfenceAll implements strategy: nothing to clear.
func (s *leaseStore) unfenceAll(context.Context) error { return nil }

// listLive implements strategy: every instance that may hold locks
// without rows writes them (routed "rows"; this one directly), then the
// rows whose holder session holds their lock (and whose deadline has not
// come), and the fences, are the live keys (count.go counts the same).
func (a *advisory) listLive(ctx context.Context, db int) ([]model.KeyType, error) {
	var insts []string
	err := a.b.pool.QueryRow(ctx, `SELECT ARRAY(SELECT DISTINCT split_part(s.holder, '/', 1) FROM `+a.b.cfg.Schema+`.sessions s
		WHERE s.rowless_until_ms > 0 AND NOT `+markerGone+` AND split_part(s.holder, '/', 1) <> $1)`, a.b.instance).Scan(&insts)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(insts))
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Go(func() {
			rep, err := a.router.send(ctx, in, &routeReq{Op: "rows", DB: db})
			if err == nil {
				err = rep.error()
			}
			errs[i] = err
		})
	}
	a.writeRows(db)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return scanKeys(ctx, a.b.pool, `SELECT l.key, l.kind FROM `+a.b.table+` l WHERE l.db = $1 AND CASE WHEN `+heldByRowHolder+`
			THEN (l.deadline_ms IS NULL OR l.deadline_ms > $2 OR l.deadline_ms > `+pgNowMS+`)
			ELSE COALESCE(l.deadline_ms > `+pgNowMS+`, false) END`, db, nowMS())
}

// writeRows gives every lock of db this instance holds without a row its
// row now (deferred.go's writeRow, before its time), for a listing of the
// key space.
func (a *advisory) writeRows(db int) {
	type lease struct {
		k dbKey
		e *held
	}
	var due []lease
	for i := range a.b.stripes {
		st := &a.b.stripes[i]
		st.mu.Lock()
		for k, e := range st.owned {
			if k.db == db && e.deferred && !e.row {
				due = append(due, lease{k, e})
			}
		}
		st.mu.Unlock()
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, l := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a.writeRow(l.k, l.e)
		})
	}
	wg.Wait()
}

// dropFences implements strategy: the rows of db whose lock no session
// holds (fences of lost holder sessions) go.
func (a *advisory) dropFences(ctx context.Context, db int) error {
	_, err := a.b.pool.Exec(ctx, `DELETE FROM `+a.b.table+` l WHERE l.db = $1 AND NOT `+heldByRowHolder, db)
	return err
}

// unfenceAll implements strategy: the sessions that have ended no longer
// fence every key for their locks without rows.
func (a *advisory) unfenceAll(ctx context.Context) error {
	_, err := a.b.pool.Exec(ctx, `UPDATE `+a.b.cfg.Schema+`.sessions s SET rowless_until_ms = 0 WHERE `+markerGone)
	return err
}
