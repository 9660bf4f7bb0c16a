package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/memory"
)

// TestLoopsLingerStall: a closing connection whose client takes none of
// its replies is closed after lingerStall, its replies cut, rather than
// kept for ever.
func TestLoopsLingerStall(t *testing.T) {
	old := lingerStall
	t.Cleanup(func() { lingerStall = old }) // after the server's cleanup below
	lingerStall = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Config{})
	s := New(Config{DataPath: DataPathLoops}, b)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-served
		b.Close(ctx)
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	v := strings.Repeat("x", 1<<20)
	cmd := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(v), v)
	const n = 30
	go io.WriteString(c, strings.Repeat(cmd, n)+"QUIT\r\n")
	wait.For(t, "the server to take the client", func() bool { return s.clientCount() > 0 })
	// The server forgets the client once it closed it.
	wait.For(t, "the server to close, after QUIT, the connection of a client that reads nothing",
		func() bool { return s.clientCount() == 0 })
	got, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("read after the close: %v", err)
	}
	if full := int64(n * (len(v) + len("$1048576\r\n\r\n"))); got >= full {
		t.Fatalf("got all %d bytes; want them cut", got)
	}
}
