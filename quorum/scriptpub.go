package quorum

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// Scripts that publish (a release that wakes the waiters: Redisson's
// unlock, simple-redis-mutex's, node-redisson's). A script runs on every
// node, but its messages must reach each subscriber once, and only once
// the vote has decided its outcome (docs/pubsub.md): a waiter woken by a
// release must not find the lock still held because a minority's reply
// was counted first, and a release that was not decided must wake no one.
//
// So a script that may publish (luascripts: its text calls PUBLISH, or its
// commands cannot be read off its text) goes to the nodes rewritten: each
// use of redis.call and redis.pcall that may send PUBLISH (the literal
// command "publish", a command chosen at run time, the function taken as
// a value) goes through a function that keeps each PUBLISH in a list
// instead of sending it, answering 0 (no subscriber on the node hears it),
// and the script's body runs as a function whose reply comes back after
// that list: {messages, reply}. No line moves, so the lines in errors are
// the script's own, and the SHA1 in an error's text is given back as the
// client's script's; but an error raised by a command sent through that
// function (one chosen at run time) names line 1, where Redis names the
// call's. Calls of any other literal command are the script's own. Each
// node's reply is unwrapped as it arrives (op.deliver), so the vote and
// everything after it see the script's own reply.
//
// Once the vote has decided and nothing is undone, the messages of a node
// that gave the decided reply are delivered to this instance's
// subscribers, then to the other instances' over the bus (pubsub.go), in
// the order the script sent them. A script that is not decided
// (TRYAGAIN), or whose acquire came too late, delivers nothing; nor does
// one that raises an error after publishing (in Redis those messages are
// sent). Inside the script PUBLISH answers 0: the receivers are not known
// until the vote (memory and postgres answer this instance's count).

// pubPrologue goes on the script's first line, pubEpilogue after its
// last; the calls that may publish are renamed to pubCallName and
// pubPcallName.
const (
	pubCallName  = "__lockproxy_call"
	pubPcallName = "__lockproxy_pcall"
	pubPrologue  = `local __lockproxy_sent = {} ` +
		`local function __lockproxy_hold(f) return function(...) local name, c, m = ... ` +
		`if select('#', ...) == 3 and type(name) == 'string' and string.lower(name) == 'publish' then ` +
		`if (type(c) == 'string' or type(c) == 'number') and (type(m) == 'string' or type(m) == 'number') then ` +
		`if type(c) == 'number' then c = string.format('%.17g', c) end ` +
		`if type(m) == 'number' then m = string.format('%.17g', m) end ` +
		`__lockproxy_sent[#__lockproxy_sent + 1] = c __lockproxy_sent[#__lockproxy_sent + 1] = m return 0 end end ` +
		`return f(...) end end ` +
		`local ` + pubCallName + `, ` + pubPcallName + ` = __lockproxy_hold(redis.call), __lockproxy_hold(redis.pcall) ` +
		`return {__lockproxy_sent, (function() `
	pubEpilogue = "\nend)()}"
)

// pubWrap returns s as the nodes run it when it may publish.
func pubWrap(s backend.Script) backend.Script {
	body, _ := luascripts.RenamePublishCalls(s.Src, pubCallName, pubPcallName)
	src := pubPrologue + body + pubEpilogue
	return backend.Script{Src: src, SHA1: luascripts.SHA1(src)}
}

// pubScripts caches the wrapped scripts by the client's script's SHA1.
type pubScripts struct {
	mu sync.RWMutex
	m  map[string]backend.Script
}

const maxPubScripts = 1024

// of returns s wrapped.
func (p *pubScripts) of(s backend.Script) backend.Script {
	p.mu.RLock()
	w, ok := p.m[s.SHA1]
	p.mu.RUnlock()
	if ok {
		return w
	}
	w = pubWrap(s)
	p.mu.Lock()
	if p.m == nil || len(p.m) >= maxPubScripts {
		p.m = make(map[string]backend.Script)
	}
	p.m[s.SHA1] = w
	p.mu.Unlock()
	return w
}

// pubCall is what an operation running a wrapped script needs to unwrap
// its nodes' replies.
type pubCall struct {
	at           int    // where the script's reply is among a node's replies (scriptAt)
	wrapped, sha []byte // the wrapped script's SHA1 and the client's
}

// unwrap replaces the wrapped script's reply in a node's replies with the
// script's own and returns the messages it held back (an array of channel
// and message pairs; the zero Value when it has none, or raised an error).
func (p *pubCall) unwrap(vals []backend.Value) backend.Value {
	if len(vals) <= p.at {
		return backend.Value{}
	}
	v := vals[p.at]
	switch {
	case v.Kind == backend.KindError && bytes.Contains(v.Str, p.wrapped):
		vals[p.at].Str = bytes.ReplaceAll(v.Str, p.wrapped, p.sha)
		return backend.Value{}
	case v.Kind != backend.KindArray || len(v.Elems) == 0 || len(v.Elems) > 2 || v.Elems[0].Kind != backend.KindArray:
		return backend.Value{} // not the wrap's reply: a node failure, NOSCRIPT
	case len(v.Elems) == 1:
		vals[p.at] = backend.Value{Kind: backend.KindNil} // the script answered nil, which ends a Lua array
	default:
		vals[p.at] = v.Elems[1]
	}
	return v.Elems[0]
}

// pubsDecided returns the messages to deliver for a script decided as
// (v, err), when Q nodes gave that reply (so not for a TRYAGAIN): those
// of the first such node that published, copied out of the read buffers.
//
// The first that published, not the first that answered: nodes that
// agree on the reply may differ in what they did. simple-redis-mutex's
// release answers nil whether or not it found its token; on a node the
// acquire did not reach (a minority), it finds none and publishes
// nothing. Taking that node's empty list lost the wake-up, and its
// waiters, who wait for no other sign, slept until their timeout (the
// full suite, two instances). Publishing where a minority did is the
// safe side: a waiter woken needlessly tries, finds the lock held and
// waits again; one never woken waits until it gives up.
func (lo *lop) pubsDecided(v backend.Value, err error) [][2][]byte {
	if err != nil {
		re, ok := err.(*backend.ReplyError)
		if !ok || strings.HasPrefix(re.Reply, "TRYAGAIN") {
			return nil
		}
		v = backend.Value{Kind: backend.KindError, Str: []byte(re.Reply)}
	}
	at, agreed, from := lo.pub.at, 0, -1
	for i, r := range lo.replies {
		if r.done && r.err == nil && len(r.vals) > at && sameValue(r.vals[at], v) {
			agreed++
			if from < 0 && lo.pubs[i].Kind == backend.KindArray && len(lo.pubs[i].Elems) > 0 {
				from = i
			}
		}
	}
	if agreed < lo.ql.b.q || from < 0 {
		return nil
	}
	ms := lo.pubs[from].Elems
	out := make([][2][]byte, 0, len(ms)/2)
	for j := 0; j+1 < len(ms); j += 2 {
		out = append(out, [2][]byte{bytes.Clone(ms[j].Str), bytes.Clone(ms[j+1].Str)})
	}
	return out
}

// deliverPubs hands a decided script's messages to this instance's
// subscribers and, through the nodes, to the other instances', on the
// loop that ran it (one order per loop).
func (ql *qloop) deliverPubs(msgs [][2][]byte) {
	b := ql.b
	for _, m := range msgs {
		if h := b.bus.hub; h != nil {
			h.Deliver(m[0], m[1])
		}
		r := b.busRequest(m[0], m[1])
		ql.run(0, same(r), nil, time.Time{}, func([]nodeReply, time.Duration) {})
	}
}
