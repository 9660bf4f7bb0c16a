package resp

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzDecode checks the decoder on any bytes (seed corpus in
// testdata/fuzz/FuzzDecode): it never panics; a reply it accepts has only
// incomplete prefixes, decodes the same alone, and survives a round trip
// through the encoder; the Reader, fed a byte or a few at a time, agrees.
// Run it with -fuzzminimizetime 3s: minimizing a large input takes long.
func FuzzDecode(f *testing.F) {
	for _, d := range decodings {
		f.Add([]byte(d.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, n, err := Decode(data)
		switch {
		case err != nil && (n != 0 || !errors.Is(err, ErrProtocol)):
			t.Fatalf("Decode(%q) = %d, %v", data, n, err)
		case n < 0 || n > len(data):
			t.Fatalf("Decode(%q) took %d bytes", data, n)
		}
		var src io.Reader = iotest.OneByteReader(bytes.NewReader(data))
		if len(data) > 256 { // one byte a read is slow for a long input (a long status line is searched from its start on each read)
			src = iotest.HalfReader(bytes.NewReader(data))
		}
		rv, rerr := NewReader(src, 8).ReadValue()
		switch {
		case err != nil && !errors.Is(rerr, ErrProtocol),
			err == nil && n == 0 && rerr != io.EOF,
			n > 0 && (rerr != nil || !bytes.Equal(AppendValue(nil, rv, true), AppendValue(nil, v, true))):
			t.Fatalf("Reader on %q = %v, %v; Decode = %v, %d, %v", data, rv, rerr, v, n, err)
		}
		if n == 0 {
			return
		}
		checkValid(t, data[:n])
		enc := AppendValue(nil, v, true)
		checkValid(t, enc)
		v2, _, _ := Decode(enc)
		if enc2 := AppendValue(nil, v2, true); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip of %q: %q, then %q", data[:n], enc, enc2)
		}
		checkValid(t, AppendValue(nil, v, false))
	})
}

// checkValid checks that b is exactly one reply and each of its prefixes
// is incomplete, never an error or a reply.
func checkValid(t *testing.T, b []byte) {
	t.Helper()
	if _, n, err := Decode(b); n != len(b) || err != nil {
		t.Fatalf("Decode(%q) = %d, %v; want %d", b, n, err, len(b))
	}
	step := max(1, len(b)/512) // every prefix of a small reply, a sample of a large one
	for i := 0; i < len(b); i += step {
		if v, n, err := Decode(b[:i]); n != 0 || err != nil {
			t.Fatalf("Decode(%q), a prefix of %q = %v, %d, %v; want incomplete", b[:i], b, v, n, err)
		}
	}
}
