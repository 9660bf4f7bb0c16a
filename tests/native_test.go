package tests

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestNewerCommands checks what the differential test cannot, because the
// redis-server here (7.0) predates it: Redis 8.4's SET … IFEQ/IFNE and
// DELEX, Valkey 9's DELIFEQ, and Redis 7.2's CLIENT SETINFO, which
// redis-py 5 and go-redis send. Expected replies follow those servers'
// documentation.
func TestNewerCommands(t *testing.T) {
	addr := testsrv.StartMemoryProxy(t)
	for _, proto := range []string{"2", "3"} {
		c := dialRESP(t, addr)
		if _, err := c.do("HELLO", proto); err != nil {
			t.Fatal(err)
		}
		nilReply := "$-1\r\n"
		if proto == "3" {
			nilReply = "_\r\n"
		}
		steps := []struct {
			args []string
			want string
		}{
			{[]string{"SET", "k", "tok", "NX", "PX", "10000"}, "+OK\r\n"},
			{[]string{"SET", "k", "new", "IFEQ", "other"}, nilReply},
			{[]string{"SET", "k", "new", "IFEQ", "tok", "KEEPTTL"}, "+OK\r\n"},
			{[]string{"GET", "k"}, "$3\r\nnew\r\n"},
			{[]string{"SET", "k", "x", "IFNE", "new"}, nilReply},
			{[]string{"SET", "k", "x", "IFNE", "zzz", "GET"}, "$3\r\nnew\r\n"},
			{[]string{"SET", "absent", "x", "IFEQ", "x"}, nilReply},
			{[]string{"EXISTS", "absent"}, ":0\r\n"},
			{[]string{"SET", "k", "x", "IFEQ"}, "-ERR syntax error\r\n"},
			{[]string{"SET", "k", "x", "IFEQ", "a", "NX"}, "-ERR syntax error\r\n"},
			{[]string{"SET", "k", "x", "NX", "IFNE", "a"}, "-ERR syntax error\r\n"},
			{[]string{"DELIFEQ", "k", "nope"}, ":0\r\n"},
			{[]string{"DELIFEQ", "k", "x"}, ":1\r\n"},
			{[]string{"DELIFEQ", "k", "x"}, ":0\r\n"},
			{[]string{"DELIFEQ", "k"}, "-ERR wrong number of arguments for 'delifeq' command\r\n"},
			{[]string{"SET", "k", "t"}, "+OK\r\n"},
			{[]string{"DELEX", "k", "IFEQ", "nope"}, ":0\r\n"},
			{[]string{"DELEX", "k", "IFNE", "t"}, ":0\r\n"},
			{[]string{"DELEX", "k", "IFNE", "nope"}, ":1\r\n"},
			{[]string{"SET", "k", "t"}, "+OK\r\n"},
			{[]string{"DELEX", "k", "IFEQ", "t"}, ":1\r\n"},
			{[]string{"SET", "k", "t"}, "+OK\r\n"},
			{[]string{"DELEX", "k"}, ":1\r\n"},
			{[]string{"DELEX", "k"}, ":0\r\n"},
			{[]string{"DELEX", "k", "IFEQ"}, "-ERR wrong number of arguments for 'delex' command\r\n"},
			{[]string{"DELEX", "k", "FOO", "x"}, ":0\r\n"},
			{[]string{"SET", "k", "t"}, "+OK\r\n"},
			{[]string{"DELEX", "k", "FOO", "x"}, "-ERR Invalid condition. Use IFEQ, IFNE, IFDEQ, or IFDNE\r\n"},
			{[]string{"DELEX", "k", "IFEQ", "t", "x"}, "-ERR wrong number of arguments for 'delex' command\r\n"},
			{[]string{"DELEX", "k", "IFEQ", "t"}, ":1\r\n"},
			{[]string{"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}, "+OK\r\n"},
			{[]string{"CLIENT", "SETINFO", "LIB-VER", "5.0.0"}, "+OK\r\n"},
			{[]string{"CLIENT", "SETINFO", "FOO", "bar"}, "-ERR Unrecognized option 'FOO'\r\n"},
			{[]string{"EVAL", "redis.call('set', KEYS[1], 'a') return redis.call('delifeq', KEYS[1], 'a')", "1", "s"}, ":1\r\n"},
		}
		for _, s := range steps {
			got, err := c.do(s.args...)
			if err != nil || got != s.want {
				t.Errorf("RESP%s %s = %q, %v; want %q", proto, diffShow(s.args), got, err, s.want)
			}
		}
	}
}
