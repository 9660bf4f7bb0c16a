package keycmd

import (
	"context"

	"github.com/lockproxy/lockproxy/backend"
)

// cmdDel is DEL and UNLINK (the same thing for string keys).
func cmdDel(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	n, err := ks.Del(ctx, db, keys(args[1:]))
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Int(n), nil
}

func cmdExists(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	n, err := ks.Exists(ctx, db, keys(args[1:]))
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Int(n), nil
}

func cmdDBSize(ctx context.Context, ks backend.KeySpace, db int, _ [][]byte) (backend.Value, error) {
	n, err := ks.DBSize(ctx, db)
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Int(n), nil
}

// cmdDelIfEq is Valkey 9's DELIFEQ key value: delete when the token equals
// value; 1 if deleted, else 0.
func cmdDelIfEq(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	ok, err := ks.DelIf(ctx, db, string(args[1]), backend.IfEqual, clone(args[2]))
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Bool(ok), nil
}

// cmdDelEx is Redis 8.4's DELEX key [IFEQ value | IFNE value]. Without a
// condition it deletes like DEL. As in Redis, a condition needs exactly one
// value (else the arity error), an absent key answers 0 before the
// condition is looked at, and an unknown condition is refused. The digest
// conditions (IFDEQ, IFDNE) are not supported and are refused the same way.
func cmdDelEx(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	key := string(args[1])
	if len(args) == 2 {
		n, err := ks.Del(ctx, db, []string{key})
		if err != nil {
			return backend.Value{}, err
		}
		return backend.Int(n), nil
	}
	if len(args) != 4 {
		return backend.Value{}, backend.Reply(backend.ErrWrongArgs("delex"))
	}
	var cond backend.Cond
	switch {
	case EqFold(args[2], "ifeq"):
		cond = backend.IfEqual
	case EqFold(args[2], "ifne"):
		cond = backend.IfNotEqual
	default:
		n, err := ks.Exists(ctx, db, []string{key})
		if err != nil || n == 0 {
			return backend.Int(0), err
		}
		return backend.Value{}, backend.Reply(backend.MsgInvalidCondition)
	}
	ok, err := ks.DelIf(ctx, db, key, cond, clone(args[3]))
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Bool(ok), nil
}
