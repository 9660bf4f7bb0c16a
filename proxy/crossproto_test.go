package proxy_test

import (
	"testing"

	"github.com/lockproxy/lockproxy/proxy"
)

// TestCrossProtocolClosed: an HTTP request sent to the RESP port (a page in
// a browser can make one) is closed at POST or Host: without a reply, and
// nothing after it runs, as in Redis; so is whatever follows QUIT in the
// same read. Both front ends.
func TestCrossProtocolClosed(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path, func(t *testing.T) {
			s := startMemory(t, proxy.Config{DataPath: path})
			keep := dial(t, s.addr)
			keep.send("SET keep 1\r\n")
			if got := keep.line(t); got != "+OK\r\n" {
				t.Fatalf("SET keep = %q", got)
			}

			post := dial(t, s.addr)
			post.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 35\r\n\r\nSET xproto pwned\r\nFLUSHALL\r\n")
			if !post.closed() {
				t.Error("POST: the connection was answered or left open; want it closed without a reply")
			}
			host := dial(t, s.addr)
			host.send("PING\r\nHost: x\r\nSET xproto pwned\r\n")
			if got := host.line(t); got != "+PONG\r\n" {
				t.Fatalf("PING = %q", got)
			}
			if !host.closed() {
				t.Error("Host: the connection was answered or left open; want it closed without a reply")
			}
			quit := dial(t, s.addr)
			quit.send("QUIT\r\nSET xproto afterquit\r\n")
			if got := quit.line(t); got != "+OK\r\n" {
				t.Fatalf("QUIT = %q", got)
			}
			if !quit.closed() {
				t.Error("QUIT: the connection stayed open")
			}

			keep.send("GET xproto\r\nGET keep\r\n")
			for _, want := range []string{"$-1\r\n", "$1\r\n", "1\r\n"} {
				if got := keep.line(t); got != want {
					t.Errorf("after the attacks: got %q; want %q (GET xproto nil, keep kept)", got, want)
				}
			}
		})
	}
}
