package keycmd

import (
	"context"

	"github.com/lockproxy/lockproxy/backend"
)

func cmdGet(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	tok, ok, err := ks.Get(ctx, db, string(args[1]))
	if err != nil || !ok {
		return backend.NilValue, err
	}
	return backend.Bulk(tok), nil
}

// SET option flags, as Redis's parseExtendedStringArgumentsOrReply keeps
// them: an option is accepted only when no option it conflicts with came
// before it; anything else is a syntax error.
const (
	setNX = 1 << iota
	setXX
	setIFEQ
	setIFNE
	setGET
	setKEEPTTL
	setEX
	setPX
	setEXAT
	setPXAT

	setConds   = setNX | setXX | setIFEQ | setIFNE
	setExpires = setKEEPTTL | setEX | setPX | setEXAT | setPXAT
)

// setOpts is one parsed SET: its options and, when one was given, the
// expire argument still to be checked.
type setOpts struct {
	flags  int
	match  []byte
	expire []byte
}

// parseSet parses SET's options (args[3:]) in any order and letter case.
func parseSet(args [][]byte) (setOpts, error) {
	var o setOpts
	for j := 3; j < len(args); j++ {
		opt := args[j]
		hasNext := j+1 < len(args)
		// cond is the flag opt sets when it is the condition option c:
		// refused if a different condition came first.
		cond := func(c int) bool { return o.flags&(setConds&^c) == 0 }
		exp := func(e int) bool { return o.flags&(setExpires&^e) == 0 && hasNext }
		switch {
		case EqFold(opt, "nx") && cond(setNX):
			o.flags |= setNX
		case EqFold(opt, "xx") && cond(setXX):
			o.flags |= setXX
		case EqFold(opt, "ifeq") && cond(setIFEQ) && hasNext:
			o.flags |= setIFEQ
			o.match = args[j+1]
			j++
		case EqFold(opt, "ifne") && cond(setIFNE) && hasNext:
			o.flags |= setIFNE
			o.match = args[j+1]
			j++
		case EqFold(opt, "get"):
			o.flags |= setGET
		case EqFold(opt, "keepttl") && o.flags&(setExpires&^setKEEPTTL) == 0:
			o.flags |= setKEEPTTL
		case expireFlag(opt) != 0 && exp(expireFlag(opt)):
			o.flags |= expireFlag(opt)
			o.expire = args[j+1]
			j++
		default:
			return setOpts{}, errSyntax
		}
	}
	return o, nil
}

// expireFlag returns the flag of the expire option opt (EX, PX, EXAT,
// PXAT), or 0.
func expireFlag(opt []byte) int {
	switch {
	case EqFold(opt, "ex"):
		return setEX
	case EqFold(opt, "px"):
		return setPX
	case EqFold(opt, "exat"):
		return setEXAT
	case EqFold(opt, "pxat"):
		return setPXAT
	}
	return 0
}

// expireUnit returns the unit of the expire option among flags.
func expireUnit(flags int) expiryUnit {
	switch {
	case flags&setPX != 0:
		return relMillis
	case flags&setEXAT != 0:
		return absSeconds
	case flags&setPXAT != 0:
		return absMillis
	}
	return relSeconds
}

func cmdSet(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	o, err := parseSet(args)
	if err != nil {
		return backend.Value{}, err
	}
	so := backend.SetOptions{KeepTTL: o.flags&setKEEPTTL != 0, Get: o.flags&setGET != 0}
	switch {
	case o.flags&setNX != 0:
		so.Cond = backend.IfAbsent
	case o.flags&setXX != 0:
		so.Cond = backend.IfPresent
	case o.flags&setIFEQ != 0:
		so.Cond, so.Match = backend.IfEqual, clone(o.match)
	case o.flags&setIFNE != 0:
		so.Cond, so.Match = backend.IfNotEqual, clone(o.match)
	}
	if o.expire != nil {
		if so.Expiry, err = setExpiry("set", o.expire, expireUnit(o.flags)); err != nil {
			return backend.Value{}, err
		}
	}
	res, err := ks.Set(ctx, db, string(args[1]), clone(args[2]), so)
	if err != nil {
		return backend.Value{}, err
	}
	switch {
	case so.Get && res.HadPrev:
		return backend.Bulk(res.Prev), nil
	case so.Get, !res.Written:
		return backend.NilValue, nil
	}
	return backend.OKValue, nil
}

func cmdSetNX(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	res, err := ks.Set(ctx, db, string(args[1]), clone(args[2]), backend.SetOptions{Cond: backend.IfAbsent})
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Bool(res.Written), nil
}

// cmdSetEX is SETEX key seconds value and PSETEX key milliseconds value.
func cmdSetEX(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	cmd, unit := name(args), relSeconds
	if cmd == "psetex" {
		unit = relMillis
	}
	e, err := setExpiry(cmd, args[2], unit)
	if err != nil {
		return backend.Value{}, err
	}
	if _, err := ks.Set(ctx, db, string(args[1]), clone(args[3]), backend.SetOptions{Expiry: e}); err != nil {
		return backend.Value{}, err
	}
	return backend.OKValue, nil
}

func cmdGetDel(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	// A conditional delete on the token just read keeps GET+DEL one atomic
	// step without a GETDEL of its own in KeySpace: retry if the token
	// changed in between.
	key := string(args[1])
	for {
		tok, ok, err := ks.Get(ctx, db, key)
		if err != nil || !ok {
			return backend.NilValue, err
		}
		deleted, err := ks.DelIf(ctx, db, key, backend.IfEqual, tok)
		if err != nil {
			return backend.Value{}, err
		}
		if deleted {
			return backend.Bulk(tok), nil
		}
		if err := ctx.Err(); err != nil {
			return backend.Value{}, err
		}
	}
}

func cmdMGet(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	out := make([]backend.Value, len(args)-1)
	for i, k := range args[1:] {
		tok, ok, err := ks.Get(ctx, db, string(k))
		switch {
		case backend.IsWrongType(err):
			// MGET answers nil for a key of another type
		case err != nil:
			return backend.Value{}, err
		case ok:
			out[i] = backend.Bulk(tok)
		}
	}
	return backend.Array(out...), nil
}

// cmdMSet is MSET and MSETNX.
func cmdMSet(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	cmd := name(args)
	if len(args)%2 == 0 {
		return backend.Value{}, backend.Reply(backend.ErrWrongArgs(cmd))
	}
	pairs := make([]backend.KV, 0, len(args)/2)
	for i := 1; i < len(args); i += 2 {
		pairs = append(pairs, backend.KV{Key: string(args[i]), Value: clone(args[i+1])})
	}
	nx := cmd == "msetnx"
	done, err := ks.MSet(ctx, db, pairs, nx)
	if err != nil {
		return backend.Value{}, err
	}
	if nx {
		return backend.Bool(done), nil
	}
	return backend.OKValue, nil
}

func cmdGetRange(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	start, err := intArg(args[2])
	if err != nil {
		return backend.Value{}, err
	}
	end, err := intArg(args[3])
	if err != nil {
		return backend.Value{}, err
	}
	tok, ok, err := ks.Get(ctx, db, string(args[1]))
	if err != nil {
		return backend.Value{}, err
	}
	empty := backend.Bulk([]byte{})
	if !ok || (start < 0 && end < 0 && start > end) {
		return empty, nil
	}
	n := int64(len(tok))
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start, end = max(start, 0), max(end, 0)
	if end >= n {
		end = n - 1
	}
	if start > end || n == 0 {
		return empty, nil
	}
	return backend.Bulk(tok[start : end+1]), nil
}

func cmdStrLen(ctx context.Context, ks backend.KeySpace, db int, args [][]byte) (backend.Value, error) {
	tok, _, err := ks.Get(ctx, db, string(args[1]))
	if err != nil {
		return backend.Value{}, err
	}
	return backend.Int(int64(len(tok))), nil
}
