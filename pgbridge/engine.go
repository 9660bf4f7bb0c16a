package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/luascripts"
)

// How an operation runs: its keys' stripes are locked, the strategy
// prepares the keys (takes their advisory locks or row locks) and hands
// over their states, the operation runs on a small model.Space loaded with
// those states (package model: the rules every backend follows) through a
// model.View that refuses keys not prepared, and the states it leaves are
// committed to PostgreSQL before the reply. The space lives for one round
// and holds only that operation's keys, so operations on different keys
// share nothing but the pool the spaces come from; the truth is in
// PostgreSQL (and, for the advisory strategy, in this process's leases).

// maxRounds bounds how often a script that touches keys it did not declare
// is rerun with those keys prepared too.
const maxRounds = 32

// errUnprepared aborts a script run that touched a key not prepared for it.
var errUnprepared = errors.New("pgbridge: key not prepared")

// spaces holds the model spaces of finished rounds, emptied, for reuse.
var spaces = sync.Pool{New: func() any { return new(model.Space) }}

// write runs op over keys as one atomic operation and commits its effect.
// op gets the round's KeySpace; its own result travels in its closure. A
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
	now := t.clock().UnixMilli()
	sp := spaces.Get().(*model.Space)
	defer func() {
		sp.Reset()
		spaces.Put(sp)
	}()
	if err := load(sp, before, now); err != nil {
		t.rollback()
		return nil, err
	}
	var fenceErr error
	sp.NewFence = func(db int, key string) uint64 { // a grant's fence comes from the database (fencing.go)
		f, err := t.newFence(ctx, dbKey{db, key})
		if err != nil {
			fenceErr = err
			return 0
		}
		return uint64(f)
	}
	var missing []dbKey
	opErr := op(&model.View{
		Now:    now,
		Spaces: []*model.Space{sp},
		Holder: backend.HolderOf(ctx),
		Admit: func(db int, key string) error { // a script touching an undeclared key reruns with it
			if _, ok := before[dbKey{db, key}]; !ok {
				missing = append(missing, dbKey{db, key})
				return errUnprepared
			}
			return nil
		},
		Outside: func(ctx context.Context, db int) (int64, error) { return b.others(ctx, db, before) },
	})
	if len(missing) > 0 {
		t.rollback()
		return missing, nil
	}
	if fenceErr != nil {
		t.rollback()
		return nil, tryAgain(fmt.Errorf("taking a fence: %w", fenceErr))
	}
	if errors.Is(opErr, luascripts.ErrStopped) {
		// A script lockproxy stopped (time or memory limit, the client
		// gone) leaves nothing: its writes are in the round's Space only.
		t.rollback()
		return nil, opErr
	}
	after := make(map[dbKey]state, len(keys))
	for _, k := range keys {
		after[k] = readState(sp, k, now)
	}
	if err := t.commit(ctx, after); err != nil {
		return nil, tryAgain(err)
	}
	return nil, opErr
}

// load writes the live states into the round's space. A value that does
// not decode (a row written by hand) is an error, not a value the model
// would answer from.
func load(sp *model.Space, states map[dbKey]state, now int64) error {
	for k, s := range states {
		switch {
		case !s.live(now):
		case s.kind == model.KindString:
			sp.Put(k.db, k.key, model.Entry{Token: s.token, Deadline: s.deadline})
			sp.SetFence(k.db, k.key, uint64(s.fencing))
			sp.SetGrant(k.db, k.key, s.grant)
		default:
			o, err := model.Decode(s.kind, s.token)
			if err != nil {
				return backend.Reply(fmt.Sprintf("ERR lockproxy: the lease row of key '%s' in database %d holds no value of kind %d (%v)", k.key, k.db, s.kind, err))
			}
			sp.PutObject(k.db, k.key, o, s.deadline)
			sp.SetFence(k.db, k.key, uint64(s.fencing))
			sp.SetGrant(k.db, k.key, s.grant)
		}
	}
	return nil
}

// readState reads a key back from the round's space.
func readState(sp *model.Space, k dbKey, now int64) state {
	e, o, ok := sp.Lookup(k.db, k.key, now)
	switch {
	case !ok:
		return state{}
	case o != nil:
		kind, data := model.Encode(o)
		return state{present: true, kind: kind, token: data, deadline: e.Deadline, fencing: int64(e.Fence), grant: backend.Grant{At: e.Granted, Holder: e.Holder}}
	}
	return state{present: true, token: append(make([]byte, 0, len(e.Token)), e.Token...), deadline: e.Deadline, fencing: int64(e.Fence),
		grant: backend.Grant{At: e.Granted, Holder: e.Holder}} // never nil: a nil []byte is SQL NULL
}

// live reports whether s is present and not expired at now (Unix ms).
func (s state) live(now int64) bool { return s.present && (s.deadline == 0 || s.deadline > now) }

// others counts, for DBSIZE inside a script, the live keys of db in the
// lease table other than the round's own (prepared) keys, which the
// round's space counts as the script has left them.
func (b *Backend) others(ctx context.Context, db int, prepared map[dbKey]state) (int64, error) {
	var mine [][]byte
	for k := range prepared {
		if k.db == db {
			mine = append(mine, []byte(k.key))
		}
	}
	n, err := b.dbSize(ctx, db, mine)
	if err != nil {
		return 0, tryAgain(err)
	}
	return n, nil
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
