package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// panicLog records error logs, where the proxy reports recovered panics.
type panicLog struct {
	mu   sync.Mutex
	msgs []string
}

func (p *panicLog) Enabled(context.Context, slog.Level) bool { return true }
func (p *panicLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		p.mu.Lock()
		p.msgs = append(p.msgs, r.Message)
		p.mu.Unlock()
	}
	return nil
}
func (p *panicLog) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *panicLog) WithGroup(string) slog.Handler      { return p }

// FuzzDispatch sends arbitrary bytes to a lockproxy on the memory backend.
// Invariants: the server never panics or logs an internal error, answers
// and closes within a deadline once the client stops sending, whatever it
// sends parses as RESP, and when the input is a sequence of well-formed
// commands, each of them gets exactly one reply.
func FuzzDispatch(f *testing.F) {
	for _, seed := range []string{
		"PING\r\n",
		"*3\r\n$3\r\nSET\r\n$4\r\nlock\r\n$3\r\ntok\r\n",
		"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n",
		"set k v ex 8 nx\r\nget k\r\npttl k\r\n",
		"EVAL \"return redis.call('get', KEYS[1])\" 1 k\r\n",
		"MULTI\r\nSETNX k v\r\nEXPIRE k 10\r\nEXEC\r\n",
		"HELLO 3\r\nSET k v GET\r\nDELIFEQ k v\r\n",
		"*1\r\n$-5\r\n",
		"*2\r\n$4\r\nECHO\r\n$3\r\nab",
		"SET \"unbalanced\r\n",
		"EVALSHA ffffffffffffffffffffffffffffffffffffffff 0\r\nSCRIPT LOAD \"return 1\"\r\n",
		"CLIENT SETNAME x\r\nCLIENT GETNAME\r\nINFO\r\nCOMMAND COUNT\r\nCONFIG GET save\r\n",
		"SELECT 3\r\nSET k v KEEPTTL XX\r\nEXPIRE k 100 GT LT\r\n",
		"MULTI\r\nSET k v\r\nNOSUCH\r\nEXEC\r\nMULTI\r\nMULTI\r\nDISCARD\r\nEXEC\r\n",
		"*2\r\n$4\r\nPING\r\n$100000\r\n",
		"*3\r\n$4\r\nEVAL\r\n$22\r\nreturn redis.call('x')\r\n$1\r\n0\r\nPING\r\nQUIT\r\nPING\r\n",
		"  \r\n\nPING x\nECHO\r\n*1\r\n$4\r\nTIME\r\n",
	} {
		f.Add([]byte(seed))
	}
	logs := &panicLog{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	b := memory.New(memory.Config{Runner: luascripts.New(luascripts.Config{TimeLimit: 200 * time.Millisecond})})
	srv := proxy.New(proxy.Config{Logger: slog.New(logs), MaxRequestBytes: 1 << 16, CommandTimeout: 2 * time.Second, DataPath: os.Getenv("LOCKPROXY_TEST_DATA_PATH")}, b)
	go srv.Serve(ln)
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		b.Close(ctx)
	})

	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(8 * time.Second))
		c.Write(in)
		// Half-close: the server answers every complete command, then sees
		// EOF and closes, so reading to EOF proves it neither hung nor
		// dropped the connection without finishing what it had.
		c.(*net.TCPConn).CloseWrite()
		rd := bufio.NewReader(c)
		replies := 0
		for {
			_, err := readRESP(rd)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("input %q: reply does not parse as RESP: %v", in, err)
			}
			replies++
		}
		if want, ok := countCommands(in); ok && replies != want {
			t.Fatalf("input %q: %d replies to %d commands", in, replies, want)
		}
		logs.mu.Lock()
		defer logs.mu.Unlock()
		if len(logs.msgs) > 0 {
			t.Fatalf("input %q: the server logged errors: %v", in, logs.msgs)
		}
	})
}

// readRESP reads one RESP2/RESP3 value and returns its raw text.
func readRESP(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		if line == "" {
			return "", io.EOF
		}
		return "", err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("bad line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return line, nil
	case '$', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", fmt.Errorf("bad length in %q", line)
		}
		if n < 0 {
			return line, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return line + string(buf), nil
	case '*', '~', '%':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", fmt.Errorf("bad count in %q", line)
		}
		if line[0] == '%' {
			n *= 2
		}
		out := line
		for range n {
			v, err := readRESP(rd)
			if err != nil {
				return "", err
			}
			out += v
		}
		return out, nil
	}
	return "", fmt.Errorf("unknown type in %q", line)
}

// countCommands counts the commands in, when in is nothing but complete,
// well-formed commands (RESP multibulk, or inline lines without quotes)
// whose replies can be counted: a QUIT ends the count, and any CLIENT
// command (CLIENT REPLY may mute replies) makes it unknown.
func countCommands(in []byte) (int, bool) {
	n := 0
	for len(in) > 0 {
		var name []byte
		if in[0] == '*' {
			line, rest, ok := bytes.Cut(in[1:], []byte("\r\n"))
			count, err := strconv.Atoi(string(line))
			if !ok || err != nil || count < 1 || string(line) != strconv.Itoa(count) {
				return 0, false
			}
			in = rest
			for i := range count {
				if len(in) == 0 || in[0] != '$' {
					return 0, false
				}
				line, rest, ok := bytes.Cut(in[1:], []byte("\r\n"))
				size, err := strconv.Atoi(string(line))
				if !ok || err != nil || size < 0 || string(line) != strconv.Itoa(size) ||
					len(rest) < size+2 || string(rest[size:size+2]) != "\r\n" {
					return 0, false
				}
				if i == 0 {
					name = rest[:size]
				}
				in = rest[size+2:]
			}
		} else {
			line, rest, ok := bytes.Cut(in, []byte("\n"))
			if !ok || bytes.ContainsAny(line, "\"'") {
				return 0, false
			}
			in = rest
			fields := bytes.Split(bytes.TrimSuffix(line, []byte("\r")), []byte(" "))
			for _, f := range fields {
				if len(f) > 0 {
					name = f
					break
				}
			}
			if name == nil {
				continue // a blank line is no command
			}
		}
		n++
		switch strings.ToLower(string(name)) {
		case "quit":
			return n, true
		case "client":
			return 0, false
		}
	}
	return n, true
}
