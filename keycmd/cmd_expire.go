package keycmd

import (
	"context"
	"math"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// cmdExpire is EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT key t [NX|XX|GT|LT],
// with Redis 7's order of checks: options first, then the integer, then
// overflow. A time in the past deletes the key (and answers 1).
func cmdExpire(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	cmd := name(args)
	var nx, xx, gt, lt bool
	for _, opt := range args[3:] {
		switch {
		case EqFold(opt, "nx"):
			nx = true
		case EqFold(opt, "xx"):
			xx = true
		case EqFold(opt, "gt"):
			gt = true
		case EqFold(opt, "lt"):
			lt = true
		default:
			return backend.Value{}, backend.Reply(backend.ErrUnsupportedOption(string(opt)))
		}
	}
	if nx && (xx || gt || lt) {
		return backend.Value{}, backend.Reply(backend.MsgExpireNXXX)
	}
	if gt && lt {
		return backend.Value{}, backend.Reply(backend.MsgExpireGTLT)
	}
	// Redis applies the flags one after the other; XX with GT or LT is
	// their conjunction, and GT and LT imply XX-like refusals of their own.
	cond := backend.ExpireAlways
	switch {
	case nx:
		cond = backend.ExpireNX
	case gt:
		cond = backend.ExpireGT
	case lt && xx:
		cond = backend.ExpireLTXX
	case lt:
		cond = backend.ExpireLT
	case xx:
		cond = backend.ExpireXX
	}

	n, err := intArg(args[2])
	if err != nil {
		return backend.Value{}, err
	}
	seconds := cmd == "expire" || cmd == "expireat"
	if seconds {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return backend.Value{}, backend.Reply(backend.ErrInvalidExpire(cmd))
		}
		n *= 1000
	}
	now := time.Now()
	var e backend.Expiry
	if cmd == "expireat" || cmd == "pexpireat" {
		e = backend.Expiry{At: time.UnixMilli(n)}
	} else {
		if n > math.MaxInt64-now.UnixMilli() {
			return backend.Value{}, backend.Reply(backend.ErrInvalidExpire(cmd))
		}
		e = relative(n, now)
	}
	ok, err := ks.Expire(ctx, db, string(args[1]), e, cond)
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Bool(ok), nil
}

// cmdTTL is TTL and PTTL.
func cmdTTL(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	ms, err := ks.PTTL(ctx, db, string(args[1]))
	if err != nil {
		return backend.Value{}, err
	}
	if ms >= 0 && name(args) == "ttl" {
		ms = (ms + 500) / 1000
	}
	return backend.Int(ms), nil
}

func cmdPersist(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	ok, err := ks.Persist(ctx, db, string(args[1]))
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Bool(ok), nil
}
