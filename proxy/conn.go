package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// client is one connection's state, on either front end. Only the one
// running its commands touches it (its connection's goroutine, or its
// event loop and the goroutine it hands a blocking command to, one at a
// time), except id and addr, which never change, and wake and cancel.
type client struct {
	s       *Server
	id      int64
	addr    string          // the peer's host:port
	conn    redcon.Conn     // on the goroutine front end
	lc      *loopConn       // on the event-loop front end
	ctx     context.Context // ends when the connection closes or the drain times out; carries holder
	cancel  context.CancelFunc
	holder  backend.HolderSlot // who this connection's grants go to (setHolder)
	created time.Time

	db       int
	resp3    bool
	authed   bool
	user     string // the user AUTH named; "": default
	name     string
	libName  string
	libVer   string
	lastCmd  string
	inMulti  bool
	inExec   bool       // EXEC runs its queue command by command: nothing blocks
	execWoke []blockKey // keys written meanwhile, whose blocked clients wake after it
	dirty    bool       // a command failed to queue: EXEC aborts
	queue    [][][]byte
	closeNow bool        // QUIT: close after the reply
	hungUp   atomic.Bool // the client went away while a command ran (hangUp)
	inServe  atomic.Bool // blocked, its try runs in a serve (serveKey)
	reply    replyMode
	subs     subs   // pub/sub subscriptions (pubsub.go)
	out      outbox // messages waiting for the front end to write them
	pushing  bool   // the goroutine front end's pusher runs (startPushes)

	track       tracking // CLIENT TRACKING (tracking.go)
	trackShared tracking // the same, as the tracker reads it under its lock
	invalAfter  []byte   // invalidations of its own write, sent after the reply

	// alt stands in for the backend while a command is started on, or
	// finished from, an event loop; t0 is then when it started
	// (loop_backend.go).
	alt backend.Backend
	t0  time.Time

	// lastScript is the script of the connection's last EVALSHA, valid
	// while the script cache's gen is scriptGen (client.script).
	lastScript backend.Script
	scriptGen  uint64

	buf []byte        // reply scratch
	raw []byte        // a passthrough reply to write as is, instead of the command's value
	up  *upstreamConn // the passthrough connection, once a command was forwarded
}

func newClient(s *Server, addr string) *client {
	ctx, cancel := context.WithCancel(s.ctx)
	cl := &client{
		s: s, id: s.nextID.Add(1), addr: addr, cancel: cancel, created: time.Now(),
		authed: !s.authRequired(),
	}
	cl.ctx = backend.WithHolder(ctx, &cl.holder)
	cl.setHolder()
	return cl
}

// setHolder records the connection's name and user as the holder of its
// next grants; called whenever either changes. The Holder is new each
// time: grants made before keep the one they were made with.
func (cl *client) setHolder() {
	cl.holder.Store(&backend.Holder{Addr: cl.addr, Name: cl.name, User: cl.userName(), Instance: cl.s.cfg.Instance})
}

// wake makes an idle connection's read return, so a draining server can
// close it once its last batch is answered.
func (cl *client) wake() {
	if cl.lc != nil {
		cl.lc.wake()
		return
	}
	switch nc := cl.conn.NetConn().(type) {
	case *limitConn:
		nc.wake()
	case net.Conn:
		nc.SetReadDeadline(time.Now())
	}
}

// serveRESP is redcon's handler: one command, one reply.
func (s *Server) serveRESP(conn redcon.Conn, cmd redcon.Command) {
	cl, _ := conn.Context().(*client)
	if cl == nil {
		conn.WriteError(backend.MsgInternal)
		conn.Close()
		return
	}
	if cl.closeNow {
		return // redcon hands over the rest of a read batch after a Close: dropped, as Redis drops input after QUIT
	}
	r := cl.run(cmd.Args)
	cl.buf = cl.appendReply(cl.buf[:0], r)
	if len(cl.buf) > 0 {
		conn.WriteRaw(cl.buf) // copied by redcon
	}
	if len(cl.buf) > 64<<10 {
		cl.buf = nil // do not keep a big reply's buffer per connection
	}
	if r.panicked || cl.closeNow {
		conn.Close()
	}
}

// result is what running one command produced, for appendReply.
type result struct {
	v        backend.Value
	pushes   []byte // pub/sub messages to write before the reply (pubsub.go)
	after    []byte // invalidations to write after it (tracking.go)
	raw      []byte // a passthrough reply to write as is, instead of v
	panicked bool   // v is the internal error; the connection closes after it
	silent   bool   // nothing is written: the connection closes (crossProtocol)
	push     bool   // raw is (un)subscribe confirmations, which CLIENT REPLY does not mute
}

// run runs one command, on either front end. A panic is recovered here:
// it is logged with its stack and answered with the internal error, and
// the connection is to be closed after that reply.
func (cl *client) run(args [][]byte) (r result) {
	s := cl.s
	if crossProtocol(args[0]) {
		s.crossProtocolAttack(cl)
		return result{silent: true}
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic serving a command", "conn_id", cl.id, "cmd", cl.lastCmd, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			cl.raw = nil
			r = result{v: backend.ErrorValue(backend.MsgInternal), panicked: true}
		}
	}()
	s.stats.commands.Add(1)
	var start time.Time
	if s.metrics != nil {
		start = time.Now()
		if !cl.t0.IsZero() {
			start = cl.t0
		}
	}
	r.v = cl.command(args)
	if r.v.Kind == backend.KindError {
		s.stats.errors.add(r.v.Str)
		if isTryagain(r.v.Str) {
			s.ops.sawTryagain(cl.lastCmd, r.v.Str)
		}
	}
	r.raw, cl.raw = cl.raw, nil
	switch cl.lastCmd {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe":
		r.push = r.raw != nil
	}
	cl.afterCommand(cl.lastCmd)
	r.after, cl.invalAfter = cl.invalAfter, nil
	if cl.out.pending.Load() && !subscribing(args[0]) {
		// Messages that came while it ran (a PUBLISH to itself in RESP3,
		// the invalidation of a key it tracks and wrote) go before its
		// reply, as Redis writes them; never before a SUBSCRIBE's
		// confirmation.
		var over bool
		if r.pushes, over = cl.out.take(nil, 0); over {
			cl.closeNow = true // past the pubsub output limits: closed after the reply
		}
	}
	if s.metrics != nil {
		s.metrics.observe(cl.lastCmd, r.v, time.Since(start))
	}
	if s.cfg.Freed != nil {
		s.cfg.Freed(largeCommand(args, r.v))
	}
	return r
}

// largeCommand is the size of a command's request, or, for a reply of many
// elements (KEYS of a large key space), an estimate of the reply's: what
// the connection's buffers let go once it is answered.
func largeCommand(args [][]byte, v backend.Value) int {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	return max(n, len(v.Str), len(v.Elems)*64)
}

// appendReply appends the reply to the command run to b: nothing when
// CLIENT REPLY mutes it, except a panic's error, which always goes out.
func (cl *client) appendReply(b []byte, r result) []byte {
	if r.silent {
		return b
	}
	b = append(b, r.pushes...)
	switch {
	case r.panicked:
		b = appendValue(b, r.v, cl.resp3)
	case r.push:
		// Redis 7 sends (un)subscribe confirmations as pushes, also in
		// RESP2 and under CLIENT REPLY OFF or SKIP (which still counts it).
		cl.muted()
		b = append(b, r.raw...)
	case cl.muted():
	case r.raw != nil:
		b = append(b, r.raw...)
	default:
		b = appendValue(b, r.v, cl.resp3)
	}
	return append(b, r.after...)
}

// replyMode is the state CLIENT REPLY sets.
type replyMode uint8

const (
	replyOn       replyMode = iota
	replyOff                // CLIENT REPLY OFF: no replies until ON
	replySkipThis           // CLIENT REPLY SKIP was just run: no reply to it …
	replySkipNext           // … nor to the command after it
)

// muted reports whether the reply to the command just run is to be
// dropped, and moves CLIENT REPLY SKIP on by one command.
func (cl *client) muted() bool {
	switch cl.reply {
	case replyOff:
		return true
	case replySkipThis:
		cl.reply = replySkipNext
		return true
	case replySkipNext:
		cl.reply = replyOn
		return true
	}
	return false
}

// handler runs one connection-level command.
type handler func(cl *client, args [][]byte) backend.Value

// connCmd is one command served by the proxy itself.
type connCmd struct {
	name  string
	arity int // Redis's convention
	run   handler
}

// commands are the commands served by the proxy itself; every other name
// is a key command (keycmd) or unknown.
var commands map[string]*connCmd

func init() {
	// Assigned in init only because the handlers refer back to the table
	// (EXEC runs queued commands through it); nothing else happens here.
	commands = map[string]*connCmd{}
	for _, c := range []connCmd{
		{"ping", -1, cmdPing}, {"echo", 2, cmdEcho}, {"quit", -1, cmdQuit}, {"reset", 1, cmdReset},
		{"select", 2, cmdSelect}, {"auth", -2, cmdAuth}, {"hello", -1, cmdHello}, {"client", -2, cmdClient},
		{"info", -1, cmdInfo}, {"command", -1, cmdCommand}, {"config", -2, cmdConfig}, {"time", 1, cmdTime},
		{"eval", -3, cmdEval}, {"evalsha", -3, cmdEval}, {"eval_ro", -3, cmdEval}, {"evalsha_ro", -3, cmdEval},
		{"script", -2, cmdScript}, {"function", -2, cmdFunction}, {"fcall", -3, cmdFCall}, {"fcall_ro", -3, cmdFCall},
		{"multi", 1, cmdMulti}, {"exec", 1, cmdExec}, {"discard", 1, cmdDiscard},
		{"subscribe", -2, cmdSubscribe}, {"psubscribe", -2, cmdPSubscribe}, {"unsubscribe", -1, cmdUnsubscribe},
		{"punsubscribe", -1, cmdPUnsubscribe}, {"publish", 3, cmdPublish}, {"pubsub", -2, cmdPubsub},
		{"blpop", -3, cmdBLPop}, {"brpop", -3, cmdBRPop}, {"blmove", 6, cmdBLMove}, {"brpoplpush", 4, cmdBRPopLPush},
		{"bzpopmin", -3, cmdBZPopMin}, {"bzpopmax", -3, cmdBZPopMax},
		{"debug", -2, cmdDebug}, {"memory", -2, cmdMemory},
	} {
		commands[c.name] = &c
	}
}

// lookupConn finds a proxy command by name in any letter case without
// allocating.
func lookupConn(name []byte) *connCmd {
	var buf [16]byte
	if len(name) > len(buf) {
		return nil
	}
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return commands[string(buf[:len(name)])]
}

// noAuthCommands may run before AUTH, as in Redis.
var noAuthCommands = map[string]bool{"auth": true, "hello": true, "quit": true, "reset": true}

func arityOK(arity, n int) bool {
	if arity >= 0 {
		return n == arity
	}
	return n >= -arity
}

func lower(b []byte) string { return strings.ToLower(string(b)) }

// command runs one command from the client, inside or outside MULTI.
func (cl *client) command(args [][]byte) backend.Value {
	cc := lookupConn(args[0])
	if cc != nil && cl.s.cfg.Passthrough != nil && blockingPop(args[0]) {
		cc = nil // the lists are the upstream's: refused there, as before (passthrough.go)
	}
	var kc *keycmd.Command
	if cc == nil {
		kc = keycmd.Lookup(args[0])
	}
	if kc != nil && kc.Typed() && kc.Name != "lockproxy" && cl.s.cfg.Passthrough != nil {
		// With a passthrough Redis, the value types and the key-space
		// commands stay its own, as before lockproxy served them: an
		// application keeps its other data there. Scripts still run
		// them on the backend.
		kc = nil
	}
	var name string
	switch {
	case cc != nil:
		name = cc.name
	case kc != nil:
		name = kc.Name
	case cl.s.cfg.Passthrough != nil:
		return cl.passthroughCommand(args)
	default:
		cl.lastCmd = "unknown"
		cl.dirty = cl.inMulti
		return backend.ErrorValue(backend.ErrUnknownCommand(string(args[0]), args[1:]))
	}
	cl.lastCmd = name
	if (cc != nil && !arityOK(cc.arity, len(args))) || (kc != nil && !kc.ArityOK(len(args))) {
		return cl.reject(name, backend.ErrWrongArgs(name))
	}
	if !cl.authed && !noAuthCommands[name] {
		return cl.reject(name, backend.MsgNoAuth)
	}
	if kc != nil && (name == "flushdb" || name == "flushall") {
		if msg := cl.flushRefusal(name); msg != "" {
			return cl.reject(name, msg)
		}
	}
	if msg := cl.subscribedRefusal(name, args); msg != "" {
		return cl.reject(name, msg)
	}
	if cl.inMulti && name != "exec" && name != "discard" && name != "multi" && name != "quit" && name != "reset" {
		cl.queue = append(cl.queue, cloneArgs(args))
		return backend.QueuedValue
	}
	if cc != nil {
		return cc.run(cl, args)
	}
	return cl.keyCommand(kc, args)
}

// blocking reports whether args may wait on something other than the
// process (a backend that is not backend.Immediate, the passthrough
// upstream): the event-loop front end runs such a command off its loop.
// Everything runs inline on an Immediate backend, scripts included: the
// memory backend runs a script under its write lock, stalling every loop
// anyway, as Redis does, and luascripts bounds its time.
func (cl *client) blocking(args [][]byte) bool {
	s := cl.s
	if blockingPop(args[0]) && s.cfg.Passthrough == nil {
		return !cl.inMulti // it may wait for a push (blocking.go)
	}
	if s.immediate && s.cfg.Passthrough == nil {
		return false
	}
	if cc := lookupConn(args[0]); cc != nil {
		switch cc.name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "script", "info", "fcall", "fcall_ro", "function":
			return !s.immediate && !cl.inMulti
		case "exec":
			return !s.immediate
		case "publish":
			_, bus := s.b.(backend.Bus)
			return bus
		}
		return false
	}
	if kc := keycmd.Lookup(args[0]); kc != nil && !(kc.Typed() && s.cfg.Passthrough != nil) {
		return !s.immediate && !cl.inMulti
	}
	return s.cfg.Passthrough != nil // forwarded, unless refused
}

// passthroughCommand forwards a command lockproxy does not serve, after
// the same checks as its own commands (AUTH, MULTI).
func (cl *client) passthroughCommand(args [][]byte) backend.Value {
	cl.lastCmd = "passthrough"
	name := lower(args[0])
	switch {
	case !cl.authed:
		return cl.reject(name, backend.MsgNoAuth)
	case cl.inMulti:
		return cl.reject(name, errPassthroughInMulti(name))
	}
	if what := forwardable(name, args); what != "" {
		return backend.ErrorValue(errPassthroughRefused(what))
	}
	return cl.passthrough(args)
}

// reject answers a command refused before it ran. As in Redis, a refused
// command inside MULTI makes EXEC fail, and a refused EXEC ends the
// transaction with EXECABORT naming the reason.
func (cl *client) reject(name, reply string) backend.Value {
	if name == "exec" {
		cl.inMulti, cl.dirty, cl.queue = false, false, nil
		return backend.ErrorValue(backend.ErrExecAbortBecause(reply))
	}
	cl.dirty = cl.inMulti
	return backend.ErrorValue(reply)
}

// commandCtx returns the context a command runs under: the connection's,
// with the command deadline unless the backend never waits
// (backend.Immediate; a script's run time is bounded by luascripts).
func (cl *client) commandCtx() (context.Context, context.CancelFunc) {
	if cl.s.immediate || cl.alt != nil { // a stand-in (loop_backend.go) never waits
		return cl.ctx, func() {}
	}
	return context.WithTimeout(cl.ctx, cl.s.cfg.CommandTimeout)
}

func (cl *client) keyCommand(kc *keycmd.Command, args [][]byte) backend.Value {
	if kc.Name == "lockproxy" {
		if v, ok := cl.lockproxyOperator(args); ok {
			return v
		}
	}
	ctx, cancel := cl.commandCtx()
	defer cancel()
	v, err := kc.Exec(ctx, cl.store(), cl.db, args)
	if err != nil {
		v = cl.errorValue(kc.Name, err)
	} else {
		cl.touched(kc, args) // tracking and blocked clients (tracking.go)
	}
	if o, ok := acquireOutcome(kc.Name, args, v); ok {
		if cl.s.metrics != nil {
			cl.s.metrics.locks.counts[o].Add(1)
		}
		if o == outcomeContended {
			cl.s.ops.contended(cl.db, args[1])
		}
	}
	return v
}

// store is the backend commands run against: the server's, unless a
// stand-in is set (alt).
func (cl *client) store() backend.Backend {
	if cl.alt != nil {
		return cl.alt
	}
	return cl.s.b
}

// errorValue maps a failure to its reply.
func (cl *client) errorValue(cmd string, err error) backend.Value {
	return cl.s.errorValue(cmd, err, "conn_id", cl.id)
}

// errorValue maps a failure to its reply, for a client or the admin port
// (who: the log fields saying whose command it was): the one place that
// does it.
func (s *Server) errorValue(cmd string, err error, who ...any) backend.Value {
	var re *backend.ReplyError
	switch {
	case errors.As(err, &re):
		return backend.ErrorValue(re.Reply)
	case errors.Is(err, context.DeadlineExceeded):
		return backend.ErrorValue(fmt.Sprintf("TRYAGAIN %s timed out after %s", cmd, s.cfg.CommandTimeout))
	case errors.Is(err, context.Canceled):
		return backend.ErrorValue("TRYAGAIN " + cmd + " cancelled: the server is shutting down")
	}
	s.log.Error("command failed", append(who, "cmd", cmd, "err", err)...)
	return backend.ErrorValue(backend.MsgInternal)
}

// cloneArgs copies args into one new buffer. An empty argument stays an
// empty, non-nil slice (append([]byte(nil), "") would be nil): SET's
// parser tells `PX ""` from no PX by nil.
func cloneArgs(args [][]byte) [][]byte {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	buf := make([]byte, 0, n)
	out := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		out[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	return out
}

func (cl *client) debug(msg string, args ...any) {
	if cl.s.log.Enabled(cl.ctx, slog.LevelDebug) {
		cl.s.log.Debug(msg, append([]any{"conn_id", cl.id}, args...)...)
	}
}
