package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// echoCmd is ECHO of n bytes in RESP, and the reply it gets.
func echoCmd(n int) (cmd, reply string) {
	v := strings.Repeat("x", n)
	return fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", n, v), fmt.Sprintf("$%d\r\n%s\r\n", n, v)
}

// TestFrontEndsCloseDeliversReplies: a close the server decides (here
// QUIT) comes after every reply before it reached the client, even one
// that does not read for a while (redis-server delivers all of it too).
func TestFrontEndsCloseDeliversReplies(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			s := startMemory(t, proxy.Config{DataPath: path})
			c := dial(t, s.addr)
			c.SetDeadline(time.Now().Add(30 * time.Second))
			cmd, reply := echoCmd(1 << 20)
			const n = 30
			sent := make(chan error, 1)
			go func() {
				_, err := io.WriteString(c, strings.Repeat(cmd, n)+"QUIT\r\n")
				sent <- err
			}()
			time.Sleep(2 * time.Second) // the client does not read: replies pile up in the server
			got, err := io.ReadAll(c.rd)
			if err != nil {
				t.Fatalf("read: %v after %d bytes", err, len(got))
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			want := strings.Repeat(reply, n) + "+OK\r\n"
			if len(got) != len(want) || string(got) != want {
				t.Fatalf("got %d bytes before the close; want %d", len(got), len(want))
			}
		})
	}
}

// TestFrontEndsHalfCloseGetsReplies: a client that sends commands and
// shuts down its writing half at once gets every reply, the one to a
// command running off the loop and those pipelined after it included
// (redis-server answers such a client too: it runs what it read before it
// reads the end of stream).
func TestFrontEndsHalfCloseGetsReplies(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			entered := make(chan struct{})
			var once sync.Once
			b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(_ context.Context, key string) error {
				if key == "slow" {
					once.Do(func() {
						close(entered)
						time.Sleep(300 * time.Millisecond) // the end of stream arrives meanwhile
					})
				}
				return nil
			}}
			s := start(t, proxy.Config{DataPath: path}, b)
			c := dial(t, s.addr)
			c.send("SET slow 1\r\nGET slow\r\nSET k v\r\nGET k\r\nPING\r\n")
			<-entered
			c.Conn.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c.rd)
			if err != nil {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			if want := "+OK\r\n$1\r\n1\r\n+OK\r\n$1\r\nv\r\n+PONG\r\n"; string(got) != want {
				t.Fatalf("got %q; want %q", got, want)
			}
		})
	}
}

// TestFrontEndsInputBehindRunningCommandBounded: what a client pipelines
// behind a command that runs off the loop is held, up to a bound. The
// goroutine front end stops reading until the command ends and then
// answers everything; gnet cannot stop reading a connection, so past twice
// MaxRequestBytes the event-loop front end closes the client, as Redis
// closes one past client-query-buffer-limit.
func TestFrontEndsInputBehindRunningCommandBounded(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(_ context.Context, key string) error {
				if key == "slow" {
					once.Do(func() { close(entered); <-release })
				}
				return nil
			}}
			s := start(t, proxy.Config{DataPath: path, MaxRequestBytes: 64 << 10}, b)
			var released sync.Once
			t.Cleanup(func() { released.Do(func() { close(release) }) })
			c := dial(t, s.addr)
			c.send("GET slow\r\n")
			<-entered
			const n = 100000 // 600 kB of PING, past the bound (128 KiB) on loops
			go io.WriteString(c, strings.Repeat("PING\r\n", n))
			if path == proxy.DataPathLoops {
				if !c.closed() {
					t.Fatal("the connection was kept while its held input passed the bound")
				}
				return
			}
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := c.rd.ReadByte(); err == nil {
				t.Fatal("a reply arrived while the first command was still running")
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			released.Do(func() { close(release) })
			if got := c.line(t); got != "$-1\r\n" {
				t.Fatalf("GET slow = %q", got)
			}
			for i := range n {
				if got := c.line(t); got != "+PONG\r\n" {
					t.Fatalf("PING #%d = %q", i, got)
				}
			}
		})
	}
}

// TestLoopsOutputBounded: the replies a client does not take are bounded
// on the event loops: past eight times MaxRequestBytes held for it, the
// client is closed (Redis's client-output-buffer-limit; the goroutine
// front end blocks on its write and stops reading instead, so a client
// that never reads stalls there, which is not this test's to show).
func TestLoopsOutputBounded(t *testing.T) {
	s := startMemory(t, proxy.Config{DataPath: proxy.DataPathLoops, MaxRequestBytes: 64 << 10})
	c := dial(t, s.addr)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	cmd, _ := echoCmd(32 << 10)
	batch := strings.Repeat(cmd, 32) // 1 MiB of ECHO, 1 MiB of replies
	for sent := 0; ; sent += len(batch) {
		if sent > 256<<20 {
			t.Fatalf("the server took %d MiB of commands whose replies nobody read", sent>>20)
		}
		if _, err := io.WriteString(c, batch); err != nil {
			return // closed by the server
		}
	}
}
