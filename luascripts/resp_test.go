package luascripts

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// This file holds what the differential test needs: a real redis-server on
// a Unix socket (internal/testsrv would import this package back through
// proxy), a raw RESP client, and a rendering of Values as Redis writes them.

// startRedis starts a redis-server for the test on a Unix socket in a temp
// dir and returns the socket path. It skips the test when redis-server is
// not installed, or fails it when CI is set.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not installed (./test.sh installs it)")
		}
		t.Skip("redis-server is not installed (./test.sh installs it)")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return sock
		}
		select {
		case <-exited:
			t.Fatalf("redis-server exited: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not answer on %s: %v", sock, err)
		}
		time.Sleep(5 * time.Millisecond) // polling for readiness
	}
}

// respConn is a minimal RESP2/RESP3 client.
type respConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRESP(t *testing.T, sock string) *respConn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial redis: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &respConn{c: c, r: bufio.NewReader(c)}
}

// raw sends a command and returns its reply's raw bytes.
func (c *respConn) raw(args ...[]byte) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		return nil, err
	}
	var out []byte
	err := c.readRaw(&out)
	return out, err
}

func (c *respConn) readRaw(out *[]byte) error {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return err
	}
	*out = append(*out, line...)
	body := strings.TrimRight(string(line[1:]), "\r\n")
	switch line[0] {
	case '$', '=', '!':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return err
		}
		*out = append(*out, buf...)
	case '*', '~', '>', '%':
		n, _ := strconv.Atoi(body)
		if line[0] == '%' {
			n *= 2
		}
		for range n {
			if err := c.readRaw(out); err != nil {
				return err
			}
		}
	}
	return nil
}

// do sends a command and parses its RESP2 reply: an error reply comes back
// as a *backend.ReplyError.
func (c *respConn) do(args ...[]byte) (backend.Value, error) {
	raw, err := c.raw(args...)
	if err != nil {
		return backend.Value{}, err
	}
	v, rest, err := parseRESP2(raw)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("trailing bytes %q", rest)
	}
	if err == nil && v.Kind == backend.KindError {
		return backend.Value{}, backend.Reply(string(v.Str))
	}
	return v, err
}

func (c *respConn) mustDo(t *testing.T, args ...string) {
	t.Helper()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	raw, err := c.raw(b...)
	if err == nil && strings.HasPrefix(string(raw), "-") {
		err = errors.New(strings.TrimSpace(string(raw)))
	}
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
}

func parseRESP2(b []byte) (backend.Value, []byte, error) {
	i := strings.Index(string(b), "\r\n")
	if len(b) == 0 || i < 0 {
		return backend.Value{}, nil, errors.New("short reply")
	}
	body, rest := string(b[1:i]), b[i+2:]
	switch b[0] {
	case '+':
		return backend.Status(body), rest, nil
	case '-':
		return backend.ErrorValue(body), rest, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return backend.Int(n), rest, err
	case '$':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return backend.NilValue, rest, nil
		}
		return backend.BulkString(string(rest[:n])), rest[n+2:], nil
	case '*':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return backend.Value{Kind: backend.KindNilArray}, rest, nil
		}
		elems := make([]backend.Value, n)
		for j := range elems {
			var err error
			if elems[j], rest, err = parseRESP2(rest); err != nil {
				return backend.Value{}, nil, err
			}
		}
		return backend.Array(elems...), rest, nil
	}
	return backend.Value{}, nil, fmt.Errorf("unexpected reply %q", b)
}

// render writes v as Redis writes a reply in protocol 2 or 3.
func render(b *strings.Builder, v backend.Value, proto int) {
	switch v.Kind {
	case backend.KindNil:
		b.WriteString(map[bool]string{true: "_\r\n", false: "$-1\r\n"}[proto == 3])
	case backend.KindNilArray:
		b.WriteString(map[bool]string{true: "_\r\n", false: "*-1\r\n"}[proto == 3])
	case backend.KindStatus:
		b.WriteString("+" + string(v.Str) + "\r\n")
	case backend.KindError:
		b.WriteString("-" + string(v.Str) + "\r\n")
	case backend.KindInt:
		fmt.Fprintf(b, ":%d\r\n", v.Int)
	case backend.KindBulk:
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(v.Str), v.Str)
	case backend.KindVerbatim:
		if proto == 3 {
			fmt.Fprintf(b, "=%d\r\ntxt:%s\r\n", len(v.Str)+4, v.Str)
		} else {
			fmt.Fprintf(b, "$%d\r\n%s\r\n", len(v.Str), v.Str)
		}
	case backend.KindBigNumber:
		if proto == 3 {
			fmt.Fprintf(b, "(%s\r\n", v.Str)
		} else {
			fmt.Fprintf(b, "$%d\r\n%s\r\n", len(v.Str), v.Str)
		}
	case backend.KindDouble:
		s := strconv.FormatFloat(v.Float, 'g', 17, 64)
		if proto == 3 {
			fmt.Fprintf(b, ",%s\r\n", s)
		} else {
			fmt.Fprintf(b, "$%d\r\n%s\r\n", len(s), s)
		}
	case backend.KindBool:
		if proto == 3 {
			b.WriteString(map[bool]string{true: "#t\r\n", false: "#f\r\n"}[v.Int != 0])
		} else {
			fmt.Fprintf(b, ":%d\r\n", v.Int)
		}
	case backend.KindArray, backend.KindSet, backend.KindMap:
		head, n := '*', len(v.Elems)
		if proto == 3 && v.Kind == backend.KindSet {
			head = '~'
		} else if proto == 3 && v.Kind == backend.KindMap {
			head, n = '%', n/2
		}
		fmt.Fprintf(b, "%c%d\r\n", head, n)
		for _, e := range v.Elems {
			render(b, e, proto)
		}
	}
}
