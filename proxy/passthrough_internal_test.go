package proxy

import (
	"bufio"
	"strings"
	"testing"
)

// TestAppendReply reads one whole reply of every RESP2 and RESP3 type,
// nested and with attributes, and leaves what follows unread.
func TestAppendReply(t *testing.T) {
	long := strings.Repeat("x", 70000) // longer than bufio's buffer
	for _, reply := range []string{
		"+OK\r\n", "-ERR no\r\n", ":12\r\n", "$-1\r\n", "*-1\r\n", "_\r\n", "$0\r\n\r\n", "$4\r\na\r\nb\r\n",
		",1.5\r\n", "#t\r\n", "(123456789012345678901234567890\r\n", "=7\r\ntxt:abc\r\n", "!3\r\nerr\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "%1\r\n+k\r\n*2\r\n:1\r\n:2\r\n", "~2\r\n+a\r\n+b\r\n", "*0\r\n",
		"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n", ">2\r\n+message\r\n+x\r\n",
		"$70000\r\n" + long + "\r\n", "+" + long + "\r\n",
	} {
		rd := bufio.NewReader(strings.NewReader(reply + "+NEXT\r\n"))
		got, err := appendReply(rd, nil)
		if err != nil || string(got) != reply {
			t.Errorf("appendReply(%.40q) = %.40q, %v", reply, got, err)
			continue
		}
		if next, _ := appendReply(rd, nil); string(next) != "+NEXT\r\n" {
			t.Errorf("after %.40q the next reply = %q", reply, next)
		}
	}
	for _, bad := range []string{"?\r\n", "$x\r\n", "+no crlf\n", "$5\r\nab"} {
		if _, err := appendReply(bufio.NewReader(strings.NewReader(bad)), nil); err == nil {
			t.Errorf("appendReply(%q) = nil error; want one", bad)
		}
	}
}
