package proxy

import (
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
)

func cmdPing(cl *client, args [][]byte) backend.Value {
	if !cl.resp3 && cl.subs.count() > 0 && len(args) <= 2 {
		return subscribedPing(args)
	}
	switch len(args) {
	case 1:
		return backend.Status("PONG")
	case 2:
		return backend.Bulk(args[1])
	}
	return backend.ErrorValue(backend.ErrWrongArgs("ping"))
}

func cmdEcho(cl *client, args [][]byte) backend.Value { return backend.Bulk(args[1]) }

func cmdQuit(cl *client, args [][]byte) backend.Value {
	cl.closeNow = true
	cl.leaveAll() // before the close is seen, as in Redis: a PUBLISH then counts it out
	return backend.OKValue
}

func cmdReset(cl *client, args [][]byte) backend.Value {
	cl.db, cl.resp3, cl.name, cl.reply = 0, false, "", replyOn
	cl.out.resp3.Store(false)
	cl.inMulti, cl.dirty, cl.queue = false, false, nil
	cl.authed, cl.user = !cl.s.authRequired(), ""
	cl.setHolder()
	cl.leaveAll()
	cl.s.tracker.disable(cl)
	cl.track = tracking{}
	cl.closeUpstream() // a fresh upstream connection for the fresh state
	return backend.Status("RESET")
}

func cmdSelect(cl *client, args [][]byte) backend.Value {
	db, ok := backend.ParseInt(args[1])
	if !ok {
		return backend.ErrorValue(backend.MsgNotInteger)
	}
	if db < 0 || db >= keycmd.Databases {
		return backend.ErrorValue(backend.MsgDBOutOfRange)
	}
	cl.db = int(db)
	return backend.OKValue
}

func cmdHello(cl *client, args [][]byte) backend.Value {
	proto := 0
	if len(args) >= 2 {
		n, ok := backend.ParseInt(args[1])
		if !ok {
			return backend.ErrorValue(backend.MsgProtoVersion)
		}
		if n < 2 || n > 3 {
			return backend.ErrorValue(backend.MsgNoProto)
		}
		proto = int(n)
	}
	var name []byte
	setName := false
	for j := 2; j < len(args); j++ {
		more := len(args) - j - 1
		switch {
		case strings.EqualFold(string(args[j]), "auth") && more >= 2:
			if v := cl.checkPass(string(args[j+1]), string(args[j+2])); v.Kind == backend.KindError {
				return v
			}
			j += 2
		case strings.EqualFold(string(args[j]), "setname") && more >= 1:
			name, setName = args[j+1], true
			j++
		default:
			return backend.ErrorValue(backend.ErrHelloSyntax(string(args[j])))
		}
	}
	if !cl.authed {
		return backend.ErrorValue(backend.MsgHelloNoAuth)
	}
	if setName {
		if !validName(name) {
			return backend.ErrorValue(backend.MsgClientName)
		}
		cl.name = string(name)
		cl.setHolder()
	}
	if proto != 0 {
		cl.resp3 = proto == 3
		cl.out.resp3.Store(cl.resp3)
	}
	p := int64(2)
	if cl.resp3 {
		p = 3
	}
	return backend.Value{Kind: backend.KindMap, Elems: []backend.Value{
		backend.BulkString("server"), backend.BulkString("redis"),
		backend.BulkString("version"), backend.BulkString(luascripts.RedisVersion),
		backend.BulkString("proto"), backend.Int(p),
		backend.BulkString("id"), backend.Int(cl.id),
		backend.BulkString("mode"), backend.BulkString("standalone"),
		backend.BulkString("role"), backend.BulkString("master"),
		backend.BulkString("modules"), backend.Array(),
	}}
}

// validName reports whether a client name has no spaces, newlines or other
// characters outside '!'..'~', as Redis requires.
func validName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func cmdClient(cl *client, args [][]byte) backend.Value {
	sub := lower(args[1])
	wrong := func() backend.Value { return backend.ErrorValue(backend.ErrWrongArgs("client|" + sub)) }
	switch sub {
	case "setname":
		if len(args) != 3 {
			return wrong()
		}
		if !validName(args[2]) {
			return backend.ErrorValue(backend.MsgClientName)
		}
		cl.name = string(args[2])
		cl.setHolder()
		return backend.OKValue
	case "getname":
		if len(args) != 2 {
			return wrong()
		}
		if cl.name == "" {
			return backend.NilValue
		}
		return backend.BulkString(cl.name)
	case "id":
		if len(args) != 2 {
			return wrong()
		}
		return backend.Int(cl.id)
	case "setinfo":
		if len(args) != 4 {
			return wrong()
		}
		switch lower(args[2]) {
		case "lib-name":
			cl.libName = string(args[3])
		case "lib-ver":
			cl.libVer = string(args[3])
		default:
			return backend.ErrorValue(backend.ErrUnrecognizedOption(string(args[2])))
		}
		return backend.OKValue
	case "info":
		if len(args) != 2 {
			return wrong()
		}
		return backend.Value{Kind: backend.KindVerbatim, Str: []byte(cl.infoLine() + "\n")}
	case "list":
		return cl.clientList(args[2:])
	case "tracking":
		if len(args) < 3 {
			return wrong()
		}
		return cmdClientTracking(cl, args)
	case "caching":
		if len(args) != 3 {
			return wrong()
		}
		return cmdClientCaching(cl, args)
	case "unblock":
		if len(args) != 3 && len(args) != 4 {
			return wrong()
		}
		return cmdClientUnblock(cl, args)
	case "getredir":
		if len(args) != 2 {
			return wrong()
		}
		return cl.getRedir()
	case "no-evict", "no-touch":
		if len(args) != 3 {
			return wrong()
		}
		if on := lower(args[2]); on != "on" && on != "off" {
			return backend.ErrorValue(backend.MsgSyntax)
		}
		return backend.OKValue
	case "reply":
		if len(args) != 3 {
			return wrong()
		}
		switch lower(args[2]) {
		case "on":
			cl.reply = replyOn
		case "off":
			cl.reply = replyOff
		case "skip":
			if cl.reply != replyOff {
				cl.reply = replySkipThis
			}
		default:
			return backend.ErrorValue(backend.MsgSyntax)
		}
		return backend.OKValue
	case "help":
		return backend.Array(
			backend.Status("CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
			backend.Status("GETNAME, SETNAME <name>, ID, INFO, LIST [TYPE <type>] [ID <id> ...], SETINFO <LIB-NAME|LIB-VER> <value>, NO-EVICT <ON|OFF>, NO-TOUCH <ON|OFF>, REPLY <ON|OFF|SKIP>"),
		)
	}
	return backend.ErrorValue(backend.ErrUnknownSubcommand("client", string(args[1])))
}

// infoLine is this client's CLIENT INFO line (the fields clients read).
func (cl *client) infoLine() string {
	resp := "2"
	if cl.resp3 {
		resp = "3"
	}
	return "id=" + strconv.FormatInt(cl.id, 10) + " addr=" + cl.addr + " name=" + cl.name +
		" db=" + strconv.Itoa(cl.db) + " multi=" + strconv.Itoa(map[bool]int{true: len(cl.queue), false: -1}[cl.inMulti]) +
		" cmd=" + cl.lastCmd + " resp=" + resp + " lib-name=" + cl.libName + " lib-ver=" + cl.libVer
}

// clientList answers CLIENT LIST [TYPE type] [ID id …]. Other clients'
// lines hold only what never changes (id, addr): their state belongs to
// their own goroutines.
func (cl *client) clientList(opts [][]byte) backend.Value {
	var ids map[int64]bool
	none := false // TYPE master or replica: lockproxy has none
	typ := ""     // normal or pubsub: clients with subscriptions are pubsub ones
	for i := 0; i < len(opts); i++ {
		switch lower(opts[i]) {
		case "type":
			if i+1 >= len(opts) {
				return backend.ErrorValue(backend.MsgSyntax)
			}
			i++
			switch t := lower(opts[i]); t {
			case "normal", "pubsub":
				typ = t
			case "master", "replica", "slave":
				none = true
			default:
				return backend.ErrorValue(backend.ErrUnknownClientType(string(opts[i])))
			}
		case "id":
			if i+1 >= len(opts) {
				return backend.ErrorValue(backend.MsgSyntax)
			}
			if ids == nil {
				ids = map[int64]bool{}
			}
			for i++; i < len(opts); i++ {
				id, ok := backend.ParseInt(opts[i])
				if !ok || id <= 0 {
					return backend.ErrorValue(backend.MsgInvalidClientID)
				}
				ids[id] = true
			}
		default:
			return backend.ErrorValue(backend.MsgSyntax)
		}
	}
	var b strings.Builder
	if !none {
		var subscribed map[*client]bool
		if typ != "" {
			subscribed = cl.s.broker.subscribers()
		}
		cl.s.mu.Lock()
		for c := range cl.s.clients {
			switch {
			case ids != nil && !ids[c.id]:
			case typ != "" && subscribed[c] != (typ == "pubsub"):
			case c == cl:
				b.WriteString(cl.infoLine() + "\n")
			default:
				b.WriteString("id=" + strconv.FormatInt(c.id, 10) + " addr=" + c.addr + "\n")
			}
		}
		cl.s.mu.Unlock()
	}
	return backend.Value{Kind: backend.KindVerbatim, Str: []byte(b.String())}
}

// crossProtocol reports whether name is POST or Host:, the first words of
// an HTTP request: a browser tricked into sending one to the RESP port
// would otherwise have its body run as commands. Redis closes such a
// connection without a reply, whatever came before; so does lockproxy.
func crossProtocol(name []byte) bool {
	switch len(name) {
	case 4:
		return lower(name) == "post"
	case 5:
		return lower(name) == "host:"
	}
	return false
}

// crossProtocolAttack closes cl after a POST or Host: command, and logs it
// in Redis's words at most once a minute (an attack repeats).
func (s *Server) crossProtocolAttack(cl *client) {
	cl.closeNow = true
	now := time.Now().UnixNano()
	if last := s.attackLogged.Load(); now-last >= int64(time.Minute) && s.attackLogged.CompareAndSwap(last, now) {
		s.log.Warn("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to lockproxy. "+
			"This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your lockproxy instance. Connection aborted.",
			"conn_id", cl.id, "addr", cl.addr)
	}
}
