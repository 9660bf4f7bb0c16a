package proxy_test

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/proxy"
)

// TestRequestLimits checks that a request over a limit gets Redis's
// protocol error after the replies to the commands before it, and that the
// connection is then closed.
func TestRequestLimits(t *testing.T) {
	s := startMemory(t, proxy.Config{MaxRequestBytes: 4096, MaxScriptBytes: 1024})
	locked := startMemory(t, proxy.Config{RequirePass: "s3cret"})
	big := strings.Repeat("x", 20000)
	for _, tc := range []struct {
		name   string
		srv    *server
		req    string
		want   []string
		closed bool
	}{
		{name: "bulk over max", srv: s,
			req:  "PING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n",
			want: []string{"+PONG\r\n", "-ERR Protocol error: invalid bulk length\r\n"}, closed: true},
		{name: "bulks adding up over max", srv: s,
			req:  "*3\r\n$3\r\nSET\r\n$3000\r\n" + strings.Repeat("k", 3000) + "\r\n$2000\r\n",
			want: []string{"-ERR Protocol error: invalid bulk length\r\n"}, closed: true},
		{name: "multibulk count over max", srv: s,
			req:  "*100000\r\n",
			want: []string{"-ERR Protocol error: invalid multibulk length\r\n"}, closed: true},
		{name: "inline over max", srv: s,
			req:  "PING\r\nECHO " + strings.Repeat("a", 5000) + "\r\n",
			want: []string{"+PONG\r\n", "-ERR Protocol error: too big inline request\r\n"}, closed: true},
		{name: "count line never ends", srv: s,
			req:  "*" + strings.Repeat("1", 70000),
			want: []string{"-ERR Protocol error: too big mbulk count string\r\n"}, closed: true},
		{name: "script over max", srv: s,
			req:  "*3\r\n$4\r\nEVAL\r\n$2000\r\n" + strings.Repeat(" ", 1992) + "return 1\r\n$1\r\n0\r\n",
			want: []string{"-ERR script is larger than max-script-bytes\r\n"}},
		{name: "many small commands in one burst", srv: s,
			req:  strings.Repeat("*1\r\n$4\r\nPING\r\n", 2000),
			want: strings.Split(strings.Repeat("+PONG\r\n", 2000), "\n")[:2000]},
		{name: "unauthenticated multibulk", srv: locked,
			req:  "*11\r\n",
			want: []string{"-ERR Protocol error: unauthenticated multibulk length\r\n"}, closed: true},
		{name: "unauthenticated bulk", srv: locked,
			req:  "GET k\r\n*2\r\n$3\r\nGET\r\n$20000\r\n",
			want: []string{"-NOAUTH Authentication required.\r\n", "-ERR Protocol error: unauthenticated bulk length\r\n"}, closed: true},
		{name: "AUTH in the same write lifts the limits", srv: locked,
			req:  "AUTH s3cret\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n" + big + "\r\nSTRLEN k\r\nEXISTS k\r\n",
			want: []string{"+OK\r\n", "+OK\r\n", ":20000\r\n", ":1\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tc.srv.addr)
			c.send(tc.req)
			for i, want := range tc.want {
				if !strings.HasSuffix(want, "\n") {
					want += "\n"
				}
				if got := c.line(t); got != want {
					t.Fatalf("reply %d = %q; want %q", i, got, want)
				}
			}
			if tc.closed && !c.closed() {
				t.Error("connection kept after a request over a limit")
			}
		})
	}
}

func TestClientReply(t *testing.T) {
	s := startMemory(t, proxy.Config{})
	c := dial(t, s.addr)
	c.send("CLIENT REPLY OFF\r\nPING a\r\nCLIENT REPLY ON\r\nPING b\r\nCLIENT REPLY SKIP\r\nPING c\r\nPING d\r\nCLIENT REPLY x\r\n" +
		"CLIENT NO-EVICT on\r\nCLIENT NO-TOUCH maybe\r\nCLIENT LIST ID 999999\r\nCLIENT LIST TYPE pubsub\r\nCLIENT LIST TYPE x\r\nCLIENT LIST x\r\n")
	for _, want := range []string{"+OK\r\n", "$1\r\n", "b\r\n", "$1\r\n", "d\r\n", "-ERR syntax error\r\n",
		"+OK\r\n", "-ERR syntax error\r\n", "$0\r\n", "\r\n", "$0\r\n", "\r\n", "-ERR Unknown client type 'x'\r\n", "-ERR syntax error\r\n"} {
		if got := c.line(t); got != want {
			t.Fatalf("got %q; want %q", got, want)
		}
	}
}
