package resp

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// Request encodes commands back to back as RESP arrays of bulk strings,
// the form a Redis server reads: B is what to write as is, N how many
// replies it will bring. The zero Request is empty.
type Request struct {
	B []byte
	N int // commands encoded
}

// Cmd starts a command of argc arguments; the arguments follow with Arg,
// ArgBytes and ArgInt.
func (r *Request) Cmd(argc int) {
	r.B = redcon.AppendArray(r.B, argc)
	r.N++
}

// Arg appends a string argument.
func (r *Request) Arg(s string) { r.B = redcon.AppendBulkString(r.B, s) }

// ArgBytes appends a binary argument.
func (r *Request) ArgBytes(s []byte) { r.B = redcon.AppendBulk(r.B, s) }

// ArgInt appends an integer argument in decimal.
func (r *Request) ArgInt(n int64) {
	var tmp [20]byte
	r.ArgBytes(strconv.AppendInt(tmp[:0], n, 10))
}

// Strs encodes one command of string arguments.
func (r *Request) Strs(args ...string) {
	r.Cmd(len(args))
	for _, a := range args {
		r.Arg(a)
	}
}

// AppendCommand appends one command of binary arguments to b.
func AppendCommand(b []byte, args [][]byte) []byte {
	b = redcon.AppendArray(b, len(args))
	for _, a := range args {
		b = redcon.AppendBulk(b, a)
	}
	return b
}
