package tests

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestRedisCLI drives redis-cli: single commands, a script, RESP3,
// --pipe mode (mass insertion, which ends with an ECHO it checks), and a
// shared counter incremented under SET NX PX / EVAL release by 8 workers.
func TestRedisCLI(t *testing.T) {
	t.Parallel()
	cli := testsrv.Need(t, "redis-cli")
	clientTargets(t, func(t *testing.T, addr string) {
		host, port := clientSplitAddr(addr)
		run := func(args ...string) string {
			t.Helper()
			out, err := clientCLI(t, cli, host, port, args...)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		steps := []struct {
			args []string
			want string
		}{
			{[]string{"PING"}, "PONG"},
			{[]string{"SET", "cli:lock", "tok", "NX", "PX", "30000"}, "OK"},
			{[]string{"SET", "cli:lock", "other", "NX", "PX", "30000"}, ""},
			{[]string{"GET", "cli:lock"}, "tok"},
			{[]string{"EVAL", clientRelease, "1", "cli:lock", "tok"}, "1"},
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
			pipe.Write(clientEncode([]string{"SET", fmt.Sprintf("cli:pipe:%d", i), "tok", "NX", "PX", "60000"}))
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

		// Each lock and unlock is one redis-cli process, as in a shell script.
		clientCounter(t, 8, 8, func(w int) (func() error, error) {
			tok := fmt.Sprintf("w%d-%d", w, time.Now().UnixNano())
			for {
				got, err := clientCLI(t, cli, host, port, "SET", "cli:counter", tok, "NX", "PX", "10000")
				if err != nil || got == "OK" {
					return func() error {
						got, err := clientCLI(t, cli, host, port, "EVAL", clientRelease, "1", "cli:counter", tok)
						if err == nil && got != "1" {
							err = fmt.Errorf("release = %q; want 1", got)
						}
						return err
					}, err
				}
				time.Sleep(5 * time.Millisecond) // a shell script's retry delay
			}
		})
	})
}

// clientRelease is the owner-checked release every guide gives.
const clientRelease = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"

// clientCLI runs one redis-cli command and returns its trimmed output.
func clientCLI(t *testing.T, cli, host, port string, args ...string) (string, error) {
	out, err := exec.CommandContext(t.Context(), cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redis-cli %v: %w\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// TestRedisBenchmark runs redis-benchmark's PING (inline and multi-bulk),
// SET and GET tests and a lock workload (SET NX PX on random keys, then an
// EVAL release) and requires zero errors.
func TestRedisBenchmark(t *testing.T) {
	t.Parallel()
	bench := testsrv.Need(t, "redis-benchmark")
	clientTargets(t, func(t *testing.T, addr string) {
		host, port := clientSplitAddr(addr)
		base := []string{"-h", host, "-p", port, "-c", "50", "-q"}
		for _, args := range [][]string{
			{"-n", "2000", "-t", "ping_inline,ping_mbulk,set,get"},
			{"-n", "10000", "-r", "100000", "SET", "bench:__rand_int__", "tok", "NX", "PX", "10000"},
			{"-n", "10000", "-r", "100000", "EVAL", clientRelease, "1", "bench:__rand_int__", "tok"},
		} {
			out, err := exec.CommandContext(t.Context(), bench, append(base, args...)...).CombinedOutput()
			text := string(out)
			if err != nil || strings.Contains(strings.ToLower(text), "error") || !strings.Contains(text, "requests per second") {
				t.Fatalf("redis-benchmark %v: %v\n%s", args, err, text)
			}
		}
	})
}

func clientSplitAddr(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// clientEncode renders args as a RESP array of bulk strings (redis-cli --pipe input).
func clientEncode(args []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}
