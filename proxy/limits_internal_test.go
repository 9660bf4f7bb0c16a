package proxy

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// TestFramingChunks checks that the framing follows a stream the same way
// however it is cut into reads: valid commands always pass whole, and an
// over-limit command is refused at the same place.
func TestFramingChunks(t *testing.T) {
	valid := "*3\r\n$3\r\nSET\r\n$4\r\nlock\r\n$10\r\n0123456789\r\n" +
		"PING\r\n\r\nset k v px 100 nx\n" +
		"*1\r\n$0\r\n\r\n" +
		"*2\r\n$4\r\nECHO\r\n$2\r\n\r\n\r\n"
	over := valid + "*2\r\n$4\r\nECHO\r\n$200000\r\n"
	for _, tc := range []struct {
		name      string
		in        string
		authed    bool
		wantOK    int // bytes passed before the refusal
		wantReply string
	}{
		{"valid", valid, true, len(valid), ""},
		{"bulk over max", over, true, len(over) - 1, backend.MsgInvalidBulk},
		{"unauthenticated bulk", valid + "*1\r\n$20000\r\n", false, len(valid) + len("*1\r\n$20000\r"), backend.MsgUnauthBulk},
		{"unauthenticated count", valid + "*11\r\n", false, len(valid) + len("*11\r"), backend.MsgUnauthMultibulk},
		{"bad length", valid + "*1\r\n$x\r\n", true, len(valid) + len("*1\r\n$x\r"), backend.MsgInvalidBulk},
		{"inline over 64 KiB", valid + "ECHO " + strings.Repeat("a", 70000), true, len(valid) + 64<<10, backend.MsgTooBigInline},
		{"count line over 64 KiB", valid + "*" + strings.Repeat("1", 70000), true, len(valid) + 1 + 64<<10, backend.MsgTooBigMultibulk},
		{"not a bulk", valid + "*1\r\n:1\r\n", true, len(valid) + len("*1\r\n"), "ERR Protocol error: expected '$', got ':'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			for size := 1; size <= len(in); size = size*3/2 + 1 {
				f := framing{max: 100000}
				passed, reply := 0, ""
				for rest := in; len(rest) > 0 && reply == ""; {
					n, r := f.scan(rest[:min(size, len(rest))], tc.authed)
					passed += n
					rest = rest[n:]
					reply = r
					if n == 0 && r == "" {
						t.Fatalf("chunk size %d: no progress at %d", size, passed)
					}
				}
				if passed != tc.wantOK || reply != tc.wantReply {
					t.Fatalf("chunk size %d: passed %d, reply %q; want %d, %q", size, passed, reply, tc.wantOK, tc.wantReply)
				}
			}
		})
	}
}

func BenchmarkFraming(b *testing.B) {
	cmd := "*6\r\n$3\r\nSET\r\n$13\r\nlock:resource\r\n$22\r\n0123456789012345678901\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n"
	in := []byte(strings.Repeat(cmd, 50))
	f := framing{max: 8 << 20}
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if n, _ := f.scan(in, true); n != len(in) {
			b.Fatal(n)
		}
	}
}
