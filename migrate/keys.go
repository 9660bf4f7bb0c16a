package migrate

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// Set implements backend.KeySpace. SET … NX (and SETNX) is an acquire:
// the legacy Redis first, then the inner backend, granted only when both
// grant. Every other SET acts on both and reports a write where either
// wrote.
func (b *Backend) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if o.Cond == backend.IfAbsent {
		return b.acquire(ctx, db, key, token, o)
	}
	lres, err := b.legacySetIf(ctx, db, key, token, o)
	if err != nil {
		return backend.SetResult{}, b.failed(err)
	}
	res, err := b.inner.Set(ctx, db, key, token, o)
	if err != nil {
		return res, err
	}
	res.Written = res.Written || lres.Written
	if !res.HadPrev && lres.HadPrev {
		res.HadPrev, res.Prev = true, lres.Prev
	}
	return res, nil
}

// acquire is SET … NX on both sides.
func (b *Backend) acquire(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	mine := []backend.KV{{Key: key, Value: token}}
	lres, err := b.legacySetNX(ctx, db, key, token, o)
	if err != nil {
		b.undoLegacy(ctx, db, mine) // the SET may have landed
		return backend.SetResult{}, b.failed(err)
	}
	if !lres.Written {
		b.st.refusedLegacy.Add(1)
		return lres, nil
	}
	res, err := b.inner.Set(ctx, db, key, token, o)
	if err != nil || !res.Written {
		b.undoLegacy(ctx, db, mine)
		if err == nil {
			b.st.refusedInner.Add(1)
		}
		return res, err
	}
	return res, nil
}

// failed counts a legacy failure and turns it into the client's TRYAGAIN;
// a WRONGTYPE the legacy Redis answered (to a command, or to a call in
// one of this package's scripts) is the client's reply, as Redis words it.
func (b *Backend) failed(err error) error {
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		return backend.Reply(backend.MsgWrongType)
	}
	b.st.legacyErrors.Add(1)
	return legacyFailed(err)
}

// Get implements backend.KeySpace: the inner backend's token, else the
// legacy Redis's.
func (b *Backend) Get(ctx context.Context, db int, key string) ([]byte, bool, error) {
	tok, ok, err := b.inner.Get(ctx, db, key)
	if err != nil || ok {
		return tok, ok, err
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	s, err := b.client(db).Get(lctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, b.failed(err)
	}
	return []byte(s), true, nil
}

// Del implements backend.KeySpace: each key is deleted on both sides and
// counted once when it was live on either.
func (b *Backend) Del(ctx context.Context, db int, keys []string) (int64, error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	v, err := delEachScript.Run(lctx, b.client(db), keys).Slice()
	if err != nil {
		return 0, b.failed(err)
	}
	gone := ints(v)
	var n int64
	for i, k := range keys {
		m, err := b.inner.Del(ctx, db, []string{k})
		if err != nil {
			return 0, err
		}
		if m > 0 || (i < len(gone) && gone[i] > 0) {
			n++
		}
	}
	return n, nil
}

// DelIf implements backend.KeySpace: the owner-checked delete runs on both
// sides and succeeds where the token matched.
func (b *Backend) DelIf(ctx context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	n, err := delCondScript.Run(lctx, b.client(db), []string{key}, condName(cond), match).Int64()
	if err != nil {
		return false, b.failed(err)
	}
	ok, err := b.inner.DelIf(ctx, db, key, cond, match)
	if err != nil {
		return false, err
	}
	return ok || n > 0, nil
}

// Exists implements backend.KeySpace: a key counts when it is live in the
// inner backend, or else in the legacy Redis.
func (b *Backend) Exists(ctx context.Context, db int, keys []string) (int64, error) {
	var n int64
	var missing []string
	for _, k := range keys {
		m, err := b.inner.Exists(ctx, db, []string{k})
		if err != nil {
			return 0, err
		}
		if m > 0 {
			n++
		} else {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return n, nil
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	m, err := b.client(db).Exists(lctx, missing...).Result()
	if err != nil {
		return 0, b.failed(err)
	}
	return n + m, nil
}

// PTTL implements backend.KeySpace: the inner backend's, else the legacy
// Redis's for a key the inner backend does not have.
func (b *Backend) PTTL(ctx context.Context, db int, key string) (int64, error) {
	ms, err := b.inner.PTTL(ctx, db, key)
	if err != nil || ms != -2 {
		return ms, err
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	ms, err = b.client(db).Do(lctx, "pttl", key).Int64()
	if err != nil {
		return 0, b.failed(err)
	}
	return ms, nil
}

// Expire implements backend.KeySpace: on both sides; true where either
// set it.
func (b *Backend) Expire(ctx context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	n, err := b.client(db).Do(lctx, expireArgs(key, e, cond)...).Int64()
	if err != nil {
		return false, b.failed(err)
	}
	ok, err := b.inner.Expire(ctx, db, key, e, cond)
	if err != nil {
		return false, err
	}
	return ok || n == 1, nil
}

// Persist implements backend.KeySpace: on both sides; true where either
// had an expiry.
func (b *Backend) Persist(ctx context.Context, db int, key string) (bool, error) {
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	n, err := b.client(db).Persist(lctx, key).Result()
	if err != nil {
		return false, b.failed(err)
	}
	ok, err := b.inner.Persist(ctx, db, key)
	if err != nil {
		return false, err
	}
	return ok || n, nil
}

// MSet implements backend.KeySpace. MSETNX is an acquire of all its keys
// (legacy first, undone there when the inner backend refuses); MSET
// writes both sides.
func (b *Backend) MSet(ctx context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	args := make([]any, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.Key, p.Value)
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	if !nx {
		if err := b.client(db).MSet(lctx, args...).Err(); err != nil {
			return false, b.failed(err)
		}
		return b.inner.MSet(ctx, db, pairs, false)
	}
	ok, err := b.client(db).MSetNX(lctx, args...).Result()
	if err != nil {
		b.undoLegacy(ctx, db, pairs)
		return false, b.failed(err)
	}
	if !ok {
		b.st.refusedLegacy.Add(1)
		return false, nil
	}
	ok, err = b.inner.MSet(ctx, db, pairs, true)
	if err != nil || !ok {
		b.undoLegacy(ctx, db, pairs)
		if err == nil {
			b.st.refusedInner.Add(1)
		}
		return false, err
	}
	return true, nil
}

// DBSize implements backend.KeySpace: the inner backend's count.
func (b *Backend) DBSize(ctx context.Context, db int) (int64, error) {
	return b.inner.DBSize(ctx, db)
}
