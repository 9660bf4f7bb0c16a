package luascripts

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// Scripts that reach beyond what a backend serves. The memory and
// postgres backends run a script on the lock model, where a call of a
// command lockproxy does not serve (keycmd.NotServed: BITOP, XADD, SORT …)
// fails; the quorum backend runs scripts on its nodes, which would serve
// it: one script, two answers. So every backend refuses, before running
// anything, a script whose text can send such a command (Run, when its
// Caller serves lockproxy's commands only, for memory and postgres;
// Refusal for quorum), with the error a call of it gives (redis.call's
// form: "ERR lockproxy serves lock commands only: 'xadd' is not supported
// script: <sha>, on @user_script:<line>.", the line of the command's first
// call in the text). Refused before it runs, such a script writes nothing,
// on every backend. A backend that serves string values only (postgres, a
// migrating proxy, until they serve the other types) refuses the same way
// a script that can call a command of those types (HSET, ZADD …).
//
// What remains: a script that reaches such a call only on some runs is
// refused on every run; one that would catch the error with redis.pcall
// gets the refusal too; and a script whose commands cannot be read off
// its text (a command named at run time) still runs — on the lock model,
// which refuses the call when it is reached, or on quorum's nodes, which
// serve it.

// lockModel is a Caller that serves the lock model only (keycmd's
// ScriptCaller): Run refuses, before running, a script that can send a
// command it does not serve.
type lockModel interface{ LockModelOnly() bool }

// publishing is a Caller that serves PUBLISH (the memory backend's,
// given the proxy's subscribers): a script that publishes is not refused
// for it.
type publishing interface{ Publishes() bool }

// refusal returns the error for a script that can send a command
// lockproxy does not serve (with publish, PUBLISH aside), or nil. onNodes
// is for scripts that Redis servers run (quorum's nodes, a migrating
// proxy's legacy Redis), which do not know LOCKPROXY: a script calling it
// is refused too.
func refusal(s backend.Script, publish, onNodes bool) error {
	cmds, ok, _ := analyse(s.Src)
	if !ok {
		return nil
	}
	type call struct {
		name string
		line int
	}
	var out []call
	for name, line := range cmds {
		if publish && name == "publish" {
			continue
		}
		if keycmd.NotServed(name) || keycmd.NotInScripts(name) || onNodes && name == "lockproxy" {
			out = append(out, call{name, line})
		}
	}
	if len(out) == 0 {
		return nil
	}
	first := slices.MinFunc(out, func(a, b call) int { return cmp.Or(cmp.Compare(a.line, b.line), cmp.Compare(a.name, b.name)) })
	sha := s.SHA1
	if sha == "" {
		sha = SHA1(s.Src)
	}
	msg := keycmd.NotServedMsg(first.name)
	switch {
	case first.name == "lockproxy":
		msg = "ERR lockproxy does not run 'lockproxy' from scripts that Redis servers run (quorum's nodes, a migrating proxy's legacy Redis): send it after the script"
	case keycmd.NotInScripts(first.name):
		msg = keycmd.NotInScriptsMsg(first.name)
	}
	return &backend.ReplyError{Reply: msg + " script: " + sha + ", on @user_script:" + strconv.Itoa(first.line) + "."}
}

// Refusal returns the error a backend that serves PUBLISH in scripts
// gives s when it can send a command lockproxy does not serve (the top of
// this file), or nil (also when s does not compile: that error is Run's);
// publishes reports whether s may publish (mayPublish). Cached with the
// compiled script. For the quorum backend, which runs scripts on its
// nodes: it holds a script's messages back until the vote.
func (r *Runner) Refusal(s backend.Script) (err error, publishes bool) {
	if s.SHA1 == "" {
		s.SHA1 = SHA1(s.Src)
	}
	p, err := r.compiled(s)
	if err != nil {
		return nil, false
	}
	if s.Function != "" && p.refusedNodes != nil {
		_, err = functionResult(s, backend.Value{}, p.refusedNodes)
		return err, p.publishes
	}
	return p.refusedNodes, p.publishes
}

// mayPublish reports whether a script may send PUBLISH: its text calls
// it, or its commands cannot be read off its text (a command named at
// run time).
func mayPublish(src string) bool {
	cmds, ok, _ := analyse(src)
	_, pub := cmds["publish"]
	return !ok || pub
}

// RefusalCached is Refusal without compiling: ok false when s was not
// compiled yet (for callers that must not compile in place, such as an
// event loop).
func (r *Runner) RefusalCached(s backend.Script) (err error, publishes, ok bool) {
	r.mu.RLock()
	p := r.procs[s.SHA1]
	r.mu.RUnlock()
	if p == nil {
		return nil, false, false
	}
	return p.refusedNodes, p.publishes, true
}

// Refusal is the Runner's Refusal, for the quorum backend, which runs
// scripts on its nodes but classifies them here.
func (c *Classes) Refusal(s backend.Script) (error, bool) { return c.runner().Refusal(s) }

// RefusalCached is the Runner's RefusalCached (ok false too while no
// script was classified yet). An event loop asks it on every script
// call: no once.Do, which would allocate.
func (c *Classes) RefusalCached(s backend.Script) (err error, publishes, ok bool) {
	if s.Src == "" || s.SHA1 == "" {
		return nil, false, s.Src == ""
	}
	r := c.made.Load()
	if r == nil {
		return nil, false, false
	}
	return r.RefusalCached(s)
}
