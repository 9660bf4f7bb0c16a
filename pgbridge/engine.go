package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy/backend"
)

// How an operation runs: its keys' stripes are locked, the strategy
// prepares the keys (takes their advisory locks or row locks) and hands
// over their states, the operation runs on an in-process scratch model
// (package memory, the reference semantics) loaded with those states, and
// the states it leaves are committed to PostgreSQL before the reply. The
// scratch holds a key only while its operation runs; the truth is in
// PostgreSQL (and, for the advisory strategy, in this process's leases).

// maxRounds bounds how often a script that touches keys it did not declare
// is rerun with those keys prepared too.
const maxRounds = 32

// errUnprepared aborts a script run that touched a key not prepared for it.
var errUnprepared = errors.New("pgbridge: key not prepared")

// write runs op over keys as one atomic operation and commits its effect.
// op gets the scratch KeySpace; its own result travels in its closure. A
// *heldError means some key is held beyond reach and op did not run.
func (b *Backend) write(ctx context.Context, keys []dbKey, op func(ks backend.KeySpace) error) error {
	keys = sortKeys(keys)
	for range maxRounds {
		missing, err := b.round(ctx, keys, op)
		if err != nil || len(missing) == 0 {
			return err
		}
		keys = sortKeys(append(keys, missing...))
	}
	return &backend.ReplyError{Reply: "ERR lockproxy: the script keeps touching keys it did not declare in KEYS"}
}

// round is one attempt of write; it returns the keys op touched that were
// not prepared (op's effect is then discarded).
func (b *Backend) round(ctx context.Context, keys []dbKey, op func(ks backend.KeySpace) error) ([]dbKey, error) {
	unlock := b.lockStripes(keys)
	defer unlock()
	var t tx
	err := b.retryRead(ctx, func() (err error) { // nothing is committed before the commit
		t, err = b.store.prepare(ctx, keys)
		return err
	})
	var h *heldError
	if errors.As(err, &h) {
		return nil, err
	}
	if err != nil {
		return nil, tryAgain(err)
	}
	before := t.before()
	after := make(map[dbKey]state, len(keys))
	var opErr error
	var missing []dbKey
	now := t.clock()
	b.scratchFor(keys).AtomicAt(now, func(ks backend.KeySpace) error {
		defer purge(ctx, ks, keys)
		load(ctx, ks, before, now)
		rec := &recorder{ks: ks, b: b, prepared: before}
		opErr = op(rec)
		missing = rec.missing
		if len(missing) == 0 {
			for _, k := range keys {
				after[k] = readState(ctx, ks, k, now)
			}
		}
		return nil
	})
	if len(missing) > 0 {
		t.rollback()
		return missing, nil
	}
	if err := t.commit(ctx, after); err != nil {
		return nil, tryAgain(err)
	}
	return nil, opErr
}

// scratchFor picks the scratch model of an operation over keys: any one
// serves, since a model holds only the keys of the operations running on
// it, and keys are never in two operations at once (their stripes).
func (b *Backend) scratchFor(keys []dbKey) *memory.Backend {
	if len(keys) == 0 {
		return b.scratch[0]
	}
	return b.scratch[maphash.String(b.seed, keys[0].key)%numScratch]
}

// load writes states into the scratch model.
func load(ctx context.Context, ks backend.KeySpace, states map[dbKey]state, now time.Time) {
	for k, s := range states {
		if !s.present || (s.deadline != 0 && s.deadline <= now.UnixMilli()) {
			continue
		}
		o := backend.SetOptions{Cond: backend.Always}
		if s.deadline != 0 {
			o.Expiry.At = time.UnixMilli(s.deadline)
		}
		ks.Set(ctx, k.db, k.key, s.token, o)
	}
}

func purge(ctx context.Context, ks backend.KeySpace, keys []dbKey) {
	for _, k := range keys {
		ks.Del(ctx, k.db, []string{k.key})
	}
}

// readState reads a key back from the scratch model.
func readState(ctx context.Context, ks backend.KeySpace, k dbKey, now time.Time) state {
	tok, ok, _ := ks.Get(ctx, k.db, k.key)
	if !ok {
		return state{}
	}
	s := state{present: true, token: append(make([]byte, 0, len(tok)), tok...)} // never nil: a nil []byte is SQL NULL
	if ms, _ := ks.PTTL(ctx, k.db, k.key); ms >= 0 {
		s.deadline = now.UnixMilli() + ms
	}
	return s
}

// live reports whether s is present and not expired at now (Unix ms).
func (s state) live(now int64) bool { return s.present && (s.deadline == 0 || s.deadline > now) }

// recorder is the scratch model as one operation sees it: it refuses keys
// that were not prepared and notes them, so that a script touching an
// undeclared key is rerun with that key prepared.
type recorder struct {
	ks       backend.KeySpace
	b        *Backend
	prepared map[dbKey]state
	missing  []dbKey
}

func (r *recorder) ok(db int, keys ...string) error {
	if err := checkDB(db); err != nil {
		return err
	}
	var err error
	for _, k := range keys {
		if _, ok := r.prepared[dbKey{db, k}]; !ok {
			r.missing = append(r.missing, dbKey{db, k})
			err = errUnprepared
		}
	}
	return err
}

func (r *recorder) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if err := r.ok(db, key); err != nil {
		return backend.SetResult{}, err
	}
	return r.ks.Set(ctx, db, key, token, o)
}

func (r *recorder) Get(ctx context.Context, db int, key string) ([]byte, bool, error) {
	if err := r.ok(db, key); err != nil {
		return nil, false, err
	}
	return r.ks.Get(ctx, db, key)
}

func (r *recorder) Del(ctx context.Context, db int, keys []string) (int64, error) {
	if err := r.ok(db, keys...); err != nil {
		return 0, err
	}
	return r.ks.Del(ctx, db, keys)
}

func (r *recorder) DelIf(ctx context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	if err := r.ok(db, key); err != nil {
		return false, err
	}
	return r.ks.DelIf(ctx, db, key, cond, match)
}

func (r *recorder) Exists(ctx context.Context, db int, keys []string) (int64, error) {
	if err := r.ok(db, keys...); err != nil {
		return 0, err
	}
	return r.ks.Exists(ctx, db, keys)
}

func (r *recorder) PTTL(ctx context.Context, db int, key string) (int64, error) {
	if err := r.ok(db, key); err != nil {
		return 0, err
	}
	return r.ks.PTTL(ctx, db, key)
}

func (r *recorder) Expire(ctx context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	if err := r.ok(db, key); err != nil {
		return false, err
	}
	return r.ks.Expire(ctx, db, key, e, cond)
}

func (r *recorder) Persist(ctx context.Context, db int, key string) (bool, error) {
	if err := r.ok(db, key); err != nil {
		return false, err
	}
	return r.ks.Persist(ctx, db, key)
}

func (r *recorder) MSet(ctx context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	keys := make([]string, len(pairs))
	for i, p := range pairs {
		keys[i] = p.Key
	}
	if err := r.ok(db, keys...); err != nil {
		return false, err
	}
	return r.ks.MSet(ctx, db, pairs, nx)
}

// DBSize inside a script counts the table's other live keys and the
// script's own keys as the scratch model has them now.
func (r *recorder) DBSize(ctx context.Context, db int) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var mine [][]byte
	var names []string
	for k := range r.prepared {
		if k.db == db {
			mine = append(mine, []byte(k.key))
			names = append(names, k.key)
		}
	}
	n, err := r.b.dbSize(ctx, db, mine)
	if err != nil {
		return 0, tryAgain(err)
	}
	live, err := r.ks.Exists(ctx, db, names)
	return n + live, err
}

// heldReply turns a *heldError into the client's error when the operation
// cannot be routed to the holder.
func heldReply(h *heldError) error {
	for _, in := range h.instances {
		if in != "" {
			return backend.Reply(fmt.Sprintf("TRYAGAIN postgres: key '%s' is held by another lockproxy instance and the operation could not be routed to it", h.keys[0].key))
		}
	}
	return backend.Reply(fmt.Sprintf("TRYAGAIN postgres: key '%s' is locked by a PostgreSQL session that is not a lockproxy holder", h.keys[0].key))
}
