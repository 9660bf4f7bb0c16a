package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
)

// A client's script on the quorum backend runs once, in lockproxy, on the
// model (SPEC §3, docs/quorum.md "What runs where"), in rounds:
//
//  1. read: its keys' stripes are held (this instance's other operations
//     on them wait), and one readScript call per node reads the keys'
//     states (snapshot.go); Q nodes agreeing on every key make the
//     snapshot, else TRYAGAIN before anything is written;
//  2. run: the script runs in luascripts' sandbox (the Runner memory and
//     postgres use: the same time limit and libraries) on a model.Space
//     loaded with the snapshot, at one stopped clock. A key it reaches
//     that was not read (named in ARGV, found by KEYS) stops the run:
//     nothing is written, and the round starts again with that key read
//     too;
//  3. commit: when it changed something, each node that was read gets
//     one applyScript call (commit.go) that writes the keys' new states
//     only if each still has the check value read there. Q nodes applying
//     make the script's reply the client's;
//  4. put back: with fewer, every node that applied gets applyScript
//     again, back to what it showed before, only while it still holds
//     what the commit wrote; a commit that lost to another writer (every
//     node answered) is run again from a fresh read, a few times, and then
//     the client gets TRYAGAIN — which means the script had no effect.
//
// A script that changed nothing costs one round trip (the read); one that
// wrote costs two. Two instances' commits meet on a node in some order,
// and the check lets only the first through there: at most one of them
// reaches a majority. A node that holds an older state (it missed a
// commit) is brought up to date by the next commit, which writes the
// whole state of each key it changes over whatever that node showed.

// modelRounds bounds the rounds of one script: each key it reaches at run
// time that was not read costs a round.
const modelRounds = 16

// commitAttempts bounds how often a script whose commit lost to another
// writer is run again.
const commitAttempts = 4

// errUnread aborts a run that reached a key not read for it.
var errUnread = errors.New("quorum: key not read")

// modelOutcome is one round's end: the script's reply, keys it reached
// that were not read (the round is discarded), or a lost commit (put
// back; the script may run again).
type modelOutcome struct {
	v       backend.Value
	err     error
	missing []string
	lost    bool
}

// evalModel runs a client's script on the model (the top of this file).
func (b *Backend) evalModel(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	read := uniq(keys)
	attempts := 0
	for range modelRounds {
		out := b.modelRound(ctx, db, s, keys, args, ro, read)
		switch {
		case len(out.missing) > 0:
			read = uniq(append(read, out.missing...))
			continue
		case out.lost && attempts+1 < commitAttempts && ctx.Err() == nil:
			attempts++
			select {
			case <-time.After(splitPause(attempts)):
			case <-ctx.Done():
				return out.v, out.err
			}
			continue
		}
		return out.v, out.err
	}
	return backend.Value{}, backend.Reply("ERR lockproxy: the script keeps reaching keys it did not name in KEYS")
}

func uniq(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// errOtherDB refuses a key of another database than the script's call:
// one commit reaches one database of each node.
var errOtherDB = backend.Reply("ERR lockproxy: a script on the quorum backend reaches the keys of its own database only")

// scriptSpace is the KeySpace a script runs on: the round's model View;
// a command on the whole key space is refused, as on postgres.
type scriptSpace struct{ *model.View }

func (s scriptSpace) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	if name := string(lowerASCII(args[0])); keycmd.WholeKeySpace(name) {
		return backend.Value{}, backend.Reply(keycmd.NotWholeMsg(name, "quorum backend"))
	}
	return s.View.Do(ctx, db, keys, args)
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
	j                int // the key's index in the snapshot
	after            keyState
	before           keyState
	deadline, oldDue int64
}

// modelRound is one round (the top of this file) over the keys read.
func (b *Backend) modelRound(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool, read []string) modelOutcome {
	defer b.lockKeys(read...)()
	start := time.Now()
	snap := &snapshot{nodes: make([][]nodeKey, len(b.nodes))}
	if len(read) > 0 {
		var err error
		if snap, err = b.readSnapshot(ctx, db, read); err != nil {
			return modelOutcome{err: err}
		}
	}
	now := time.Now().UnixMilli()
	sp := &model.Space{}
	if err := snap.load(sp, db, now); err != nil {
		return modelOutcome{err: err}
	}
	type before struct {
		st       keyState
		deadline int64
		enc      []byte
	}
	was := make([]before, len(read))
	for j, k := range read {
		st, d, enc := stateOf(sp, db, k, now)
		was[j] = before{st, d, enc}
	}
	var missing []string
	view := &model.View{Now: now, Spaces: []*model.Space{sp}, Holder: backend.HolderOf(ctx),
		Admit: func(d int, k string) error {
			if d != db {
				return errOtherDB
			}
			if !slices.Contains(read, k) {
				if !slices.Contains(missing, k) {
					missing = append(missing, k)
				}
				return errUnread
			}
			return nil
		},
		Outside: func(ctx context.Context, d int) (int64, error) {
			n, err := b.DBSize(ctx, d)
			for j := range read {
				if d == db && snap.state[j].typ != "none" {
					n--
				}
			}
			return max(n, 0), err
		},
	}
	c := &keycmd.ScriptCaller{KS: scriptSpace{view}, DB: db, RO: ro, Hub: b.bus.hub}
	v, err := b.runner.Run(ctx, s, keys, args, c)
	if len(missing) > 0 {
		return modelOutcome{missing: missing}
	}
	var re *backend.ReplyError
	if err != nil && !errors.As(err, &re) {
		return modelOutcome{err: err} // cut short (the client went away): nothing is written
	}
	// What it changed. A script that fails having written keeps what it
	// wrote, as in Redis (and on memory).
	var changes []keyChange
	var longest time.Duration
	for j, k := range read {
		st, d, enc := stateOf(sp, db, k, now)
		w := was[j]
		if st.typ == w.st.typ && d == w.deadline && string(enc) == string(w.enc) {
			continue
		}
		changes = append(changes, keyChange{j: j, after: st, before: w.st, deadline: d, oldDue: w.deadline})
		if d > 0 {
			longest = max(longest, time.Duration(d-now)*time.Millisecond)
		}
	}
	if len(changes) == 0 {
		b.publishAll(ctx, c.Published)
		return modelOutcome{v: v, err: err}
	}
	// A TTL longer than the horizon markers cover must be covered before
	// a node holds it (marker.go); every TTL left counts toward the
	// restart quarantine.
	if cerr := b.coverTTL(ctx, longest); cerr != nil {
		return modelOutcome{err: cerr}
	}
	b.noteTTL(longest)
	ok, lost, cerr := b.commit(ctx, db, snap, read, changes, now, start)
	if !ok {
		return modelOutcome{err: cerr, lost: lost}
	}
	for _, ch := range changes {
		if ch.before.typ == "none" && ch.after.typ != "none" { // created: a grant (holders.go)
			var tok []byte
			if ch.after.typ == "string" {
				tok = ch.after.parts[0]
			}
			var ttl time.Duration
			if ch.deadline > 0 {
				ttl = time.Duration(ch.deadline-now) * time.Millisecond
			}
			b.grants.record(db, read[ch.j], tok, backend.HolderOf(ctx), ttl)
		}
	}
	b.publishAll(ctx, c.Published)
	return modelOutcome{v: v, err: err}
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

// commit writes changes to every node that was read (commit.go) and
// decides: ok when Q nodes applied in time. Otherwise what was applied is
// put back; lost reports that every node answered (another writer got
// there first), so the script may run again.
func (b *Backend) commit(ctx context.Context, db int, snap *snapshot, read []string, changes []keyChange, now int64, start time.Time) (ok, lost bool, err error) {
	n := len(b.nodes)
	ws := make([][]keyWrite, n)
	changed := make([]string, len(changes))
	for k, ch := range changes {
		changed[k] = read[ch.j]
	}
	writesFor := func(i int, nk []nodeKey) []keyWrite {
		w := make([]keyWrite, 0, len(changes))
		for _, ch := range changes {
			old := nk[ch.j]
			if !puttable(old.typ) {
				return nil // a value no put-back could restore: left alone
			}
			kw := keyWrite{key: read[ch.j], digest: old.digest, at: old.at, st: ch.after, mode: 'n'}
			switch {
			case ch.after.typ == "none" || ch.deadline == 0:
			case ch.deadline == ch.oldDue && old.at > 0 && b.agrees(snap, ch.j, old):
				kw.mode, kw.exp = 'a', old.at // an expiry the script kept: the node's own
			default:
				kw.mode, kw.exp = 'p', max(ch.deadline-now, 1)
			}
			w = append(w, kw)
		}
		return w
	}
	// A node whose read came after the snapshot was decided: included when
	// it came already; after the commit, once it succeeded, it gets its
	// own compare-and-set (the same writes over what it showed).
	var mu sync.Mutex
	var decided, won bool
	type lateRead struct {
		i  int
		nk []nodeKey
	}
	var waiting []lateRead
	followUp := func(i int, nk []nodeKey) {
		w := writesFor(i, nk)
		if w == nil {
			return
		}
		one := make([][]keyWrite, n)
		one[i] = w
		b.late.Go(func() {
			b.fanout(context.Background(), db, w[0].key, only(i, applyRequest(w, false)), applyFallback(one))
		})
	}
	if snap.late != nil {
		for i, nk := range snap.late.take(func(i int, nk []nodeKey) {
			mu.Lock()
			if !decided {
				waiting = append(waiting, lateRead{i, nk})
				mu.Unlock()
				return
			}
			ok := won
			mu.Unlock()
			if ok {
				followUp(i, nk)
			}
		}) {
			if nk != nil && snap.nodes[i] == nil {
				snap.nodes[i] = nk
			}
		}
	}
	for i := range n {
		if nk := snap.nodes[i]; nk != nil {
			ws[i] = writesFor(i, nk) // a node not read is not written: nothing to check against
		}
	}
	reqs := make([]*req, n)
	for i, w := range ws {
		if w != nil {
			reqs[i] = applyRequest(w, false)
		}
	}
	// It ends once the outcome is certain: Q applied, or too many refused
	// or failed for Q to apply. A node heard from later is judged then
	// (below).
	certain := func(replies []nodeReply) bool {
		yes, no := 0, 0
		for _, r := range replies {
			if !r.done {
				continue
			}
			if done, _, _ := parseApplied(r, len(changes)); done {
				yes++
			} else {
				no++
			}
		}
		return yes >= b.q || no > n-b.q
	}
	o, replies := b.fanoutUntil(context.WithoutCancel(ctx), db, changed[0], func(i int) *req { return reqs[i] }, applyFallback(ws), certain)
	elapsed := time.Since(start)
	applied, refusals, failures := 0, 0, 0
	pb := make([][]keyWrite, n)
	for i, r := range replies {
		if !r.done || reqs[i] == nil {
			continue
		}
		done, refused, after := parseApplied(r, len(changes))
		switch {
		case done:
			applied++
			pb[i] = putBack(ws[i], after, keyStates(snap.nodes[i], changes))
		case refused:
			refusals++
		case r.err != nil && r.err != errNotSent && r.err != errQuarantined:
			failures++
			b.repairs.add(i, db, changed) // it may have applied: repaired once reachable (repair.go)
		}
	}
	late := ""
	if applied >= b.q {
		late = b.tooLate(changes, now, elapsed)
	}
	success := applied >= b.q && late == ""
	mu.Lock()
	decided, won = true, success
	reads := waiting
	mu.Unlock()
	if success {
		for _, lr := range reads {
			followUp(lr.i, lr.nk)
		}
	}
	// A node heard from after the end: where the commit failed, what it
	// applied there is put back; where it succeeded, a node that refused
	// holds an older state, which the next writer brings up to date.
	o.onLate(func(i int, vals []backend.Value, lerr error) {
		done, _, after := parseApplied(nodeReply{vals: vals, err: lerr, done: true}, len(changes))
		if done && !success {
			one := make([][]keyWrite, n)
			one[i] = putBack(ws[i], after, keyStates(snap.nodes[i], changes))
			b.late.Go(func() { b.runPutBacks(context.Background(), db, one) })
		}
		if !done && lerr != nil {
			b.repairs.add(i, db, changed)
		}
	})
	if success {
		return true, false, nil
	}
	b.runPutBacks(ctx, db, pb)
	if late != "" {
		return false, false, &backend.ReplyError{Reply: late}
	}
	if refusals > 0 && failures == 0 {
		// Enough nodes no longer held what was read there that Q cannot
		// apply: another writer got there first.
		return false, true, &backend.ReplyError{Reply: fmt.Sprintf(
			"TRYAGAIN quorum not reached: %d of %d nodes changed the script's keys meanwhile; nothing was kept", refusals, n)}
	}
	return false, false, b.errNoQuorum(replies)
}

// tooLate applies Redlock's validity check to a commit that set a lock's
// TTL (lockTTL) on a key: the time since the read plus the drift allowance
// must be below it. It returns the client's error, or "".
func (b *Backend) tooLate(changes []keyChange, now int64, elapsed time.Duration) string {
	for _, ch := range changes {
		if ch.after.typ == "none" || ch.deadline == 0 || ch.deadline == ch.oldDue {
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
