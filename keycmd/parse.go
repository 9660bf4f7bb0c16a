package keycmd

import (
	"math"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

var (
	errSyntax     = backend.Reply(backend.MsgSyntax)
	errNotInteger = backend.Reply(backend.MsgNotInteger)
)

// intArg parses an integer argument or returns Redis's "not an integer"
// reply.
func intArg(b []byte) (int64, error) {
	n, ok := backend.ParseInt(b)
	if !ok {
		return 0, errNotInteger
	}
	return n, nil
}

// EqFold reports whether b equals the lower-case ASCII word w, ignoring
// case, without converting b (SET's options, and the proxy's counters of
// them, read it this way).
func EqFold(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

// expiryUnit says how an expire argument counts and from when.
type expiryUnit uint8

const (
	relSeconds expiryUnit = iota // EX, SETEX, EXPIRE
	relMillis                    // PX, PSETEX, PEXPIRE
	absSeconds                   // EXAT, EXPIREAT
	absMillis                    // PXAT, PEXPIREAT
)

// setExpiry converts the expire argument of SET, SETEX or PSETEX, with
// Redis 7's checks: not an integer, not positive, or overflowing once in
// absolute milliseconds is an error naming cmd.
func setExpiry(cmd string, arg []byte, u expiryUnit) (backend.Expiry, error) {
	n, err := intArg(arg)
	if err != nil {
		return backend.Expiry{}, err
	}
	if n <= 0 || ((u == relSeconds || u == absSeconds) && n > math.MaxInt64/1000) {
		return backend.Expiry{}, backend.Reply(backend.ErrInvalidExpire(cmd))
	}
	if u == relSeconds || u == absSeconds {
		n *= 1000
	}
	if u == relSeconds || u == relMillis {
		if n <= math.MaxInt64/int64(time.Millisecond) {
			// A TTL (relative): the backend measures it on its own clock,
			// and no clock today is near the overflow below.
			return relative(n, time.Time{}), nil
		}
		now := time.Now()
		if n > math.MaxInt64-now.UnixMilli() {
			return backend.Expiry{}, backend.Reply(backend.ErrInvalidExpire(cmd))
		}
		return relative(n, now), nil
	}
	return backend.Expiry{At: time.UnixMilli(n)}, nil
}

// relative is an expiry ms milliseconds from now. It stays relative (TTL)
// where a Duration can hold it, so backends measure it on their own clock.
// An expiry of 0 or less is a deadline already past on every clock: a
// backend whose clock for the operation lags this process's (a script's
// stopped clock, a transaction's start) must still delete at once.
func relative(ms int64, now time.Time) backend.Expiry {
	switch {
	case ms <= 0:
		return backend.Expiry{At: time.UnixMilli(1)}
	case ms <= math.MaxInt64/int64(time.Millisecond):
		return backend.Expiry{TTL: time.Duration(ms) * time.Millisecond}
	}
	return backend.Expiry{At: time.UnixMilli(now.UnixMilli() + ms)}
}
