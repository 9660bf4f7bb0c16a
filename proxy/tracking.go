package proxy

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// Client-side caching (CLIENT TRACKING, CLIENT CACHING, CLIENT GETREDIR),
// as Redis serves it (docs/pubsub.md): rueidis (valkey-go) turns it on for
// every connection and waits for a lock's invalidation instead of polling.
//
// The table remembers, per key name (any database, as Redis), the clients
// that read it while tracking (default mode; OPTIN after CLIENT CACHING
// YES; OPTOUT unless CLIENT CACHING NO); a write of the key through this
// instance — a key command, a script's declared keys, a transaction's, a
// FLUSHDB/FLUSHALL (every key) — sends each of them one invalidation and
// forgets them, as Redis does; BCAST clients hear every write under their
// prefixes. The message is a RESP3 push on the client's own connection, or
// a message on __redis__:invalidate for a client subscribed to it that
// another redirects to (RESP2).
//
// A write through another lockproxy instance sharing the backend comes
// over its Bus (tracking_remote.go). Not covered: a key that expires (the
// caches that lockproxy's clients keep expire it by its PTTL: rueidis
// reads it with the value).

// tracker is the instance's tracking table.
type tracker struct {
	active atomic.Int32 // clients tracking: none, and a command skips the table
	first  func()       // runs when the first client starts tracking (remote.tracks)
	mu     sync.Mutex
	keys   map[string]map[*client]struct{}
	bcast  map[*client][][]byte // BCAST clients and their prefixes ("" for all)
}

// tracking is one client's tracking state; it belongs to whoever runs the
// client's commands, except what the tracker reads under its lock (the
// tracker copies it in on enable).
type tracking struct {
	on       bool
	optin    bool
	optout   bool
	bcast    bool
	noloop   bool
	redirect int64
	caching  int8 // CLIENT CACHING for the next command: 1 yes, -1 no, 0 none
	cachingN int  // commands since CLIENT CACHING (it lasts one command)
}

func newTracker() *tracker {
	return &tracker{keys: map[string]map[*client]struct{}{}, bcast: map[*client][][]byte{}}
}

const invalidateChannel = "__redis__:invalidate"

// cmdClientTracking is CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST]
// [PREFIX p]… [OPTIN] [OPTOUT] [NOLOOP], with Redis's checks and errors.
func cmdClientTracking(cl *client, args [][]byte) backend.Value {
	var t tracking
	var prefixes [][]byte
	for j := 3; j < len(args); j++ {
		more := j+1 < len(args)
		switch opt := lower(args[j]); {
		case opt == "redirect" && more:
			j++
			if t.redirect != 0 {
				return backend.ErrorValue("ERR A client can only redirect to a single other client")
			}
			id, ok := backend.ParseInt(args[j])
			if !ok {
				return backend.ErrorValue(backend.MsgNotInteger)
			}
			if cl.s.clientByID(id) == nil {
				return backend.ErrorValue("ERR The client ID you want redirect to does not exist")
			}
			t.redirect = id
		case opt == "bcast":
			t.bcast = true
		case opt == "optin":
			t.optin = true
		case opt == "optout":
			t.optout = true
		case opt == "noloop":
			t.noloop = true
		case opt == "prefix" && more:
			j++
			prefixes = append(prefixes, bytes.Clone(args[j]))
		default:
			return backend.ErrorValue(backend.MsgSyntax)
		}
	}
	switch lower(args[2]) {
	case "on":
	case "off":
		cl.s.tracker.disable(cl)
		cl.track = tracking{}
		return backend.OKValue
	default:
		return backend.ErrorValue(backend.MsgSyntax)
	}
	switch {
	case !t.bcast && len(prefixes) > 0:
		return backend.ErrorValue("ERR PREFIX option requires BCAST mode to be enabled")
	case cl.track.on && cl.track.bcast != t.bcast:
		return backend.ErrorValue("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.")
	case t.bcast && (t.optin || t.optout):
		return backend.ErrorValue("ERR OPTIN and OPTOUT are not compatible with BCAST")
	case t.optin && t.optout:
		return backend.ErrorValue("ERR You can't specify both OPTIN mode and OPTOUT mode")
	case cl.track.on && (t.optin && cl.track.optout || t.optout && cl.track.optin):
		return backend.ErrorValue("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.")
	}
	if t.bcast {
		if msg := prefixCollision(prefixes); msg != "" {
			return backend.ErrorValue(msg)
		}
		if len(prefixes) == 0 {
			prefixes = [][]byte{{}}
		}
	}
	t.on = true
	cl.track = t
	cl.startPushes() // invalidations come unasked, like messages
	cl.s.tracker.enable(cl, t, prefixes)
	return backend.OKValue
}

// prefixCollision is Redis's error for two BCAST prefixes one of which
// starts the other, or "".
func prefixCollision(prefixes [][]byte) string {
	for i, a := range prefixes {
		for _, b := range prefixes[i+1:] {
			if bytes.HasPrefix(a, b) || bytes.HasPrefix(b, a) {
				return "ERR Prefix '" + string(a) + "' overlaps with another provided prefix '" + string(b) + "'. Prefixes for a single client must not overlap."
			}
		}
	}
	return ""
}

// cmdClientCaching is CLIENT CACHING YES|NO.
func cmdClientCaching(cl *client, args [][]byte) backend.Value {
	t := &cl.track
	if !t.on {
		return backend.ErrorValue("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
	}
	switch lower(args[2]) {
	case "yes":
		if !t.optin {
			return backend.ErrorValue("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
		}
		t.caching = 1
	case "no":
		if !t.optout {
			return backend.ErrorValue("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
		}
		t.caching = -1
	default:
		return backend.ErrorValue(backend.MsgSyntax)
	}
	t.cachingN = 0
	return backend.OKValue
}

// enable and disable keep the tracker's view of a client.
func (tr *tracker) enable(cl *client, t tracking, prefixes [][]byte) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !cl.trackShared.on && tr.active.Add(1) == 1 && tr.first != nil {
		tr.first()
	}
	cl.trackShared = t
	if t.bcast {
		tr.bcast[cl] = append(tr.bcast[cl], prefixes...)
	}
}

func (tr *tracker) disable(cl *client) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if cl.trackShared.on {
		tr.active.Add(-1)
	}
	cl.trackShared = tracking{}
	delete(tr.bcast, cl)
	// Its entries in keys are dropped as they are met (invalidate).
}

// read remembers that cl read keys, when its mode says so.
func (cl *client) trackRead(keys [][]byte) {
	if !cl.tracksReads() || len(keys) == 0 {
		return
	}
	tr := cl.s.tracker
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.add(cl, keys)
}

// tracksReads reports whether cl's mode tracks the keys its command reads.
func (cl *client) tracksReads() bool {
	t := &cl.track
	return t.on && !t.bcast && !(t.optin && t.caching != 1) && !(t.optout && t.caching == -1)
}

// add remembers that cl read keys and reports those it had not read
// since their last invalidation. Under tr.mu.
func (tr *tracker) add(cl *client, keys [][]byte) (added [][]byte) {
	for _, k := range keys {
		set := tr.keys[string(k)]
		if set == nil {
			set = map[*client]struct{}{}
			tr.keys[string(k)] = set
		}
		if _, ok := set[cl]; !ok {
			set[cl] = struct{}{}
			added = append(added, k)
		}
	}
	return added
}

// afterCommand ends CLIENT CACHING's one command (inside MULTI it lasts
// until EXEC, as in Redis).
func (cl *client) afterCommand(name string) {
	t := &cl.track
	if t.caching == 0 || cl.inMulti {
		return
	}
	if t.cachingN++; t.cachingN > 1 || name != "client" {
		t.caching, t.cachingN = 0, 0
	}
}

// invalidate tells the clients tracking keys (nil: every key, a flush)
// that they changed; writer is the client that wrote them (NOLOOP).
func (tr *tracker) invalidate(keys [][]byte, writer *client) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.invalidateLocked(keys, writer)
}

// invalidateLocked is invalidate under tr.mu.
func (tr *tracker) invalidateLocked(keys [][]byte, writer *client) {
	if len(tr.keys) == 0 && len(tr.bcast) == 0 {
		return
	}
	if keys == nil {
		seen := map[*client]bool{}
		for _, set := range tr.keys {
			for c := range set {
				seen[c] = true
			}
		}
		for c := range tr.bcast {
			seen[c] = true
		}
		clear(tr.keys)
		for c := range seen {
			if c.trackShared.on { // not one that turned tracking off since it read
				c.sendInvalidation(nil, writer)
			}
		}
		return
	}
	for _, k := range keys {
		for c := range tr.keys[string(k)] {
			if c.trackShared.on && !(c.trackShared.noloop && c == writer) {
				c.sendInvalidation(k, writer)
			}
		}
		delete(tr.keys, string(k))
		for c, prefixes := range tr.bcast {
			if c.trackShared.noloop && c == writer {
				continue
			}
			for _, p := range prefixes {
				if bytes.HasPrefix(k, p) {
					c.sendInvalidation(k, writer)
					break
				}
			}
		}
	}
}

// forget drops a closed client from the table.
func (tr *tracker) forget(cl *client) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.bcast, cl)
	if cl.trackShared.on {
		tr.active.Add(-1)
	}
	if cl.trackShared.on && !cl.trackShared.bcast {
		for k, set := range tr.keys {
			delete(set, cl)
			if len(set) == 0 {
				delete(tr.keys, k)
			}
		}
	}
	cl.trackShared = tracking{}
}

// sendInvalidation sends one invalidation of key (nil: everything) to the
// client, or to the one it redirects to; the writer's own comes after the
// reply to its write, as Redis sends it. Under the tracker's lock.
func (cl *client) sendInvalidation(key []byte, writer *client) {
	target := cl
	if id := cl.trackShared.redirect; id != 0 {
		if target = cl.s.clientByID(id); target == nil {
			return // gone: Redis tells a RESP3 client tracking-redir-broken; its cache expires by TTL
		}
	}
	var keys []byte
	if key == nil {
		keys = []byte("*-1\r\n")
		if target.out.resp3.Load() {
			keys = []byte("_\r\n")
		}
	} else {
		keys = appendBulk([]byte("*1\r\n"), key)
	}
	var b []byte
	switch {
	case target.out.resp3.Load():
		b = append(appendBulk([]byte(">2\r\n"), []byte("invalidate")), keys...)
	case target != cl && target.out.invalidateSub.Load():
		b = appendBulk(appendBulk([]byte("*3\r\n"), []byte("message")), []byte(invalidateChannel))
		b = append(b, keys...)
	default:
		return // RESP2 without a redirect: nowhere to send it, as in Redis
	}
	if target == writer {
		writer.invalAfter = append(writer.invalAfter, b...) // its goroutine: it runs the write
		return
	}
	target.out.put(b)
}

// clientByID finds a connected client.
func (s *Server) clientByID(id int64) *client {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.clients {
		if c.id == id {
			return c
		}
	}
	return nil
}

// getRedir is CLIENT GETREDIR: the redirect's ID, 0 without, -1 when not
// tracking.
func (cl *client) getRedir() backend.Value {
	if !cl.track.on {
		return backend.Int(-1)
	}
	return backend.Int(cl.track.redirect)
}

// touched runs what a key command that succeeded sets off: a read
// remembers its keys for the clients tracking them; a write invalidates
// them (a flush, every key) and wakes the clients blocked on them
// (blocking.go). With nobody tracking or blocked, a command pays two
// atomic loads.
func (cl *client) touched(kc *keycmd.Command, args [][]byte) {
	tr, bs, rm := cl.s.tracker, &cl.s.blockers, cl.s.remote
	tracking := tr.active.Load() > 0
	remote := kc.Write && rm.bus != nil && rm.wanted()
	if !tracking && !remote && (!kc.Write || bs.n.Load() == 0) {
		return
	}
	switch {
	case kc.Name == "flushdb" || kc.Name == "flushall":
		tr.invalidate(nil, cl)
		if remote {
			rm.wrote(cl.db, nil)
		}
	case kc.Write:
		keys := kc.Keys(args)
		if tracking {
			tr.invalidate(keys, cl)
		}
		cl.wakeBlocked(keys)
		if remote {
			rm.wrote(cl.db, keys)
		}
	default:
		cl.trackRead(kc.Keys(args))
	}
}

// trackBefore starts tracking a script's declared keys for the caller
// before the script runs, and returns those it was not tracking yet (for
// touchedScript). Tracked only after, as it was, the keys a script reads
// (rueidislock's acquire reads back its key to be told of the release)
// left a window: a release between the script's read and the tracking
// sent its invalidation to nobody, and rueidislock, which waits for the
// invalidation alone, waited for ever (found by the full suite, once in
// about seventy runs of TestRueidis).
func (cl *client) trackBefore(keys []string) [][]byte {
	tr := cl.s.tracker
	if len(keys) == 0 || tr.active.Load() == 0 || !cl.tracksReads() {
		return nil
	}
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = []byte(k)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.add(cl, bk)
}

// touchedScript is touched for a script: its declared keys are what it
// reads (EVAL_RO) or may write, and then read: a write script's keys are
// invalidated for the others, wake the clients blocked on them, and are
// tracked for the caller (rueidislock's acquire script reads back the key
// it set, for exactly that), which may track a key it did not read — a
// spurious invalidation later, never a missed one. pre are the keys
// trackBefore started tracking for this run: the caller holds no cached
// value of them, so its own write does not invalidate them for it (it
// would wake a waiting rueidislock to try again at once, and again). The
// caller's tracking is renewed in the same hold of the table as the
// invalidation: a write between them would be missed.
func (cl *client) touchedScript(keys []string, ro bool, pre [][]byte) {
	tr, bs, rm := cl.s.tracker, &cl.s.blockers, cl.s.remote
	tracking := tr.active.Load() > 0
	remote := !ro && rm.bus != nil && rm.wanted()
	if len(keys) == 0 || !tracking && !remote && (ro || bs.n.Load() == 0) {
		return
	}
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = []byte(k)
	}
	if !ro {
		cl.wakeBlocked(bk)
		if remote {
			rm.wrote(cl.db, bk)
		}
	}
	if !tracking {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, k := range pre {
		if set := tr.keys[string(k)]; set != nil {
			delete(set, cl)
			if len(set) == 0 {
				delete(tr.keys, string(k))
			}
		}
	}
	if !ro {
		tr.invalidateLocked(bk, cl)
	}
	if cl.tracksReads() {
		tr.add(cl, bk)
	}
}
