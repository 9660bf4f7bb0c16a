package proxy_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// The whole package's tests run on one front end, the one
// LOCKPROXY_TEST_DATA_PATH names; these run what differs most between the
// two on both, whatever the variable says.
var dataPaths = []string{proxy.DataPathGoroutines, proxy.DataPathLoops}

// TestFrontEndsOrderAroundBlocking: a pipelined batch whose first command
// waits on the backend is answered in order, nothing before the first
// reply (on loops the command runs off the loop and the rest waits).
func TestFrontEndsOrderAroundBlocking(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(_ context.Context, key string) error {
				if key == "slow" {
					close(entered)
					<-release
				}
				return nil
			}}
			s := start(t, proxy.Config{DataPath: path}, b)
			c := dial(t, s.addr)
			c.send("GET slow\r\nPING\r\nSET k v\r\nGET k\r\n")
			<-entered
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.rd.ReadByte(); err == nil {
				t.Fatal("a reply arrived while the first command was still running")
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			close(release)
			for _, want := range []string{"$-1\r\n", "+PONG\r\n", "+OK\r\n", "$1\r\n", "v\r\n"} {
				if got := c.line(t); got != want {
					t.Fatalf("got %q; want %q", got, want)
				}
			}
		})
	}
}

// TestFrontEndsEmptyArgumentOffLoop: a command run off the loop gets its
// arguments copied; an empty one must stay an empty argument.
func TestFrontEndsEmptyArgumentOffLoop(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(context.Context, string) error { return nil }}
			s := start(t, proxy.Config{DataPath: path}, b)
			c := dial(t, s.addr)
			c.send("*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$0\r\n\r\n")
			if got, want := c.line(t), "-ERR value is not an integer or out of range\r\n"; got != want {
				t.Fatalf(`SET k v PX "" = %q; want %q`, got, want)
			}
		})
	}
}

// TestFrontEndsIdleTimeout: an idle client is closed after IdleTimeout,
// an active one is not.
func TestFrontEndsIdleTimeout(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			s := startMemory(t, proxy.Config{DataPath: path, IdleTimeout: 300 * time.Millisecond})
			idle, active := dial(t, s.addr), dial(t, s.addr)
			start := time.Now()
			for time.Since(start) < time.Second {
				active.send("PING\r\n")
				if got := active.line(t); got != "+PONG\r\n" {
					t.Fatalf("active client: PING = %q", got)
				}
				time.Sleep(50 * time.Millisecond) // the active client's pace, far below the timeout
			}
			if !idle.closed() {
				t.Fatal("the idle client was not closed")
			}
		})
	}
}

// TestFrontEndsRefusalAfterReplies: a command over a limit is refused
// after the replies to the commands before it, then the connection ends.
func TestFrontEndsRefusalAfterReplies(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			s := startMemory(t, proxy.Config{DataPath: path, RequirePass: "pw"})
			c := dial(t, s.addr)
			c.send("AUTH pw\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$20000\r\n")
			for _, want := range []string{"+OK\r\n", "+PONG\r\n"} {
				if got := c.line(t); got != want {
					t.Fatalf("got %q; want %q", got, want)
				}
			}
			// Authenticated by then, a 20000-byte bulk is within the limits.
			c.send(string(make([]byte, 20000)) + "\r\n*1\r\n$4\r\nPING\r\n*1\r\n$9999999999\r\n")
			if got := c.line(t); got != "$20000\r\n" {
				t.Fatalf("ECHO of 20000 bytes = %q", got)
			}
			c.rd.Discard(20002)
			for _, want := range []string{"+PONG\r\n", "-ERR Protocol error: invalid bulk length\r\n"} {
				if got := c.line(t); got != want {
					t.Fatalf("got %q; want %q", got, want)
				}
			}
			if !c.closed() {
				t.Fatal("the connection was kept after a refusal")
			}
		})
	}
}

// TestFrontEndsShutdownWaitsForRunningCommand: a client that sends a
// command and closes its connection at once leaves the command running;
// Shutdown returns only after it has ended (the process closes the backend
// next, which must not happen under a live command).
func TestFrontEndsShutdownWaitsForRunningCommand(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var running atomic.Int32
			b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(_ context.Context, key string) error {
				if key == "slow" {
					running.Add(1)
					defer running.Add(-1)
					close(entered)
					<-release
				}
				return nil
			}}
			s := start(t, proxy.Config{DataPath: path}, b)
			c := dial(t, s.addr)
			c.send("GET slow\r\n")
			<-entered
			c.Close()
			// No event says the server read the close while the command
			// runs, nor that Shutdown is waiting: these pauses are the window
			// in which a Shutdown that does not wait would return (shorter
			// ones only let the bug pass, never fail a correct server).
			time.Sleep(100 * time.Millisecond) // the server sees the close
			go func() {
				time.Sleep(300 * time.Millisecond) // the command's length
				close(release)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.srv.Shutdown(ctx)
			if n := running.Load(); n != 0 {
				t.Fatalf("Shutdown returned with %d command(s) still running", n)
			}
		})
	}
}

// failingListener fails its first n Accepts, as a listener out of file
// descriptors does, then accepts.
type failingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, errors.New("accept tcp: too many open files")
	}
	return l.Listener.Accept()
}

// TestFrontEndsAcceptRetries: a failed Accept neither ends Serve nor drops
// the connections being served; accepting resumes.
func TestFrontEndsAcceptRetries(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			fl := &failingListener{Listener: ln}
			fl.n.Store(3)
			b := memory.New(memory.Config{})
			srv := proxy.New(proxy.Config{DataPath: path}, b)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(fl) }()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
				<-served
				b.Close(ctx)
			})
			c := dial(t, ln.Addr().String())
			c.send("PING\r\n")
			if got := c.line(t); got != "+PONG\r\n" {
				t.Fatalf("got %q; want +PONG", got)
			}
			select {
			case err := <-served:
				t.Fatalf("Serve returned %v after failed accepts", err)
			default:
			}
		})
	}
}
