package resp

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/lockproxy/lockproxy/backend"
)

var decodings = []struct {
	in   string
	want backend.Value
}{
	{"+OK\r\n", backend.OKValue},
	{"+\r\n", backend.Status("")},
	{"-ERR no\r\n", backend.ErrorValue("ERR no")},
	{":-3\r\n", backend.Int(-3)},
	{":-9223372036854775808\r\n", backend.Int(math.MinInt64)},
	{"$5\r\nhe\r\no\r\n", backend.BulkString("he\r\no")},
	{"$0\r\n\r\n", backend.BulkString("")},
	{"$-1\r\n", backend.NilValue},
	{"_\r\n", backend.NilValue},
	{"*-1\r\n", backend.Value{Kind: backend.KindNilArray}},
	{"#t\r\n", backend.Value{Kind: backend.KindBool, Int: 1}},
	{"#f\r\n", backend.Value{Kind: backend.KindBool}},
	{",3.25\r\n", backend.Value{Kind: backend.KindDouble, Float: 3.25}},
	{",-inf\r\n", backend.Value{Kind: backend.KindDouble, Float: math.Inf(-1)}},
	{"(123456789012345678901234567890\r\n", backend.Value{Kind: backend.KindBigNumber, Str: []byte("123456789012345678901234567890")}},
	{"=8\r\ntxt:abcd\r\n", backend.Value{Kind: backend.KindVerbatim, Str: []byte("abcd")}},
	{"!7\r\nERR bad\r\n", backend.ErrorValue("ERR bad")},
	{"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n", backend.Array(backend.Int(1), backend.Array(backend.BulkString("x")))},
	{"*0\r\n", backend.Array()},
	{"~1\r\n+a\r\n", backend.Value{Kind: backend.KindSet, Elems: []backend.Value{backend.Status("a")}}},
	{"%1\r\n+id\r\n:9\r\n", backend.Value{Kind: backend.KindMap, Elems: []backend.Value{backend.Status("id"), backend.Int(9)}}},
	{"|1\r\n+ttl\r\n:3\r\n*1\r\n:2\r\n", backend.Array(backend.Int(2))}, // the attribute is dropped
}

func TestDecode(t *testing.T) {
	for _, d := range decodings {
		in := []byte(d.in + "+next\r\n")
		v, n, err := Decode(in)
		if err != nil || n != len(d.in) || !bytes.Equal(AppendValue(nil, v, true), AppendValue(nil, d.want, true)) || v.Kind != d.want.Kind {
			t.Errorf("Decode(%q) = %v, %d, %v; want %v, %d", d.in, v, n, err, d.want, len(d.in))
		}
		clear(in) // the Value owns its bytes
		if !bytes.Equal(AppendValue(nil, v, true), AppendValue(nil, d.want, true)) {
			t.Errorf("Decode(%q) shares the buffer", d.in)
		}
		for i := range len(d.in) {
			if v, n, err := Decode([]byte(d.in[:i])); n != 0 || err != nil {
				t.Errorf("Decode(%q) (a prefix) = %v, %d, %v; want incomplete", d.in[:i], v, n, err)
			}
		}
	}
}

func TestDecodeNegativeNaN(t *testing.T) {
	v, _, err := Decode([]byte(",-nan\r\n"))
	if err != nil || v.Kind != backend.KindDouble || !math.IsNaN(v.Float) || !math.Signbit(v.Float) {
		t.Errorf("Decode(,-nan) = %v, %v", v, err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	for _, in := range []string{
		"\r\n", "x\r\n", "+OK\n", ":\r\n", ":1x\r\n", ":-\r\n", ":+1\r\n",
		":9223372036854775808\r\n", ":99999999999999999999\r\n", ":-9223372036854775809\r\n",
		":1234567890123456789012", // no '\n' where a number must have ended
		"$2\r\nabc\r\n", "$1\r\na\n\n", "$536870913\r\n", "=3\r\ntxt\r\n", ",x\r\n", ",1.5.5\r\n",
		"*16777217\r\n", "%16777217\r\n", "*1\r\n?\r\n", "|1\r\n+a\r\n+b\r\n?",
		strings.Repeat("*1\r\n", MaxDepth+2) + ":1\r\n",
	} {
		if v, n, err := Decode([]byte(in)); !errors.Is(err, ErrProtocol) || n != 0 {
			t.Errorf("Decode(%.40q) = %v, %d, %v; want ErrProtocol", in, v, n, err)
		}
	}
}

func TestDecodeBigHeaderIsIncomplete(t *testing.T) {
	// A header announcing many elements or a long string allocates
	// nothing until the bytes are there.
	for _, in := range []string{"*16777216\r\n", "%8388608\r\n:1\r\n", "$536870912\r\nab"} {
		if allocs := testing.AllocsPerRun(10, func() {
			if _, n, err := Decode([]byte(in)); n != 0 || err != nil {
				t.Fatalf("Decode(%q) = %d, %v; want incomplete", in, n, err)
			}
		}); allocs != 0 {
			t.Errorf("Decode(%q) allocates %v times", in, allocs)
		}
	}
}

func TestParseInt(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"0012", 12, true}, {"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true}, {"9223372036854775808", 0, false},
		{"18446744073709551616", 0, false}, {"", 0, false}, {"-", 0, false}, {"1 ", 0, false},
		{"000000000000000000001", 0, false},
	} {
		if n, ok := ParseInt([]byte(c.in)); n != c.n || ok != c.ok {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}

func TestParseLength(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"12\r", 12, true}, {"0\r", 0, true}, {"-1\r", -1, true}, {"999999999999999999\r", 999999999999999999, true},
		{"1000000000000000000\r", 0, false}, {"012\r", 0, false}, {"12", 0, false}, {"\r", 0, false},
		{"-\r", 0, false}, {"+1\r", 0, false}, {"1 \r", 0, false},
	} {
		if n, ok := ParseLength([]byte(c.in)); n != c.n || ok != c.ok {
			t.Errorf("ParseLength(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}

func TestReader(t *testing.T) {
	var stream []byte
	for _, d := range decodings {
		stream = append(stream, d.in...)
	}
	big := strings.Repeat("x", 3<<20) // grows the buffer past its size, then lets it go
	stream = append(stream, "$"+"3145728\r\n"+big+"\r\n+end\r\n"...)
	r := NewReader(iotest.HalfReader(bytes.NewReader(stream)), 16)
	for _, d := range decodings {
		v, err := r.ReadValue()
		if err != nil || !bytes.Equal(AppendValue(nil, v, true), AppendValue(nil, d.want, true)) {
			t.Fatalf("ReadValue after %q = %v, %v", d.in, v, err)
		}
	}
	if v, err := r.ReadValue(); err != nil || string(v.Str) != big {
		t.Fatalf("ReadValue of 3 MiB = %d bytes, %v", len(v.Str), err)
	}
	if v, err := r.ReadValue(); err != nil || string(v.Str) != "end" || cap(r.buf) != 16 {
		t.Fatalf("ReadValue = %v, %v; buffer %d", v, err, cap(r.buf))
	}
	if _, err := r.ReadValue(); err != io.EOF {
		t.Fatalf("ReadValue at the end: %v", err)
	}
	r = NewReader(iotest.OneByteReader(strings.NewReader("+OK\r\n:x\r\n")), 4)
	if v, err := r.ReadValue(); err != nil || string(v.Str) != "OK" {
		t.Fatalf("ReadValue = %v, %v", v, err)
	}
	if _, err := r.ReadValue(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("ReadValue of :x = %v", err)
	}
}
