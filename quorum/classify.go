package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// scriptWatch is what a script call sends each node besides the script.
type scriptWatch uint8

const (
	// watchKeys: an MGET of the keys before and after the script and
	// each key's PTTL after it, to see the keys it created (undo, the
	// validity check) and the TTLs it left (the restart quarantine).
	watchKeys scriptWatch = iota
	// watchTTLs: each key's PTTL after the script. The script creates
	// nothing but may lengthen a TTL, which the restart quarantine must
	// know (an extend).
	watchTTLs
	// watchNone: the script alone. It creates nothing and sets no expiry
	// (a release, a read), or cannot write at all (EVAL_RO), or names no
	// key to watch.
	watchNone
	// watchValues: the script in a transaction with each key's DUMP and
	// expiry before and after it (values.go). It may write a value beyond
	// strings (a semaphore's sorted set, a hash lock), which it can change
	// without creating the key and which a read of strings cannot see.
	watchValues
)

// onNodes reports whether a script call of class cl (lock: Classes.Lock)
// keeps the lock path, where the nodes run it: an owner-checked release
// or extend, which creates nothing and changes only keys holding one of
// its ARGV, or an acquire that writes only tokens from its ARGV, by its
// shape. Everything else — counters, values of other types, reads, TIME,
// keyless scripts, whatever the classifier cannot vouch for — runs on the
// model (evalmodel.go). Classification is by what the script does, never
// by its text or SHA1 (luascripts/classify.go).
//
// Its cost: a cache hit is ~100ns, no allocation; the first call of a
// script with given numbers of KEYS and ARGV classifies it (a parse and
// up to 64 probe runs on the model, more for an acquire's token check;
// all probes together get 1s); each call of a Guarded script (node
// redlock's extend) runs it once on the model (~8µs). The event loops
// never pay that: they ask Classes.CachedLock, and a call it cannot
// answer is made as a blocking call, which classifies.
func onNodes(cl luascripts.Class, lock bool) bool {
	switch cl {
	case luascripts.Release, luascripts.Extend:
		return true
	case luascripts.Acquire:
		return lock
	}
	return false
}

// watchFor is how a script on the lock path is watched on the nodes.
func watchFor(c luascripts.Class) scriptWatch {
	switch {
	case c.WritesValues():
		// It may create a key and change one that exists (a semaphore's
		// ZADD beside the others' members, a reentrant HINCRBY).
		return watchValues
	case c.SetsNoExpiry():
		return watchNone
	case c.CreatesNothing():
		return watchTTLs
	}
	return watchKeys
}

// appendTTLs adds a PTTL of each key after the script (watchTTLs).
func appendTTLs(r *req, keys []string) *req {
	for _, k := range keys {
		r.cmds.Cmd(2)
		r.cmds.Arg("pttl")
		r.cmds.Arg(k)
	}
	return r
}

// longestTTL is the longest TTL the nodes reported after a watchTTLs
// script (its reply first, then one PTTL per key).
func longestTTL(replies []nodeReply, keys []string) time.Duration {
	var longest time.Duration
	for _, r := range replies {
		if r.err != nil || len(r.vals) != 1+len(keys) {
			continue
		}
		for _, v := range r.vals[1:] {
			if v.Kind == backend.KindInt && v.Int > 0 {
				longest = max(longest, time.Duration(v.Int)*time.Millisecond)
			}
		}
	}
	return longest
}
