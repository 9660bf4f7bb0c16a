package model

import (
	"context"
	"fmt"

	"github.com/lockproxy/lockproxy/backend"
)

// View is a backend.KeySpace over one or several Spaces at a stopped clock:
// what a script's redis.call and a multi-key command run on. The caller
// excludes everyone else from the Spaces while the View is in use, and
// sets the fields before the first call.
type View struct {
	// Now is the clock, stopped: Unix milliseconds by which every call
	// judges expiry and counts relative expiries.
	Now int64
	// Spaces are the spaces the View covers; DBSize counts them all.
	Spaces []*Space
	// Pick returns the space that holds key, one of Spaces. nil: Spaces[0].
	Pick func(key string) *Space
	// Admit, when set, is asked about every key a call names before the
	// call touches any: a non-nil error refuses the key, and the call
	// returns the first such error having asked about all its keys (so a
	// caller can note every key it did not prepare) and changes nothing.
	Admit func(db int, key string) error
	// Outside, when set, counts the live keys of db that are not in the
	// Spaces, for DBSize (pgbridge: the lease table's other rows).
	Outside func(ctx context.Context, db int) (int64, error)
	// Holder is who the grants made through the View go to
	// (Space.Holder): the caller's client, nil when unknown.
	Holder *backend.Holder
	// Journal, when set, keeps what the View's writes replace, so that
	// the caller can Undo them (journal.go).
	Journal *Journal
}

var _ backend.KeySpace = (*View)(nil)

func (v *View) space(key string) *Space {
	sp := v.Spaces[0]
	if v.Pick != nil {
		sp = v.Pick(key)
	}
	sp.Holder = v.Holder
	return sp
}

// checkDB reports a database number outside [0, backend.Databases).
func checkDB(db int) error {
	if db < 0 || db >= backend.Databases {
		return fmt.Errorf("model: database %d out of range", db)
	}
	return nil
}

// admit checks db and asks Admit about each key.
func (v *View) admit(db int, keys ...string) error {
	if err := checkDB(db); err != nil {
		return err
	}
	if v.Admit == nil {
		return nil
	}
	var first error
	for _, k := range keys {
		if err := v.Admit(db, k); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Set implements backend.KeySpace.
func (v *View) Set(_ context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if err := v.admit(db, key); err != nil {
		return backend.SetResult{}, err
	}
	v.save(db, key)
	return v.space(key).Set(db, key, token, o, v.Now)
}

// Get implements backend.KeySpace.
func (v *View) Get(_ context.Context, db int, key string) ([]byte, bool, error) {
	if err := v.admit(db, key); err != nil {
		return nil, false, err
	}
	e, ok := v.space(key).Get(db, key, v.Now)
	if ok && !e.IsString() {
		return nil, false, backend.ErrWrongType
	}
	return e.Token, ok, nil
}

// Del implements backend.KeySpace.
func (v *View) Del(_ context.Context, db int, keys []string) (int64, error) {
	if err := v.admit(db, keys...); err != nil {
		return 0, err
	}
	v.save(db, keys...)
	var n int64
	for _, k := range keys {
		if v.space(k).Del(db, k, v.Now) {
			n++
		}
	}
	return n, nil
}

// DelIf implements backend.KeySpace.
func (v *View) DelIf(_ context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	if err := v.admit(db, key); err != nil {
		return false, err
	}
	v.save(db, key)
	return v.space(key).DelIf(db, key, cond, match, v.Now)
}

// Exists implements backend.KeySpace.
func (v *View) Exists(_ context.Context, db int, keys []string) (int64, error) {
	if err := v.admit(db, keys...); err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		if _, ok := v.space(k).Get(db, k, v.Now); ok {
			n++
		}
	}
	return n, nil
}

// PTTL implements backend.KeySpace.
func (v *View) PTTL(_ context.Context, db int, key string) (int64, error) {
	if err := v.admit(db, key); err != nil {
		return 0, err
	}
	return v.space(key).PTTL(db, key, v.Now), nil
}

// Expire implements backend.KeySpace.
func (v *View) Expire(_ context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	if err := v.admit(db, key); err != nil {
		return false, err
	}
	v.save(db, key)
	return v.space(key).Expire(db, key, e, cond, v.Now), nil
}

// Persist implements backend.KeySpace.
func (v *View) Persist(_ context.Context, db int, key string) (bool, error) {
	if err := v.admit(db, key); err != nil {
		return false, err
	}
	v.save(db, key)
	return v.space(key).Persist(db, key, v.Now), nil
}

// MSet implements backend.KeySpace.
func (v *View) MSet(_ context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	if v.Admit != nil {
		keys := make([]string, len(pairs))
		for i, p := range pairs {
			keys[i] = p.Key
		}
		if err := v.admit(db, keys...); err != nil {
			return false, err
		}
	}
	if nx {
		for _, p := range pairs {
			if _, ok := v.space(p.Key).Get(db, p.Key, v.Now); ok {
				return false, nil
			}
		}
	}
	for _, p := range pairs {
		v.save(db, p.Key)
	}
	for _, p := range pairs {
		v.space(p.Key).Put(db, p.Key, Entry{Token: p.Value})
	}
	return true, nil
}

// DBSize implements backend.KeySpace: the live keys of db in the Spaces,
// plus those Outside counts.
func (v *View) DBSize(ctx context.Context, db int) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var n int64
	if v.Outside != nil {
		var err error
		if n, err = v.Outside(ctx, db); err != nil {
			return 0, err
		}
	}
	for _, s := range v.Spaces {
		n += s.Count(db, v.Now)
	}
	return n, nil
}
