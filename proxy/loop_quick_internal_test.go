package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/panjf2000/gnet/v2"

	"github.com/lockproxy/lockproxy/memory"
)

// bulk renders args as one multibulk command.
func bulk(args ...string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
	}
	return sb.String()
}

// quickCorpus are inputs at and around every line the quick path draws:
// what it takes, what it leaves to framing and redcon, and the limits.
func quickCorpus() []string {
	echo := bulk("ECHO", "abc")
	args := func(n int) string {
		a := []string{"ECHO"}
		for range n - 1 {
			a = append(a, "a")
		}
		return bulk(a...)
	}
	ins := []string{
		echo, echo + echo + "PING\r\n" + echo, bulk("PING"), bulk("ECHO", ""),
		"*02\r\n$4\r\nECHO\r\n$1\r\na\r\n", "*2\r\n$04\r\nECHO\r\n$1\r\na\r\n",
		"*+2\r\n$4\r\nECHO\r\n$1\r\na\r\n", "*2\r\n$+4\r\nECHO\r\n$1\r\na\r\n",
		"*-1\r\n" + echo, "*0\r\n" + echo, "*1\r\n$-1\r\n" + echo, "*1\r\n$0\r\n\r\n",
		"*2\n$4\r\nECHO\r\n$1\r\na\r\n", "*2\r\n$4\nECHO\r\n$1\r\na\r\n", "*2\r\n$4\r\nECHO\r\n$1\r\nab\r\n",
		"*2\r\n$4\r\nECHO\r\n$1\r\na\n\n", "*2\r\n$4\r\nECHO\r\n:1\r\na\r\n", "*2\r\n$4\r\nECHO\r\n$1\ra\r\n",
		"*2 \r\n$4\r\nECHO\r\n$1\r\na\r\n", "*2\r\n$4 \r\nECHO\r\n$1\r\na\r\n", "*\r\n" + echo, "*2\r\n$\r\n",
		"*1000000000\r\n", "*999999999\r\n", "*2\r\n$4\r\nECHO\r\n$1000000000\r\n", "*2\r\n$4\r\nECHO\r\n$999999999\r\n",
		"*1\r\n$0000000004\r\nPING\r\n", "*0000000001\r\n$4\r\nPING\r\n",
		args(10) + echo, args(11) + echo, args(12),
		bulk("ECHO", strings.Repeat("x", maxUnauthBulkBytes)) + echo,
		bulk("ECHO", strings.Repeat("x", maxUnauthBulkBytes+1)) + echo,
		bulk("AUTH", "pw") + args(11) + bulk("ECHO", strings.Repeat("x", maxUnauthBulkBytes+1)),
		bulk("AUTH", "wrong") + args(11),
		bulk("ECHO", strings.Repeat("y", 100-len(bulk("ECHO", "")))) + echo, // exactly MaxRequestBytes
		bulk("ECHO", strings.Repeat("y", 101-len(bulk("ECHO", "")))) + echo, // one more
		"*17\r\n", "*16\r\n" + strings.Repeat("$0\r\n\r\n", 16),
		"PING\r\n" + echo + "  \r\n" + echo, "QUIT\r\n" + echo, bulk("QUIT") + echo,
		bulk("MULTI") + echo + bulk("EXEC"), bulk("CLIENT", "REPLY", "SKIP") + echo + echo,
	}
	// Mutations of well-formed pipelines: a byte changed, dropped or
	// repeated, deterministically.
	r := rand.New(rand.NewPCG(1, 2))
	base := echo + bulk("SET", "k", "v", "PX", "10000", "NX") + bulk("GET", "k") + echo
	alphabet := "*$\r\n0123456789-+ a"
	for range 120 {
		b := []byte(base)
		for range 1 + r.IntN(3) {
			i := r.IntN(len(b))
			switch r.IntN(3) {
			case 0:
				b[i] = alphabet[r.IntN(len(alphabet))]
			case 1:
				b = append(b[:i], b[i+1:]...)
			default:
				b = append(b[:i+1], b[i:]...)
			}
		}
		ins = append(ins, string(b))
	}
	return ins
}

// feed serves in, cut into chunks at the given points, on a new
// connection, with the quick path on or off, and returns everything the
// client would see: the replies, how it ended, and the bytes kept for
// the next read.
func feed(cfg Config, in string, cuts []int, quick bool) string {
	quickParse = quick
	defer func() { quickParse = true }()
	b := memory.New(memory.Config{}) // each run starts without keys
	defer b.Close(context.Background())
	s := New(cfg, b)
	lc := newLoopConn(s, "127.0.0.1:1")
	prev := 0
	var out strings.Builder
	for _, c := range append(cuts, len(in)) {
		act := lc.serveInput([]byte(in[prev:c]))
		prev = c
		out.Write(lc.out)
		lc.out = lc.out[:0]
		if act != gnet.None || lc.busy {
			fmt.Fprintf(&out, "|action %v busy %v at %d", act, lc.busy, c)
			break
		}
	}
	fmt.Fprintf(&out, "|kept %q", lc.in) // how far framing looked ahead is not seen
	return out.String()
}

// TestLoopQuickParse: the quick path answers every input exactly as
// framing and redcon do, whole or cut at any point, with and without a
// password to AUTH with first, at a MaxRequestBytes of 100 and the default.
func TestLoopQuickParse(t *testing.T) {
	for _, cfg := range []Config{
		{DataPath: DataPathLoops, MaxRequestBytes: 100},
		{DataPath: DataPathLoops, MaxRequestBytes: 100, RequirePass: "pw"},
		{DataPath: DataPathLoops, RequirePass: "pw"}, // the limits before AUTH, below MaxRequestBytes
	} {
		for _, in := range quickCorpus() {
			cutsets := [][]int{nil}
			if len(in) < 300 {
				for c := 1; c < len(in); c++ {
					cutsets = append(cutsets, []int{c})
				}
			}
			for _, cuts := range cutsets {
				slow, fast := feed(cfg, in, cuts, false), feed(cfg, in, cuts, true)
				if slow != fast {
					t.Fatalf("password %q, max request %d, input %q cut at %v:\nframing and redcon: %s\nquick path:         %s", cfg.RequirePass, cfg.MaxRequestBytes, in, cuts, slow, fast)
				}
			}
		}
	}
}
