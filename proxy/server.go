package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/backend"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Freed, when set, hears of large frees the proxy sees: a request or
	// a reply of a MiB or more, once it is done with (internal/reclaim).
	// It must not block.
	Freed func(n int)
	// RequirePass makes clients AUTH before anything else: it is the
	// password of the "default" user. default: none
	RequirePass string
	// Users are named users clients may AUTH as. With Users and no
	// RequirePass, the default user is disabled: every client must AUTH
	// as one of them. default: none
	Users []User
	// NoFlush refuses FLUSHDB and FLUSHALL to every user, for deployments
	// that want them impossible (config key allow-flush: no). Without it
	// they are refused only to users without Admin. default: allowed
	NoFlush bool
	// MaxClients bounds concurrent connections. default: 10000 (as Redis)
	MaxClients int
	// MaxRequestBytes bounds one command's size on the wire; a longer one
	// is refused with Redis's protocol error before its body is read.
	// default: 8 MiB
	MaxRequestBytes int64
	// MaxScriptBytes bounds one script's source. default: 1 MiB
	MaxScriptBytes int
	// MaxScriptCacheBytes bounds the script cache. default: 64 MiB
	MaxScriptCacheBytes int
	// CommandTimeout bounds one command, backend work included. default: 10s
	CommandTimeout time.Duration
	// IdleTimeout closes a connection that has sent nothing for this long,
	// as Redis's "timeout" does; the clock restarts at every read, so a
	// command that runs long never counts as idle. default: 0, never
	IdleTimeout time.Duration
	// Passthrough, when set, receives every command lockproxy does not
	// serve itself (see passthrough.go for what is not forwarded).
	// default: none, such commands get Redis's unknown-command error
	Passthrough *Upstream
	// BackendName is reported by INFO. default: "memory"
	BackendName string
	// Instance names this instance in the holder of each lock it grants
	// (backend.Holder, LOCKPROXY LOCK). default: none (empty)
	Instance string
	// Logger receives errors and, at debug level, per-command lines.
	// default: discard
	Logger *slog.Logger
	// Registerer receives the proxy's metrics. default: none kept
	Registerer prometheus.Registerer
	// DataPath is the front end: DataPathLoops (gnet event loops; the
	// listener must yield *net.TCPConn or *net.UnixConn, so not TLS) or
	// DataPathGoroutines (a goroutine per connection, on redcon; any
	// listener). default: DataPathLoops
	DataPath string
	// Loops is the number of event loops on DataPathLoops.
	// default: GOMAXPROCS-1, at least 1. A loop waits in epoll_wait, a
	// system call; while a P stays idle, Go's sysmon leaves a P blocked in
	// a system call alone, but with every P in one it takes them back every
	// 20µs and wakes threads to do it: on 2 cores, 1 loop spent 18-25 µs
	// of CPU per lock cycle where 2 loops spent 30-35.
	Loops int
}

// The front ends Config.DataPath names.
const (
	DataPathGoroutines = "goroutines"
	DataPathLoops      = "loops"
)

func (c Config) withDefaults() Config {
	if c.MaxClients <= 0 {
		c.MaxClients = 10000
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 8 << 20
	}
	if c.MaxScriptBytes <= 0 {
		c.MaxScriptBytes = 1 << 20
	}
	if c.MaxScriptCacheBytes <= 0 {
		c.MaxScriptCacheBytes = 64 << 20
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = 10 * time.Second
	}
	if c.DataPath == "" {
		c.DataPath = DataPathLoops
	}
	if c.Loops <= 0 {
		c.Loops = max(1, runtime.GOMAXPROCS(0)-1)
	}
	if c.BackendName == "" {
		c.BackendName = "memory"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Server serves RESP clients from a Backend. It is safe for concurrent use.
// Serve runs until Shutdown; the Server never closes the Backend.
type Server struct {
	cfg       Config
	b         backend.Backend
	log       *slog.Logger
	scripts   *scriptCache
	functions *functionLibs // FUNCTION LOAD's libraries (cmd_function.go)
	broker    *broker       // this instance's pub/sub subscribers (pubsub.go)
	tracker   *tracker      // CLIENT TRACKING's table (tracking.go)
	remote    *remote       // invalidations to and from the other instances (tracking_remote.go)
	blockers  blockers      // clients blocked in BLPOP/BRPOP (blocking.go)
	started   time.Time
	metrics   *metrics // nil without a Registerer
	ops       opsView  // contended keys and TRYAGAIN replies, for the status page
	// immediate: the backend never blocks (backend.Immediate), so key
	// commands need no deadline of their own.
	immediate bool

	ctx    context.Context // cancelled when the drain times out
	cancel context.CancelFunc

	nextID   atomic.Int64
	mu       sync.Mutex
	clients  map[*client]struct{}
	ln       *drainListener
	draining bool
	drain    atomic.Bool   // draining, for the event loops to read without mu
	idle     chan struct{} // closed when draining and no client is left

	stats struct {
		connections atomic.Int64
		commands    atomic.Int64
		errors      errorStats // INFO's Errorstats
	}
	tuned        tuned        // CONFIG SET's encoding settings (cmd_harness.go)
	attackLogged atomic.Int64 // when a cross-protocol attack was last logged (Unix ns; crossProtocol)
}

// New returns a Server for b.
func New(cfg Config, b backend.Backend) *Server {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	_, immediate := b.(backend.Immediate)
	s := &Server{immediate: immediate,
		cfg: cfg, b: b, log: cfg.Logger, scripts: newScriptCache(cfg.MaxScriptCacheBytes), functions: newFunctionLibs(), broker: newBroker(), tracker: newTracker(),
		started: time.Now(), ctx: ctx, cancel: cancel,
		clients: make(map[*client]struct{}), idle: make(chan struct{}),
	}
	if cfg.Registerer != nil {
		s.metrics = newMetrics(cfg.Registerer, s)
	}
	s.remote = newRemote(s, b)
	s.broker.internal, s.broker.lost = s.remote.receive, func() { s.tracker.invalidate(nil, nil) }
	s.tracker.first = s.remote.tracks
	if p, ok := b.(backend.Publisher); ok {
		p.SetHub(s.broker) // its scripts' PUBLISH reach this instance's subscribers
	}
	return s
}

// Serve accepts clients on ln until Shutdown, then returns nil.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.DataPath == DataPathLoops {
		return s.serveLoops(ln)
	}
	dl := &drainListener{Listener: ln, done: make(chan struct{}), max: s.cfg.MaxRequestBytes, idle: s.cfg.IdleTimeout, log: s.log}
	if !s.listening(dl) {
		return nil
	}
	srv := redcon.NewServerNetwork("", "", s.serveRESP, s.accept, s.closed)
	err := srv.Serve(dl)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// listening makes dl the listener Shutdown closes; it reports false when
// the server is already draining (Serve then returns at once).
func (s *Server) listening(dl *drainListener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.ln = dl
	return true
}

// Addr returns the address Serve listens on, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown stops accepting, lets the commands every client already sent
// finish and their replies reach the client, and closes the connections.
// If ctx ends first, running commands are cancelled and the connections
// closed at once; Shutdown then returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		s.drain.Store(true)
		if s.ln != nil {
			s.ln.Listener.Close() // stop accepting; redcon's loop waits in drainListener
		}
		for cl := range s.clients {
			cl.wake() // idle readers return, busy ones finish their batch first
		}
		if len(s.clients) == 0 {
			close(s.idle)
		}
	}
	dl := s.ln
	s.mu.Unlock()

	var err error
	select {
	case <-s.idle:
	case <-ctx.Done():
		err = ctx.Err()
		s.cancel()
	}
	if dl != nil {
		dl.release() // redcon's accept loop ends and closes what is left
	}
	s.remote.close()
	return err
}

func (s *Server) accept(conn redcon.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	if len(s.clients) >= s.cfg.MaxClients {
		conn.WriteError(backend.MsgMaxClients)
		return false // redcon flushes the reply and closes
	}
	cl := newClient(s, conn.RemoteAddr())
	cl.conn = conn
	s.clients[cl] = struct{}{}
	conn.SetContext(cl)
	if lc, ok := conn.NetConn().(*limitConn); ok && s.authRequired() {
		lc.authed = func() bool { return cl.authed } // read on the connection's goroutine only
	}
	s.stats.connections.Add(1)
	return true
}

func (s *Server) closed(conn redcon.Conn, err error) {
	cl, _ := conn.Context().(*client)
	if cl == nil {
		return
	}
	cl.cancel()
	cl.closeUpstream() // on the connection's goroutine, as every use of it
	s.forget(cl)
}

// register adds a client of the event-loop front end; false: the server
// drains, the connection is to be closed.
func (s *Server) register(cl *client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.clients[cl] = struct{}{}
	s.stats.connections.Add(1)
	return true
}

// forget removes a closed client and ends a drain that waited for it.
func (s *Server) forget(cl *client) {
	cl.leaveAll()
	s.tracker.forget(cl)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clients, cl)
	if s.draining && len(s.clients) == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
}

func (s *Server) clientCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// drainListener lets Shutdown close the real listener without ending
// redcon's accept loop (which would close every connection at once): after
// the listener fails, Accept waits for release.
type drainListener struct {
	net.Listener
	max  int64
	idle time.Duration
	log  *slog.Logger
	done chan struct{}
	once sync.Once
}

func (l *drainListener) Accept() (net.Conn, error) {
	c, err := accept(l.Listener, l.log)
	if err != nil {
		<-l.done
		return nil, net.ErrClosed
	}
	lc := newLimitConn(c, l.max)
	lc.idle = l.idle
	return lc, nil
}

func (l *drainListener) release() { l.once.Do(func() { close(l.done) }) }

// accept returns the next connection of ln. A failure other than a closed
// listener (out of file descriptors, a connection aborted before it was
// accepted) is logged and retried with a backoff of up to a second, as
// net/http does: the connections being served stay, and so does the
// listener. The error returned is the closed listener's.
func accept(ln net.Listener, log *slog.Logger) (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err == nil || errors.Is(err, net.ErrClosed) {
			return c, err
		}
		backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
		log.Error("accept failed; retrying", "err", err, "in", backoff)
		time.Sleep(backoff)
	}
}
