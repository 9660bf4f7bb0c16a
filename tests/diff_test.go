package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// A diffCase is a sequence of commands sent to a real redis-server and to
// lockproxy on fresh connections and fresh data; every reply must be the
// same bytes.
type diffCase struct {
	name  string
	lines []diffLine
}

// diffLine is one command and how its replies are compared:
//
//	' ' byte for byte (the default)
//	'~' integers within 500 of each other (PTTL right after a write; room for a loaded machine)
//	'^' errors equal up to "user_script:N:" (gopher-lua words compile
//	    errors its own way; see luascripts' doc)
//	'?' not compared (INFO, CLIENT ID, TIME …)
type diffLine struct {
	mode byte
	args []string
}

// diffLoadCorpus reads every testdata/corpus/*.txt file: cases are blocks
// separated by blank lines; "# name" starts a case; a line may begin with
// one of the mode characters and a space.
func diffLoadCorpus(t *testing.T) []diffCase {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	var cases []diffCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(filepath.Base(f), ".txt")
		var cur *diffCase
		for n, line := range strings.Split(string(data), "\n") {
			line = strings.TrimRight(line, "\r")
			switch {
			case strings.TrimSpace(line) == "":
				cur = nil
				continue
			case strings.HasPrefix(line, "# "):
				cases = append(cases, diffCase{name: base + "/" + strings.TrimSpace(line[2:])})
				cur = &cases[len(cases)-1]
				continue
			}
			if cur == nil {
				cases = append(cases, diffCase{name: fmt.Sprintf("%s/line%d", base, n+1)})
				cur = &cases[len(cases)-1]
			}
			mode := byte(' ')
			if len(line) > 2 && strings.ContainsRune("~^?", rune(line[0])) && line[1] == ' ' {
				mode, line = line[0], line[2:]
			}
			args, err := splitCommand(line)
			if err != nil {
				t.Fatalf("%s:%d: %v", f, n+1, err)
			}
			cur.lines = append(cur.lines, diffLine{mode: mode, args: args})
		}
	}
	return cases
}

func TestDifferential(t *testing.T) {
	cases := append(diffLoadCorpus(t), diffGenerated()...)
	cases = append(cases, diffScriptCases(t)...)
	if len(cases) < 300 {
		t.Fatalf("the corpus has %d cases; issue #2 asks for at least 300", len(cases))
	}
	t.Logf("%d cases, each in RESP2 and RESP3", len(cases))
	redis := testsrv.StartRedis(t)
	for _, proto := range []int{2, 3} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("resp%d/%s", proto, c.name), func(t *testing.T) {
				diffRun(t, redis.Addr, testsrv.StartMemoryProxy(t), proto, c)
			})
		}
	}
}

func diffRun(t *testing.T, redisAddr, proxyAddr string, proto int, c diffCase) {
	admin := dialRESP(t, redisAddr)
	for _, cmd := range [][]string{{"FLUSHALL"}, {"SCRIPT", "FLUSH"}} {
		if _, err := admin.do(cmd...); err != nil {
			t.Fatalf("redis %v: %v", cmd, err)
		}
	}
	want, got := dialRESP(t, redisAddr), dialRESP(t, proxyAddr)
	if proto == 3 {
		for _, conn := range []*respConn{want, got} {
			if r, err := conn.do("HELLO", "3"); err != nil || !strings.HasPrefix(r, "%") {
				t.Fatalf("HELLO 3 = %q, %v", r, err)
			}
		}
	}
	for _, l := range c.lines {
		w, werr := want.do(l.args...)
		g, gerr := got.do(l.args...)
		if werr != nil || gerr != nil {
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%s: redis err %v, lockproxy err %v (replies %q / %q)", diffShow(l.args), werr, gerr, w, g)
			}
			return // both closed the connection (QUIT)
		}
		if !diffSame(l.mode, w, g) {
			t.Errorf("%s\n   redis: %q\nlockproxy: %q", diffShow(l.args), w, g)
		}
	}
}

var scriptPos = regexp.MustCompile(`user_script:\d+:`)

func diffSame(mode byte, w, g string) bool {
	switch mode {
	case '?':
		return true
	case '~':
		if strings.HasPrefix(w, ":") && strings.HasPrefix(g, ":") {
			a, err1 := strconv.ParseInt(strings.TrimSpace(w[1:]), 10, 64)
			b, err2 := strconv.ParseInt(strings.TrimSpace(g[1:]), 10, 64)
			return err1 == nil && err2 == nil && a-b <= 500 && b-a <= 500 && (a < 0) == (b < 0)
		}
	case '^':
		lw, lg := scriptPos.FindStringIndex(w), scriptPos.FindStringIndex(g)
		if lw != nil && lg != nil {
			return w[:lw[1]] == g[:lg[1]]
		}
	}
	return w == g
}

func diffShow(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, " ")
}
