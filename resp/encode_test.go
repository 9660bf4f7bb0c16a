package resp

import (
	"math"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// The bytes Redis 7 sends for each kind, RESP2 and RESP3 (tests/resp_test.go
// compares the front end's replies with a real redis-server).
var encodings = []struct {
	v            backend.Value
	resp2, resp3 string
}{
	{backend.NilValue, "$-1\r\n", "_\r\n"},
	{backend.Value{Kind: backend.KindNilArray}, "*-1\r\n", "_\r\n"},
	{backend.OKValue, "+OK\r\n", "+OK\r\n"},
	{backend.Status("a\r\nb"), "+a  b\r\n", "+a  b\r\n"},
	{backend.ErrorValue("ERR x\ny"), "-ERR x y\r\n", "-ERR x y\r\n"},
	{backend.Int(7), ":7\r\n", ":7\r\n"},
	{backend.Int(-12345678901), ":-12345678901\r\n", ":-12345678901\r\n"},
	{backend.Int(math.MinInt64), ":-9223372036854775808\r\n", ":-9223372036854775808\r\n"},
	{backend.BulkString(""), "$0\r\n\r\n", "$0\r\n\r\n"},
	{backend.BulkString("a\r\nb"), "$4\r\na\r\nb\r\n", "$4\r\na\r\nb\r\n"},
	{backend.Value{Kind: backend.KindDouble, Float: 3.5}, "$3\r\n3.5\r\n", ",3.5\r\n"},
	{backend.Value{Kind: backend.KindDouble, Float: 0.1}, "$19\r\n0.10000000000000001\r\n", ",0.10000000000000001\r\n"},
	{backend.Value{Kind: backend.KindDouble, Float: 1e300}, "$23\r\n1.0000000000000001e+300\r\n", ",1.0000000000000001e+300\r\n"},
	{backend.Value{Kind: backend.KindDouble, Float: math.Inf(-1)}, "$4\r\n-inf\r\n", ",-inf\r\n"},
	{backend.Value{Kind: backend.KindDouble, Float: math.Copysign(math.NaN(), -1)}, "$3\r\nnan\r\n", ",nan\r\n"},
	{backend.Value{Kind: backend.KindBool, Int: 1}, ":1\r\n", "#t\r\n"},
	{backend.Value{Kind: backend.KindBool}, ":0\r\n", "#f\r\n"},
	{backend.Value{Kind: backend.KindBigNumber, Str: []byte("12345678901234567890")}, "$20\r\n12345678901234567890\r\n", "(12345678901234567890\r\n"},
	{backend.Value{Kind: backend.KindVerbatim, Str: []byte("hi")}, "$2\r\nhi\r\n", "=6\r\ntxt:hi\r\n"},
	{backend.Array(), "*0\r\n", "*0\r\n"},
	{backend.Array(backend.Int(1), backend.Array(backend.NilValue)), "*2\r\n:1\r\n*1\r\n$-1\r\n", "*2\r\n:1\r\n*1\r\n_\r\n"},
	{backend.Value{Kind: backend.KindMap, Elems: []backend.Value{backend.BulkString("k"), backend.Int(1)}}, "*2\r\n$1\r\nk\r\n:1\r\n", "%1\r\n$1\r\nk\r\n:1\r\n"},
	{backend.Value{Kind: backend.KindSet, Elems: []backend.Value{backend.Int(1)}}, "*1\r\n:1\r\n", "~1\r\n:1\r\n"},
	{backend.Value{Kind: 200, Elems: []backend.Value{backend.Int(1)}}, "*1\r\n:1\r\n", "*1\r\n:1\r\n"}, // an unknown kind is an array, as before
}

func TestAppendValue(t *testing.T) {
	for _, e := range encodings {
		if got := string(AppendValue([]byte("x"), e.v, false)); got != "x"+e.resp2 {
			t.Errorf("RESP2 %v = %q, want %q", e.v, got, e.resp2)
		}
		if got := string(AppendValue(nil, e.v, true)); got != e.resp3 {
			t.Errorf("RESP3 %v = %q, want %q", e.v, got, e.resp3)
		}
	}
}

func TestFormatFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		prec int
		want string
	}{
		{1.5, 17, "1.5"},
		{0.1, 14, "0.1"},
		{1e15, 14, "1e+15"},
		{100, 17, "100"},
		{math.Inf(1), 17, "inf"},
		{math.NaN(), 17, "nan"},
		{math.Copysign(math.NaN(), -1), 14, "-nan"},
	} {
		if got := FormatFloat(c.f, c.prec); got != c.want {
			t.Errorf("FormatFloat(%v, %d) = %q, want %q", c.f, c.prec, got, c.want)
		}
	}
}

func TestRequest(t *testing.T) {
	var r Request
	r.Strs("set", "k", "")
	r.Cmd(3)
	r.Arg("pexpire")
	r.ArgBytes([]byte("0123456789"))
	r.ArgInt(-42)
	want := "*3\r\n$3\r\nset\r\n$1\r\nk\r\n$0\r\n\r\n*3\r\n$7\r\npexpire\r\n$10\r\n0123456789\r\n$3\r\n-42\r\n"
	if string(r.B) != want || r.N != 2 {
		t.Errorf("Request = %q, %d; want %q, 2", r.B, r.N, want)
	}
	if got := string(AppendCommand(nil, [][]byte{[]byte("GET"), []byte("k")})); got != "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" {
		t.Errorf("AppendCommand = %q", got)
	}
}
