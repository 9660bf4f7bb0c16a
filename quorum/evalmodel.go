package quorum

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
)

// A client's script on the quorum backend runs once, in lockproxy, on the
// model (SPEC §3, docs/quorum.md "What runs where"), in rounds:
//
//  1. read: its keys' stripes are held (this instance's other operations
//     on them wait), and one readScript call per node leases the keys
//     there and reads their states (snapshot.go); Q nodes agreeing on
//     every key make the snapshot, else TRYAGAIN before anything is
//     written. A node another instance's operation has leased takes no
//     part (it may hold a write about to be put back);
//  2. run: the script runs in luascripts' sandbox (the Runner memory and
//     postgres use: the same time limit and libraries) on a model.Space
//     loaded with the snapshot, at one stopped clock. A key it reaches
//     that was not read (named in ARGV, after a SELECT) stops the run:
//     nothing is written, and the round starts again with that key read
//     too;
//  3. commit: when it changed something, each node that was read gets
//     one applyScript call (commit.go) that writes the changed keys' new
//     states only while it holds the lease and every key read still has
//     the check value read there. Q nodes that showed the snapshot's
//     state applying make the script's reply the client's;
//  4. put back: with fewer, every node that applied gets applyScript
//     again, back to what it showed before, only while it still holds
//     what the commit wrote; a commit that lost to another writer, and a
//     read that found the keys leased, run again after a short pause, a
//     few times, and then the client gets TRYAGAIN — which means the
//     script had no effect;
//  5. release: the leases end, off the client's path after a success,
//     with the put-backs after a failure. A node that could not be
//     written (it refused, or was leased) is brought level by a resync.
//
// A script that changed nothing costs one round trip (the read); one that
// wrote costs two (and a release call per node after the reply). Leases
// keep two instances' operations on a key from overlapping on a majority,
// and the check values keep any other writer's change from being written
// over. A node that holds an older state (it missed a commit) is brought
// up to date by the next commit, which writes the whole state of each key
// it changes over whatever that node showed, without counting it.

// modelRounds bounds the rounds of one script: each key it reaches at run
// time that was not read costs a round.
const modelRounds = 16

// commitAttempts bounds how often a script whose commit lost to another
// writer is run again.
const commitAttempts = 8

// errUnread aborts a run that reached a key not read for it.
var errUnread = errors.New("quorum: key not read")

// modelOutcome is one round's end: the script's reply, keys it reached
// that were not read (the round is discarded), or a lost commit (put
// back; the script may run again).
type modelOutcome struct {
	v       backend.Value
	err     error
	missing []dbKey
	lost    bool
}

// modelRun is what a round runs on the model: a client's script, or one
// typed command (modelCommand), through c.
type modelRun func(ctx context.Context, c *keycmd.ScriptCaller) (backend.Value, error)

// evalModel runs a client's script on the model (the top of this file).
func (b *Backend) evalModel(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	return b.onModel(ctx, db, keys, ro, func(ctx context.Context, c *keycmd.ScriptCaller) (backend.Value, error) {
		return b.runner.Run(ctx, s, keys, args, c)
	})
}

// modelCommand runs one typed write on the model, as a script of that
// one command would run (typed.go: modelWrites).
func (b *Backend) modelCommand(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	kc := keycmd.Lookup(args[0])
	return b.onModel(ctx, db, keys, false, func(ctx context.Context, c *keycmd.ScriptCaller) (backend.Value, error) {
		return kc.Exec(ctx, c.KS, db, args)
	})
}

// onModel runs run on the model in rounds over keys and the keys it
// reaches (the top of this file).
func (b *Backend) onModel(ctx context.Context, db int, keys []string, ro bool, run modelRun) (backend.Value, error) {
	read := make([]dbKey, 0, len(keys))
	for _, k := range keys {
		if dk := (dbKey{db, k}); !slices.Contains(read, dk) {
			read = append(read, dk)
		}
	}
	// A lost round (another writer, another instance's leases) runs
	// again after a short random pause: commitAttempts times, or, under a
	// command deadline, as long as it leaves room, so that two instances'
	// contended scripts take turns instead of answering TRYAGAIN to a
	// client that does not retry (node-redisson across instances).
	deadline, _ := ctx.Deadline()
	attempts, rounds := 0, 0
	for {
		out := b.modelRound(ctx, db, run, ro, read)
		switch {
		case len(out.missing) > 0:
			if rounds++; rounds >= modelRounds {
				return backend.Value{}, backend.Reply("ERR lockproxy: the script keeps reaching keys it did not name in KEYS")
			}
			read = append(read, out.missing...)
			continue
		case out.lost && ctx.Err() == nil && (attempts+1 < commitAttempts || !deadline.IsZero() && !deadlineNear(deadline)):
			attempts++
			select {
			case <-time.After(splitPause(attempts)):
			case <-ctx.Done():
				return out.v, out.err
			}
			continue
		}
		if out.err == nil && out.v.Kind == backend.KindError {
			return backend.Value{}, backend.Reply(string(out.v.Str)) // as the lock path answers one (keysOutcome)
		}
		return out.v, out.err
	}
}

// scriptSpace is the KeySpace a script runs on: the round's model View;
// a command on the whole key space is refused, as on postgres. It notes
// the keys whose expiry the script last set as an absolute time
// (PEXPIREAT, EXAT …): the commit writes those as that time, as Redis
// keeps it, and the others relative to the run's clock.
type scriptSpace struct {
	*model.View
	abs map[dbKey]bool
}

func (s scriptSpace) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	name := string(lowerASCII(args[0]))
	if keycmd.WholeKeySpace(name) {
		return backend.Value{}, backend.Reply(keycmd.NotWholeMsg(name, "quorum backend"))
	}
	abs := false
	for _, a := range args[1:] {
		switch string(lowerASCII(a)) {
		case "exat", "pxat":
			abs = true
		}
	}
	switch name {
	case "expireat", "pexpireat":
		abs = true
	}
	if abs {
		for _, k := range keys {
			s.abs[dbKey{db, k}] = true
		}
	}
	return s.View.Do(ctx, db, keys, args)
}

// Set implements backend.KeySpace, noting an absolute expiry.
func (s scriptSpace) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if !o.KeepTTL {
		s.abs[dbKey{db, key}] = !o.Expiry.At.IsZero()
	}
	return s.View.Set(ctx, db, key, token, o)
}

// Expire implements backend.KeySpace, noting an absolute expiry.
func (s scriptSpace) Expire(ctx context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	s.abs[dbKey{db, key}] = !e.At.IsZero()
	return s.View.Expire(ctx, db, key, e, cond)
}

func lowerASCII(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// keyChange is what a run did to one key read: its state before and
// after, and deadlines (Unix ms by this process's clock; 0 none).
type keyChange struct {
	j                int  // the key's index in the snapshot
	keep             bool // unchanged: only checked
	abs              bool // its expiry was set as an absolute time (scriptSpace)
	after            keyState
	before           keyState
	deadline, oldDue int64
}

// msgLeasesReserved refuses a script's call on the leases' hash.
const msgLeasesReserved = "ERR lockproxy reserves " + leasesKey + " in database 15 (the quorum backend's leases)"

// lease is how long an operation's keys stay leased on the nodes at most
// (readScript): its script's time limit and its node round trips. A
// lockproxy that stops mid-operation leaves its keys to others after it.
func (b *Backend) lease() time.Duration {
	return b.cfg.ScriptTimeLimit + 4*b.cfg.NodeTimeout + time.Second
}

// newLeaseSelf is a new instance's prefix of lease nonces.
func newLeaseSelf() string {
	var n [8]byte
	rand.Read(n[:])
	return hex.EncodeToString(n[:])
}

// newNonce names one round's leases: this instance's prefix, a dot, and
// the round's own.
func (b *Backend) newNonce() string {
	var n [8]byte
	rand.Read(n[:])
	return b.leaseSelf + "." + hex.EncodeToString(n[:])
}

// modelRound is one round (the top of this file) over the keys read.
func (b *Backend) modelRound(ctx context.Context, db int, run modelRun, ro bool, read []dbKey) modelOutcome {
	names := make([]string, len(read))
	for j, k := range read {
		names[j] = k.key
	}
	defer b.lockKeys(names...)()
	start := time.Now()
	nonce := b.newNonce()
	snap := &snapshot{nodes: make([][]nodeKey, len(b.nodes))}
	var leasedOn []bool
	// release ends the round's leases where its read came (the nodes whose
	// read did not come yet release theirs when it does: lateReads).
	release := func() {
		fs := make([]*nodeFinish, len(b.nodes))
		for i := range fs {
			if leasedOn[i] && snap.nodes[i] != nil {
				fs[i] = &nodeFinish{keys: read}
			}
		}
		b.finishLater(db, names[0], nonce, fs)
		if snap.late != nil {
			snap.late.take(func(i int, _ []nodeKey) { // not committing: a late read only releases
				b.finishLater(db, names[0], nonce, onlyFinish(len(b.nodes), i, &nodeFinish{keys: read}))
			}, false)
		}
	}
	if len(read) > 0 {
		var err error
		snap, leasedOn, err = b.readSnapshot(ctx, db, read, nonce, b.lease(), false)
		if err != nil {
			fs := make([]*nodeFinish, len(b.nodes))
			for i := range fs {
				if leasedOn[i] {
					fs[i] = &nodeFinish{keys: read}
				}
			}
			b.finishLater(db, names[0], nonce, fs)
			return modelOutcome{err: err, lost: err == errLeased}
		}
	} else {
		release = func() {}
	}
	now := time.Now().UnixMilli()
	sp := &model.Space{}
	if err := snap.load(sp, now); err != nil {
		release()
		return modelOutcome{err: err}
	}
	was := make([]keyBefore, len(read))
	for j, k := range read {
		st, d, enc := stateOf(sp, k.db, k.key, now)
		was[j] = keyBefore{st, d, enc}
	}
	var missing []dbKey
	view := b.scriptView(ctx, sp, snap, read, now, &missing)
	abs := map[dbKey]bool{}
	c := &keycmd.ScriptCaller{KS: scriptSpace{view, abs}, DB: db, RO: ro, Hub: b.bus.hub}
	v, err := run(ctx, c)
	if len(missing) > 0 {
		release()
		return modelOutcome{missing: missing}
	}
	var re *backend.ReplyError
	if err != nil && (errors.Is(err, luascripts.ErrStopped) || !errors.As(err, &re)) {
		release()
		return modelOutcome{err: err} // cut short (limits, the client gone): nothing is written
	}
	// What it changed. A script that fails having written keeps what it
	// wrote, as in Redis (and on memory).
	changes, kept, longest := changesOf(sp, read, was, abs, now)
	if len(changes) == 0 {
		release()
		if err == nil {
			b.publishAll(ctx, c.Published)
		}
		return modelOutcome{v: v, err: err}
	}
	// A TTL longer than the horizon markers cover must be covered before
	// a node holds it (marker.go); every TTL left counts toward the
	// restart quarantine.
	if cerr := b.coverTTL(ctx, longest); cerr != nil {
		release()
		return modelOutcome{err: cerr}
	}
	b.noteTTL(longest)
	// The keys it read and left as they were are checked by the commit too:
	// what it wrote depends on them.
	ok, lost, cerr := b.commit(ctx, db, snap, read, append(changes, kept...), now, start, nonce, leasedOn)
	if !ok {
		return modelOutcome{err: cerr, lost: lost}
	}
	b.recordGrants(ctx, read, changes, now)
	if err == nil {
		// Its messages go out once it is decided, and not for a script
		// that failed (the error may be the commit's; as on postgres).
		b.publishAll(ctx, c.Published)
	}
	return modelOutcome{v: v, err: err}
}

// scriptView is the model a script of the round runs on: the snapshot's
// keys, refusing the horizon marker and the leases, and noting in missing
// a key it reaches that was not read (the round starts again with it).
func (b *Backend) scriptView(ctx context.Context, sp *model.Space, snap *snapshot, read []dbKey, now int64, missing *[]dbKey) *model.View {
	return &model.View{Now: now, Spaces: []*model.Space{sp}, Holder: backend.HolderOf(ctx),
		Admit: func(d int, k string) error {
			if d == markerDB && k == markerKey {
				return backend.Reply(msgMarkerReserved)
			}
			if d == markerDB && k == leasesKey {
				return backend.Reply(msgLeasesReserved)
			}
			if dk := (dbKey{d, k}); !slices.Contains(read, dk) {
				if !slices.Contains(*missing, dk) {
					*missing = append(*missing, dk)
				}
				return errUnread
			}
			return nil
		},
		Outside: func(ctx context.Context, d int) (int64, error) {
			n, err := b.DBSize(ctx, d)
			for j, k := range read {
				if d == k.db && snap.state[j].typ != "none" {
					n--
				}
			}
			return max(n, 0), err
		},
	}
}

// keyBefore is a key's state before the script ran.
type keyBefore struct {
	st       keyState
	deadline int64
	enc      []byte
}

// changesOf compares each key read with its state before the script ran:
// the keys it changed, those it left as they were, and the longest TTL
// among the changed.
func changesOf(sp *model.Space, read []dbKey, was []keyBefore, abs map[dbKey]bool, now int64) (changes, kept []keyChange, longest time.Duration) {
	for j, k := range read {
		st, d, enc := stateOf(sp, k.db, k.key, now)
		w := was[j]
		if st.typ == w.st.typ && d == w.deadline && string(enc) == string(w.enc) {
			kept = append(kept, keyChange{j: j, keep: true})
			continue
		}
		changes = append(changes, keyChange{j: j, after: st, before: w.st, deadline: d, oldDue: w.deadline, abs: abs[k]})
		if d > 0 {
			longest = max(longest, time.Duration(d-now)*time.Millisecond)
		}
	}
	return changes, kept, longest
}

// recordGrants notes each key the script created as a grant (holders.go).
func (b *Backend) recordGrants(ctx context.Context, read []dbKey, changes []keyChange, now int64) {
	for _, ch := range changes {
		if ch.before.typ != "none" || ch.after.typ == "none" {
			continue
		}
		var tok []byte
		if ch.after.typ == "string" {
			tok = ch.after.parts[0]
		}
		var ttl time.Duration
		if ch.deadline > 0 {
			ttl = time.Duration(ch.deadline-now) * time.Millisecond
		}
		b.grants.record(read[ch.j].db, read[ch.j].key, tok, backend.HolderOf(ctx), ttl)
	}
}

// onlyFinish is fs for node i alone.
func onlyFinish(n, i int, f *nodeFinish) []*nodeFinish {
	fs := make([]*nodeFinish, n)
	fs[i] = f
	return fs
}

// publishAll hands a decided script's messages to this instance's
// subscribers and, through the nodes, to the other instances'.
func (b *Backend) publishAll(ctx context.Context, msgs [][2][]byte) {
	for _, m := range msgs {
		if h := b.bus.hub; h != nil {
			h.Deliver(m[0], m[1])
		}
		b.fanout(context.WithoutCancel(ctx), 0, "", same(b.busRequest(m[0], m[1])), nil)
	}
}

// tooLate applies Redlock's validity check to a commit that set a lock's
// TTL (lockTTL) on a key: the time since the read plus the drift allowance
// must be below it. It returns the client's error, or "".
func (b *Backend) tooLate(changes []keyChange, now int64, elapsed time.Duration) string {
	for _, ch := range changes {
		if ch.keep || ch.after.typ == "none" || ch.deadline == 0 || ch.deadline == ch.oldDue {
			continue
		}
		ttl := time.Duration(ch.deadline-now) * time.Millisecond
		if b.lockTTL(ttl) && elapsed+b.drift(ttl) >= ttl {
			return fmt.Sprintf("TRYAGAIN quorum reached too late: the script's write took %dms of a %dms TTL", elapsed.Milliseconds(), ttl.Milliseconds())
		}
	}
	return ""
}

// keyStates are a node's read of the changed keys, in changes' order.
func keyStates(nk []nodeKey, changes []keyChange) []nodeKey {
	out := make([]nodeKey, len(changes))
	for k, ch := range changes {
		out[k] = nk[ch.j]
	}
	return out
}

// puttable reports whether a node's value of type typ can be written back
// by applyScript.
func puttable(typ string) bool {
	switch typ {
	case "none", "string", "hash", "set", "list", "zset":
		return true
	}
	return false
}
