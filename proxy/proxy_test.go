package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// hookBackend is the memory backend with a hook before Get and Set, to
// inject panics and slow operations.
type hookBackend struct {
	backend.Backend // an interface: the hooks may block, so the wrapper is not backend.Immediate
	hook            func(ctx context.Context, key string) error
}

func (h *hookBackend) Get(ctx context.Context, db int, key string) ([]byte, bool, error) {
	if err := h.hook(ctx, key); err != nil {
		return nil, false, err
	}
	return h.Backend.Get(ctx, db, key)
}

func (h *hookBackend) Set(ctx context.Context, db int, key string, tok []byte, o backend.SetOptions) (backend.SetResult, error) {
	if err := h.hook(ctx, key); err != nil {
		return backend.SetResult{}, err
	}
	return h.Backend.Set(ctx, db, key, tok, o)
}

type server struct {
	srv    *proxy.Server
	addr   string
	served chan error
}

// start serves b on a free port, on the front end LOCKPROXY_TEST_DATA_PATH
// names (the default, loops, when unset) unless cfg names one.
func start(t *testing.T, cfg proxy.Config, b backend.Backend) *server {
	t.Helper()
	if cfg.DataPath == "" {
		cfg.DataPath = os.Getenv("LOCKPROXY_TEST_DATA_PATH")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{srv: proxy.New(cfg, b), addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { s.served <- s.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.srv.Shutdown(ctx)
		<-s.served
		b.Close(ctx)
	})
	return s
}

func startMemory(t *testing.T, cfg proxy.Config) *server {
	return start(t, cfg, memory.New(memory.Config{}))
}

type rawConn struct {
	net.Conn
	rd *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{Conn: c, rd: bufio.NewReader(c)}
}

func (c *rawConn) send(s string) {
	if _, err := io.WriteString(c, s); err != nil {
		panic(err)
	}
}

func (c *rawConn) line(t *testing.T) string {
	t.Helper()
	l, err := c.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, l)
	}
	return l
}

// closed reports whether the server closed the connection within 5
// seconds (a read that times out does not count).
func (c *rawConn) closed() bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.rd.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestPipeliningAndInline(t *testing.T) {
	s := startMemory(t, proxy.Config{})
	c := dial(t, s.addr)
	var req, want strings.Builder
	for i := range 200 {
		req.WriteString("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n" + string(rune('a'+i%26)) + "\r\n")
		req.WriteString("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
		want.WriteString("+OK\r\n$1\r\n" + string(rune('a'+i%26)) + "\r\n")
	}
	req.WriteString("PING\r\nSET inline \"a b\"\r\nGET inline\r\n")
	want.WriteString("+PONG\r\n+OK\r\n$3\r\na b\r\n")
	c.send(req.String())
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c.rd, got); err != nil {
		t.Fatalf("read replies: %v (got %q)", err, got)
	}
	if string(got) != want.String() {
		t.Fatalf("pipelined replies out of order or wrong:\n got %q\nwant %q", got, want.String())
	}
}

func TestGoRedisBothProtocols(t *testing.T) {
	s := startMemory(t, proxy.Config{})
	for _, p := range []int{2, 3} {
		rdb := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: p})
		ctx := t.Context()
		if err := rdb.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
			t.Fatalf("RESP%d SET: %v", p, err)
		}
		if v, err := rdb.Get(ctx, "k").Result(); v != "v" || err != nil {
			t.Fatalf("RESP%d GET = %q, %v", p, v, err)
		}
		if _, err := rdb.Get(ctx, "absent").Result(); !errors.Is(err, redis.Nil) {
			t.Fatalf("RESP%d GET absent = %v", p, err)
		}
		if v, err := rdb.Eval(ctx, "return true", nil).Result(); err != nil || v != int64(1) {
			t.Fatalf("RESP%d EVAL true = %v, %v", p, v, err)
		}
		rdb.Close()
	}
}

func TestRequirePass(t *testing.T) {
	s := startMemory(t, proxy.Config{RequirePass: "s3cret"})
	c := dial(t, s.addr)
	for _, step := range []struct{ req, want string }{
		{"GET k\r\n", "-NOAUTH Authentication required.\r\n"},
		{"NOSUCH\r\n", "-ERR unknown command 'NOSUCH', with args beginning with: \r\n"},
		{"AUTH wrong\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"AUTH other s3cret\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"HELLO 3\r\n", "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{"AUTH s3cret\r\n", "+OK\r\n"},
		{"GET k\r\n", "$-1\r\n"},
	} {
		c.send(step.req)
		if got := c.line(t); got != step.want {
			t.Errorf("%q = %q; want %q", step.req, got, step.want)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Password: "s3cret", Protocol: 3})
	defer rdb.Close()
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("go-redis with the password (HELLO 3 AUTH): %v", err)
	}
	bad := redis.NewClient(&redis.Options{Addr: s.addr, Password: "nope"})
	defer bad.Close()
	if err := bad.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("go-redis with a wrong password = %v; want WRONGPASS", err)
	}
}

func TestMaxClients(t *testing.T) {
	s := startMemory(t, proxy.Config{MaxClients: 2})
	a, b := dial(t, s.addr), dial(t, s.addr)
	for _, c := range []*rawConn{a, b} {
		c.send("PING\r\n")
		if got := c.line(t); got != "+PONG\r\n" {
			t.Fatalf("PING = %q", got)
		}
	}
	third := dial(t, s.addr)
	if got := third.line(t); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("third client got %q", got)
	}
	if !third.closed() {
		t.Fatal("the refused client was not closed")
	}
	a.Close()
	// Once a client leaves, a new one is served again.
	var d *rawConn
	for deadline := time.Now().Add(5 * time.Second); ; {
		d = dial(t, s.addr)
		d.send("PING\r\n")
		if l, _ := d.rd.ReadString('\n'); l == "+PONG\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no room for a new client after one left")
		}
	}
}

func TestMalformedInput(t *testing.T) {
	s := startMemory(t, proxy.Config{})
	for _, tc := range []struct {
		name, req string
		want      []string
	}{
		{"bad bulk length", "*1\r\n$abc\r\n", []string{"-ERR Protocol error: invalid bulk length\r\n"}},
		{"bad multibulk length", "*x\r\n", []string{"-ERR Protocol error: invalid multibulk length\r\n"}},
		{"not a bulk", "*1\r\n+PING\r\n", []string{"-ERR Protocol error: expected '$', got '+'\r\n"}},
		{"unbalanced quotes", "SET \"abc\r\n", []string{"-ERR Protocol error: unbalanced quotes in request\r\n"}},
		// redcon drops the commands before a malformed one in the same
		// read; the proxy must answer them first, as Redis does.
		{"unbalanced quotes after commands", "PING\r\nECHO 'a b'\r\nSET \"abc\r\n",
			[]string{"+PONG\r\n", "$3\r\n", "a b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"}},
		{"bulk without CRLF after commands", "PING\r\n*1\r\n$4\r\nPINGxx\r\n",
			[]string{"+PONG\r\n", "-ERR Protocol error: invalid bulk length\r\n"}},
		{"bad count after commands", "PING\r\n*x\r\n",
			[]string{"+PONG\r\n", "-ERR Protocol error: invalid multibulk length\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s.addr)
			c.send(tc.req)
			for _, want := range tc.want {
				if got := c.line(t); got != want {
					t.Errorf("%q: got %q; want %q", tc.req, got, want)
				}
			}
			if !c.closed() {
				t.Error("connection kept after a protocol error")
			}
		})
	}
	// The server is still fine.
	c := dial(t, s.addr)
	c.send("PING\r\n")
	if got := c.line(t); got != "+PONG\r\n" {
		t.Fatalf("PING after malformed input = %q", got)
	}
}

// TestEmptyMultibulk: a multibulk count of 0 or less is no command, as
// Redis reads it (its protocol.tcl "Negative multibulk length"). Both
// front ends; on the goroutine one also when the count line arrives in
// pieces, each read alone (net.Pipe hands over one write per read).
func TestEmptyMultibulk(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			s := startMemory(t, proxy.Config{DataPath: path})
			c := dial(t, s.addr)
			c.send("*-10\r\nPING\r\n*0\r\n*-1\r\nECHO a\r\n")
			for _, want := range []string{"+PONG\r\n", "$1\r\n", "a\r\n"} {
				if got := c.line(t); got != want {
					t.Fatalf("got %q; want %q", got, want)
				}
			}
		})
	}
	t.Run("pieces", func(t *testing.T) {
		ln := newPipeListener()
		srv := proxy.New(proxy.Config{DataPath: proxy.DataPathGoroutines}, memory.New(memory.Config{}))
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Shutdown(context.Background()) })
		c := &rawConn{Conn: ln.dial(), rd: nil}
		c.rd = bufio.NewReader(c.Conn)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() { // a pipe's writes wait for the reads: the replies are read below meanwhile
			for _, part := range []string{"PING\r\n*", "-1", "0\r\n", "*", "-", "3\r\nPING\r\n", "*0", "\r\n*2\r\n$4\r\nECHO\r\n$1\r\nb\r\n"} {
				if _, err := io.WriteString(c, part); err != nil {
					return // the reads below report what went wrong
				}
			}
		}()
		for _, want := range []string{"+PONG\r\n", "+PONG\r\n", "$1\r\n", "b\r\n"} {
			if got := c.line(t); got != want {
				t.Fatalf("count lines in pieces: got %q; want %q", got, want)
			}
		}
	})
}

// pipeListener accepts the server ends of net.Pipes that dial makes.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func TestPanicRecovery(t *testing.T) {
	b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(_ context.Context, key string) error {
		if key == "boom" {
			panic("injected")
		}
		return nil
	}}
	s := start(t, proxy.Config{}, b)
	other := dial(t, s.addr)
	c := dial(t, s.addr)
	c.send("GET boom\r\n")
	if got := c.line(t); got != "-ERR internal error\r\n" {
		t.Fatalf("a panicking command = %q; want -ERR internal error", got)
	}
	if !c.closed() {
		t.Fatal("the panicking connection was kept")
	}
	other.send("SET k v\r\n")
	if got := other.line(t); got != "+OK\r\n" {
		t.Fatalf("another client after the panic = %q", got)
	}
	d := dial(t, s.addr)
	d.send("GET k\r\n")
	if got := d.line(t); got != "$1\r\n" {
		t.Fatalf("a new client after the panic = %q", got)
	}
}

func TestCommandTimeout(t *testing.T) {
	b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(ctx context.Context, key string) error {
		if key == "stuck" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	s := start(t, proxy.Config{CommandTimeout: 50 * time.Millisecond}, b)
	c := dial(t, s.addr)
	c.send("SET stuck v NX PX 1000\r\nPING\r\n")
	if got := c.line(t); !strings.HasPrefix(got, "-TRYAGAIN set timed out") {
		t.Fatalf("a command past its deadline = %q; want TRYAGAIN", got)
	}
	if got := c.line(t); got != "+PONG\r\n" {
		t.Fatalf("the next command = %q", got)
	}
}

// TestShutdownDrains checks that Shutdown delivers the reply of a command
// in flight, closes idle clients, refuses new ones and returns.
func TestShutdownDrains(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(_ context.Context, key string) error {
		if key == "slow" {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}}
	s := start(t, proxy.Config{}, b)
	idle := dial(t, s.addr)
	idle.send("PING\r\n")
	idle.line(t)
	busy := dial(t, s.addr)
	busy.send("SET slow v NX PX 10000\r\n")
	<-entered

	done := make(chan error, 1)
	go func() { done <- s.srv.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Fatal("an idle client was not closed by Shutdown")
	}
	if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a new connection was accepted during Shutdown")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a command in flight", err)
	default:
	}
	close(release)
	if got := busy.line(t); got != "+OK\r\n" {
		t.Fatalf("the in-flight command's reply = %q; want +OK", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-s.served; err != nil {
		t.Fatalf("Serve = %v", err)
	}
	s.served <- nil // for the cleanup
}

// TestEvalSHAAfterFlush: a connection that ran a script by EVALSHA gets
// NOSCRIPT for it once another connection flushed the script cache, or
// once the cache filled up and started over, and runs it again once it is
// loaded again.
func TestEvalSHAAfterFlush(t *testing.T) {
	const src = "return 7"
	for _, empty := range []string{"flush", "full"} {
		t.Run(empty, func(t *testing.T) {
			s := startMemory(t, proxy.Config{MaxScriptCacheBytes: 2 * len(src)})
			a, b := dial(t, s.addr), dial(t, s.addr)
			a.send("*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\n" + src + "\r\n")
			if l := a.line(t); l != "$40\r\n" {
				t.Fatalf("SCRIPT LOAD = %q", l)
			}
			sha := strings.TrimSpace(a.line(t))
			evalsha := "*3\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha + "\r\n$1\r\n0\r\n"
			for range 2 {
				a.send(evalsha)
				if l := a.line(t); l != ":7\r\n" {
					t.Fatalf("EVALSHA = %q", l)
				}
			}
			if empty == "flush" {
				b.send("SCRIPT FLUSH\r\n")
			} else {
				b.send("SCRIPT LOAD \"return 888\"\r\n") // does not fit beside src: the cache starts over
			}
			b.line(t)
			if empty == "full" {
				b.line(t)
			}
			a.send(evalsha)
			if l := a.line(t); !strings.HasPrefix(l, "-NOSCRIPT") {
				t.Fatalf("EVALSHA after the cache was emptied = %q, want NOSCRIPT", l)
			}
			b.send("*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\n" + src + "\r\n")
			b.line(t)
			b.line(t)
			a.send(evalsha)
			if l := a.line(t); l != ":7\r\n" {
				t.Fatalf("EVALSHA after loading it again = %q", l)
			}
		})
	}
}
