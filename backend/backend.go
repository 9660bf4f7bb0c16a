package backend

import (
	"context"
	"time"
)

// Databases is the number of databases a key space has (0 to 15), as in
// Redis's default configuration: SELECT chooses among them.
const Databases = 16

// FenceToken is the value a fenced key shows (GET, LOCKPROXY LOCK): a lock
// whose holder was lost while its lease ran, held by no client until its
// TTL ends (docs/postgres.md). The operator's listings show such a key as
// fenced until then.
const FenceToken = "lockproxy:lost-lease"

// Backend stores keys that each hold one token and an optional expiry
// (docs/architecture.md), in numbered databases as selected with SELECT.
//
// All methods are safe for concurrent use. ctx carries the command's
// deadline: a Backend returns by then, and never reports an outcome it has
// not established. "Did not happen" (NX on a held key, an owner check that
// failed) is a result, never an error; "could not tell" is an error, never a
// result (no false OK, no false nil).
type Backend interface {
	KeySpace
	// Eval runs a Lua script atomically over its keys (EVAL, EVALSHA and
	// their _RO forms; ro forbids writes). s.Src is always set: the proxy
	// owns the script cache and answers NOSCRIPT itself.
	Eval(ctx context.Context, db int, s Script, keys []string, args [][]byte, ro bool) (Value, error)
	// Close releases the backend's resources and stops its goroutines.
	Close(ctx context.Context) error
}

// KeySpace is the data half of a Backend: the operations the key commands
// (package keycmd) are made of. A backend also implements it on the view a
// running script sees, whose methods then run inside the script's atomic
// section.
type KeySpace interface {
	// Set writes token to key under the conditions of o (SET and SETNX).
	Set(ctx context.Context, db int, key string, token []byte, o SetOptions) (SetResult, error)
	// Get returns the token of a live key; ok is false for an absent or
	// expired key.
	Get(ctx context.Context, db int, key string) (token []byte, ok bool, err error)
	// Del removes the keys and counts those that were live (DEL, UNLINK).
	Del(ctx context.Context, db int, keys []string) (int64, error)
	// DelIf removes key when its token compares as cond (IfEqual or
	// IfNotEqual) against match, and reports whether it did (DELEX, DELIFEQ).
	DelIf(ctx context.Context, db int, key string, cond Cond, match []byte) (bool, error)
	// Exists counts the live keys among keys; a key named twice counts twice.
	Exists(ctx context.Context, db int, keys []string) (int64, error)
	// PTTL returns the remaining time to live in milliseconds, -2 for an
	// absent key and -1 for a key without expiry, as Redis does.
	PTTL(ctx context.Context, db int, key string) (int64, error)
	// Expire sets a live key's expiry under cond and reports whether it was
	// set. An expiry in the past deletes the key (and reports true).
	Expire(ctx context.Context, db int, key string, e Expiry, cond ExpireCond) (bool, error)
	// Persist removes a live key's expiry and reports whether it had one.
	Persist(ctx context.Context, db int, key string) (bool, error)
	// MSet writes all pairs at once (MSET). With nx it writes them only if
	// none of the keys is live and reports whether it did (MSETNX).
	MSet(ctx context.Context, db int, pairs []KV, nx bool) (bool, error)
	// DBSize counts the live keys of db.
	DBSize(ctx context.Context, db int) (int64, error)
	// Do runs one of the commands package keycmd hands over whole (its
	// Command.Typed): the value types beyond strings (hashes, sets, lists,
	// sorted sets), counters, TYPE, and the commands on the key space as a
	// whole (KEYS, SCAN, FLUSHDB, RENAME, COPY …). args[0] is the name in
	// any letter case, keys the keys it names; the arity is checked. It
	// answers as Redis 7.0 does (package model holds the rules), WRONGTYPE
	// and syntax errors as *ReplyError. A backend that does not serve a
	// command yet refuses it with a *ReplyError saying so.
	Do(ctx context.Context, db int, keys []string, args [][]byte) (Value, error)
}

// Checker is implemented by a Backend that can tell whether it is able to
// serve right now (a quorum of nodes, a reachable database). The proxy
// asserts it for /readyz; a Backend without it is always ready.
type Checker interface {
	Check(ctx context.Context) error
}

// Immediate is implemented by a Backend whose operations never wait on
// anything but a script's own run, which luascripts bounds (the memory
// backend): the proxy then arms no command deadline for them.
type Immediate interface {
	Immediate()
}

// Hub is one instance's pub/sub subscribers (the proxy's broker).
type Hub interface {
	// Receivers counts the subscribers a message on channel reaches now:
	// what PUBLISH answers.
	Receivers(channel []byte) int64
	// Deliver hands a message to them and returns how many received it.
	Deliver(channel, msg []byte) int64
	// Rewake hands the subscribers of each channel the last messages
	// delivered on it again: a backend calls it when a link over which
	// messages may have been lost (a LISTEN session, a node's
	// subscription) is back, so that a waiter whose wake-up was lost
	// looks again (docs/pubsub.md).
	Rewake()
}

// Publisher is implemented by a Backend that delivers messages into the
// instance's Hub, which the proxy gives it before serving: those of its
// scripts that PUBLISH, once the script's changes are committed (so a
// waiter woken by one never finds the old state), and those other
// instances publish (Bus). A backend whose scripts cannot deliver their
// messages refuses scripts that publish.
type Publisher interface {
	SetHub(h Hub)
}

// Bus is implemented by a Backend that carries pub/sub messages between
// the lockproxy instances sharing it. Publish hands a message to the other
// instances, each of which delivers it to its Hub; this instance's own
// subscribers get it from the proxy. An error means it may not have
// reached them.
type Bus interface {
	Publish(ctx context.Context, channel, msg []byte) error
}

// Expiry is an absolute or relative expiry; the zero Expiry means none.
// The proxy converts EX to TTL and EXAT/PXAT to At. TTL is positive when
// set; At may lie in the past (the write then deletes or never creates).
type Expiry struct {
	TTL time.Duration
	At  time.Time
}

// IsZero reports whether e sets no expiry.
func (e Expiry) IsZero() bool { return e.TTL == 0 && e.At.IsZero() }

// Deadline returns the absolute expiry time of e for a write made at now.
func (e Expiry) Deadline(now time.Time) time.Time {
	if !e.At.IsZero() {
		return e.At
	}
	return now.Add(e.TTL)
}

// Cond is the condition of a SET or DELEX on the key's current token.
type Cond uint8

const (
	Always     Cond = iota // plain SET
	IfAbsent               // NX
	IfPresent              // XX
	IfEqual                // IFEQ match: the key exists and its token equals match
	IfNotEqual             // IFNE match: the key is absent or its token differs
)

// SetOptions are the options of one SET.
type SetOptions struct {
	Cond    Cond
	Match   []byte // the value IfEqual and IfNotEqual compare with
	Expiry  Expiry // zero: none (the key loses any expiry it had, unless KeepTTL)
	KeepTTL bool
	Get     bool // the caller wants the previous token (SET … GET)
}

// SetResult is the outcome of a Set. Not writing because of the condition
// is a result, never an error.
type SetResult struct {
	Written bool
	HadPrev bool   // the key was live before the command (reported when Get was asked)
	Prev    []byte // its token
}

// ExpireCond is the condition option of EXPIRE and PEXPIRE.
type ExpireCond uint8

const (
	ExpireAlways ExpireCond = iota
	ExpireNX                // only when the key has no expiry
	ExpireXX                // only when the key has an expiry
	ExpireGT                // only when the new expiry is later (no expiry counts as infinite)
	ExpireLT                // only when the new expiry is sooner (no expiry counts as infinite)
	ExpireLTXX              // LT and XX together: only when the key has an expiry and the new one is sooner
)

// Options returns the options of EXPIRE and PEXPIRE that state c, as
// Redis spells them (none for ExpireAlways), for a backend that sends the
// command on.
func (c ExpireCond) Options() []string {
	switch c {
	case ExpireNX:
		return []string{"nx"}
	case ExpireXX:
		return []string{"xx"}
	case ExpireGT:
		return []string{"gt"}
	case ExpireLT:
		return []string{"lt"}
	case ExpireLTXX:
		return []string{"xx", "lt"}
	}
	return nil
}

// KV is one key and token of an MSET.
type KV struct {
	Key   string
	Value []byte
}

// Script is a Lua script by source and SHA1 (lower-case hex of Src).
//
// With Function set, Src is a Redis 7 function library (FUNCTION LOAD's
// code, "#!lua name=…" line included) and running the Script calls the
// function of that name the library registers (FCALL), with KEYS and
// ARGV as its arguments: a backend runs it as it runs any script
// (luascripts.Runner knows the difference).
type Script struct {
	SHA1     string
	Src      string
	Function string
}
