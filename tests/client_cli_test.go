package tests

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestRedisCLI drives redis-cli: single commands, a script, RESP3, and
// --pipe mode (mass insertion, which ends with an ECHO it checks).
func TestRedisCLI(t *testing.T) {
	t.Parallel()
	cli := testsrv.Need(t, "redis-cli")
	clientTargets(t, func(t *testing.T, addr string) {
		host, port := splitAddr(addr)
		run := func(args ...string) string {
			t.Helper()
			out, err := exec.CommandContext(t.Context(), cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
			}
			return strings.TrimSpace(string(out))
		}
		steps := []struct {
			args []string
			want string
		}{
			{[]string{"PING"}, "PONG"},
			{[]string{"SET", "cli:lock", "tok", "NX", "PX", "30000"}, "OK"},
			{[]string{"SET", "cli:lock", "other", "NX", "PX", "30000"}, ""},
			{[]string{"GET", "cli:lock"}, "tok"},
			{[]string{"EVAL", "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end", "1", "cli:lock", "tok"}, "1"},
			{[]string{"EXISTS", "cli:lock"}, "0"},
			{[]string{"-3", "SET", "cli:r3", "v", "NX"}, "OK"},
			{[]string{"-3", "GET", "cli:absent"}, ""},
			{[]string{"NOSUCH", "x"}, "ERR unknown command 'NOSUCH', with args beginning with: 'x'"},
		}
		for _, s := range steps {
			if got := run(s.args...); got != s.want {
				t.Errorf("redis-cli %v = %q; want %q", s.args, got, s.want)
			}
		}

		var pipe strings.Builder
		const n = 2000
		for i := range n {
			pipe.Write(encodeCommand([]string{"SET", fmt.Sprintf("cli:pipe:%d", i), "tok", "NX", "PX", "60000"}))
		}
		cmd := exec.CommandContext(t.Context(), cli, "-h", host, "-p", port, "--pipe")
		cmd.Stdin = strings.NewReader(pipe.String())
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "errors: 0, replies: "+strconv.Itoa(n)) {
			t.Fatalf("redis-cli --pipe: %v\n%s", err, out)
		}
		if got := run("DBSIZE"); got != strconv.Itoa(n+1) { // the pipe's keys and cli:r3
			t.Errorf("DBSIZE after --pipe = %s; want %d", got, n+1)
		}
	})
}

// TestRedisBenchmark runs redis-benchmark's PING (inline and multi-bulk),
// SET and GET tests and a lock workload (SET NX PX on random keys, then an
// EVAL release) and requires zero errors.
func TestRedisBenchmark(t *testing.T) {
	t.Parallel()
	bench := testsrv.Need(t, "redis-benchmark")
	clientTargets(t, func(t *testing.T, addr string) {
		host, port := splitAddr(addr)
		base := []string{"-h", host, "-p", port, "-n", "5000", "-c", "50", "-q"}
		for _, args := range [][]string{
			{"-t", "ping_inline,ping_mbulk,set,get"},
			{"-r", "100000", "SET", "bench:__rand_int__", "tok", "NX", "PX", "10000"},
			{"-r", "100000", "EVAL", "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end", "1", "bench:__rand_int__", "tok"},
		} {
			out, err := exec.CommandContext(t.Context(), bench, append(base, args...)...).CombinedOutput()
			text := string(out)
			if err != nil || strings.Contains(strings.ToLower(text), "error") || !strings.Contains(text, "requests per second") {
				t.Fatalf("redis-benchmark %v: %v\n%s", args, err, text)
			}
		}
	})
}

func splitAddr(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}
