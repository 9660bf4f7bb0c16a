package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// respConn is a raw RESP connection that returns each reply's bytes.
type respConn struct {
	c  net.Conn
	rd *bufio.Reader
}

func dialRESP(t testing.TB, addr string) *respConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &respConn{c: c, rd: bufio.NewReader(c)}
}

// encodeCommand renders args as a RESP array of bulk strings.
func encodeCommand(args []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// do sends one command and returns its raw reply.
func (r *respConn) do(args ...string) (string, error) {
	r.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.c.Write(encodeCommand(args)); err != nil {
		return "", err
	}
	return r.reply()
}

// reply reads one whole reply, nested ones included, as raw bytes.
func (r *respConn) reply() (string, error) {
	var b strings.Builder
	err := r.readValue(&b)
	return b.String(), err
}

func (r *respConn) readValue(b *strings.Builder) error {
	line, err := r.rd.ReadString('\n')
	if err != nil {
		return err
	}
	b.WriteString(line)
	if len(line) < 3 {
		return fmt.Errorf("short line %q", line)
	}
	body := strings.TrimSuffix(line[1:], "\r\n")
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return err
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r.rd, buf); err != nil {
			return err
		}
		b.Write(buf)
		return nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range n {
			if err := r.readValue(b); err != nil {
				return err
			}
		}
		if line[0] == '|' { // an attribute precedes the real reply
			return r.readValue(b)
		}
		return nil
	}
	return fmt.Errorf("unknown reply type in %q", line)
}

func ioReadFull(rd *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := rd.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// splitCommand splits a corpus line into arguments, redis-cli style:
// spaces separate, "double quotes" take \n \r \t \" \\ and \xHH escapes,
// 'single quotes' take text as is.
func splitCommand(line string) ([]string, error) {
	var args []string
	i := 0
	for {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i == len(line) {
			return args, nil
		}
		var cur strings.Builder
		switch line[i] {
		case '"':
			i++
			for ; ; i++ {
				if i >= len(line) {
					return nil, fmt.Errorf("unbalanced quotes in %q", line)
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) {
					i++
					switch line[i] {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'x':
						v, err := strconv.ParseUint(line[i+1:i+3], 16, 8)
						if err != nil {
							return nil, fmt.Errorf("bad \\x escape in %q", line)
						}
						c = byte(v)
						i += 2
					default:
						c = line[i]
					}
				}
				cur.WriteByte(c)
			}
		case '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unbalanced quotes in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 2
		default:
			for i < len(line) && line[i] != ' ' {
				cur.WriteByte(line[i])
				i++
			}
		}
		args = append(args, cur.String())
	}
}
