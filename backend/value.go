package backend

import (
	"strconv"
)

// Kind is the type of a Value.
type Kind uint8

const (
	KindNil       Kind = iota // absent: RESP2 "$-1", RESP3 "_"
	KindStatus                // simple string: "+OK"
	KindError                 // error line in Str, e.g. "ERR boom"; only inside replies (arrays, script results)
	KindInt                   // integer: ":1"
	KindBulk                  // bulk string
	KindArray                 // array of Elems
	KindNilArray              // RESP2 "*-1", RESP3 "_" (EXEC of an aborted transaction)
	KindDouble                // RESP3 double; RESP2 bulk string of its text
	KindBool                  // RESP3 boolean; RESP2 integer 1 or 0
	KindMap                   // RESP3 map of Elems pairs (key, value, key, value …); RESP2 flat array
	KindSet                   // RESP3 set; RESP2 array
	KindBigNumber             // RESP3 big number in Str; RESP2 bulk string
	KindVerbatim              // RESP3 verbatim string "txt:"+Str; RESP2 bulk string
	KindPairs                 // Elems flattened pairs: RESP3 an array of two-element arrays; RESP2 a flat array (ZRANGE … WITHSCORES)
)

// Value is one Redis reply, independent of the wire protocol: the proxy
// renders it as RESP2 or RESP3 for each connection. Lua scripts produce
// Values, and backends return them from Eval.
//
// The zero Value is the nil reply.
type Value struct {
	Kind  Kind
	Str   []byte // KindStatus, KindError, KindBulk, KindBigNumber, KindVerbatim
	Int   int64  // KindInt; KindBool is Int != 0
	Float float64
	Elems []Value // KindArray, KindSet, KindMap and KindPairs (flattened pairs)
}

// Common replies.
var (
	NilValue    = Value{}
	OKValue     = Value{Kind: KindStatus, Str: []byte("OK")}
	QueuedValue = Value{Kind: KindStatus, Str: []byte("QUEUED")}
)

// Status returns a simple-string Value.
func Status(s string) Value { return Value{Kind: KindStatus, Str: []byte(s)} }

// ErrorValue returns an error Value whose line is s ("ERR …", "NOSCRIPT …").
func ErrorValue(s string) Value { return Value{Kind: KindError, Str: []byte(s)} }

// Int returns an integer Value.
func Int(n int64) Value { return Value{Kind: KindInt, Int: n} }

// Bool returns 1 or 0 as an integer Value, as Redis does for predicates.
func Bool(b bool) Value {
	if b {
		return Int(1)
	}
	return Int(0)
}

// Bulk returns a bulk-string Value holding b.
func Bulk(b []byte) Value { return Value{Kind: KindBulk, Str: b} }

// BulkString returns a bulk-string Value holding s.
func BulkString(s string) Value { return Value{Kind: KindBulk, Str: []byte(s)} }

// Array returns an array Value of elems.
func Array(elems ...Value) Value {
	if elems == nil {
		elems = []Value{}
	}
	return Value{Kind: KindArray, Elems: elems}
}

// IsNil reports whether v is a nil reply of either kind.
func (v Value) IsNil() bool { return v.Kind == KindNil || v.Kind == KindNilArray }

// String renders v for logs and test failure messages, not for clients.
func (v Value) String() string {
	switch v.Kind {
	case KindNil:
		return "(nil)"
	case KindNilArray:
		return "(nil array)"
	case KindStatus:
		return "+" + string(v.Str)
	case KindError:
		return "-" + string(v.Str)
	case KindInt:
		return ":" + strconv.FormatInt(v.Int, 10)
	case KindBool:
		return "#" + strconv.FormatBool(v.Int != 0)
	case KindDouble:
		return "," + strconv.FormatFloat(v.Float, 'g', -1, 64)
	case KindBulk, KindBigNumber, KindVerbatim:
		return strconv.Quote(string(v.Str))
	}
	s := "["
	if v.Kind == KindMap {
		s = "{"
	}
	for i, e := range v.Elems {
		if i > 0 {
			s += " "
		}
		s += e.String()
	}
	if v.Kind == KindMap {
		return s + "}"
	}
	return s + "]"
}
