package resp

import (
	"bytes"
	"io"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/lockproxy/lockproxy/backend"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeNestedHeadersAreIncomplete: headers nested inside each other
// allocate nothing either, though the bytes after them would cover each
// one's elements alone. (A hostile node sending 3 bytes per element of
// one count, behind D nested headers of that count, made the decoder
// allocate D element slices at once: D times 2^24 Values for 50 MB.)
func TestDecodeNestedHeadersAreIncomplete(t *testing.T) {
	const count = 1 << 17
	in := bytes.Repeat([]byte("*"+strconv.Itoa(count)+"\r\n"), 8)
	in = append(in, bytes.Repeat([]byte(":1\r\n"), count)...) // the innermost array, complete; the others are not
	var n int
	var err error
	got := allocated(func() { _, n, err = Decode(in) })
	if n != 0 || err != nil {
		t.Fatalf("Decode = %d, %v; want incomplete", n, err)
	}
	if limit := uint64(len(in)); got > limit {
		t.Errorf("an incomplete reply of %d bytes allocated %d bytes; want at most %d", len(in), got, limit)
	}
}

// chunks reads its bytes size at a time, as a TCP connection delivers a
// large reply.
type chunks struct {
	b    []byte
	size int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// TestReaderLargeReplyLinear: a reply that arrives in many reads is
// decoded once, when it is complete, not again after every read (which
// allocated its Values and copied its strings once per read: quadratic).
func TestReaderLargeReplyLinear(t *testing.T) {
	const count = 50000
	in := []byte("*" + strconv.Itoa(count) + "\r\n")
	for range count {
		in = append(in, "$10\r\n0123456789\r\n"...)
	}
	var v backend.Value
	var err error
	got := allocated(func() { v, err = NewReader(&chunks{b: in, size: 4 << 10}, 32<<10).ReadValue() })
	if err != nil || len(v.Elems) != count {
		t.Fatalf("ReadValue = %d elements, %v", len(v.Elems), err)
	}
	// The Values, their strings, and a buffer that doubles up to the reply;
	// twice that for the race detector's own. (Decoding after every read
	// allocated 90 times as much.)
	limit := 2 * (uint64(count)*(uint64(unsafe.Sizeof(backend.Value{}))+16) + 4*uint64(len(in)))
	if got > limit {
		t.Errorf("reading a reply of %d bytes in 4 KiB reads allocated %d bytes; want at most %d", len(in), got, limit)
	}
}
