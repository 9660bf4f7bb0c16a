// Package resp is lockproxy's one RESP codec: the replies the front end
// writes to clients, the requests quorum writes to its nodes, the replies
// quorum reads back from them, and the integer and length parsing the
// front end's request framing (proxy/limits.go) shares with the reply
// decoder. It is a leaf: it imports the standard library, backend
// (Value is what it encodes and decodes) and redcon, nothing else of ours.
// It sits beside backend for the same reason: the front end and the
// backends (quorum, luascripts' number formatting) both import it, and
// neither may import the other.
//
// What is redcon's and what is ours:
//   - redcon's Append* write the RESP2 shapes they cover byte for byte as
//     Redis does: integers, array headers, bulk strings, the RESP2 nil. The
//     encoders here call them for those shapes (AppendValue, Request).
//   - RESP3 (null, double, boolean, big number, verbatim, map, set) is
//     ours: redcon has no RESP3 writer. Simple strings and errors are ours
//     too, because redcon's AppendString/AppendError take a string and
//     allocate to replace CR and LF, where a Value holds []byte.
//   - Decoding is ours. redcon's ReadNextRESP knows only the five RESP2
//     types and answers "no reply" both for a partial buffer and for bytes
//     that are not RESP, where a node connection must tell waiting from
//     failing. Requests from clients are still parsed by redcon
//     (ReadNextCommand, through its server).
//
// Decode works on a []byte and never blocks: n == 0 with a nil error means
// the buffer holds only the start of a reply, so an event loop can parse
// node replies out of its input buffer as they arrive. Reader is the same
// decoder over an io.Reader for a goroutine that owns a connection.
//
// Decisions worth knowing:
//   - A decoded Value owns its bytes (strings are copied out of the
//     buffer), so the caller may reuse the buffer at once.
//   - Limits: a string may be at most MaxBulk bytes (Redis's
//     proto-max-bulk-len default), an aggregate at most MaxElems elements,
//     nesting at most MaxDepth levels. Past them, and on anything that is
//     not RESP, the decoder returns ErrProtocol: the stream cannot be
//     trusted past it. An aggregate is scanned to its end, allocating
//     nothing, before it is decoded (scan.go): an incomplete reply costs
//     no allocation however its headers nest, and what a complete one
//     allocates stands for its own bytes (3 at least a Value). Reader
//     resumes its scan after each read, so a reply that arrives in many
//     reads is scanned and decoded once.
//   - RESP3 attributes ('|') are read and dropped: the Value is the reply
//     they describe. A double ",-nan" (what Redis 7 sends for 0/0 in a
//     script) decodes to a NaN with its sign bit set.
//   - The reply encoder writes every NaN as "nan", as lockproxy always has;
//     Redis 7 writes "-nan" for a negative one (see FormatFloat).
package resp
