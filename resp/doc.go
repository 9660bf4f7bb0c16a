// Package resp is lockproxy's one RESP codec: the replies the front end
// writes to clients, the requests quorum writes to its nodes, the replies
// quorum reads back, and the integer and length parsing the front end's
// request framing (proxy/limits.go) shares with the reply decoder. It is a
// leaf beside backend: it imports the standard library, backend (Value is
// what it encodes and decodes) and redcon, so both the front end and the
// backends may use it (docs/architecture.md).
//
// What is redcon's and what is ours: redcon's Append* write the RESP2
// shapes they cover byte for byte as Redis does, and the encoders here
// call them for those shapes. RESP3 types, simple strings and errors
// (from []byte, without redcon's allocation) and all decoding are ours:
// redcon's ReadNextRESP cannot tell a partial buffer from bytes that are
// not RESP. Requests from clients are still parsed by redcon.
//
// Guarantees:
//   - Decode works on a []byte and never blocks: n == 0 with a nil error
//     means the buffer holds only the start of a reply. Reader is the same
//     decoder over an io.Reader.
//   - A decoded Value owns its bytes; the caller may reuse the buffer.
//   - A string is at most MaxBulk bytes, an aggregate at most MaxElems
//     elements, nesting at most MaxDepth levels; past them, and on anything
//     that is not RESP, the decoder returns ErrProtocol and the stream
//     cannot be trusted past it.
//   - An aggregate is scanned to its end, allocating nothing, before it is
//     decoded (scan.go): an incomplete reply costs no allocation however
//     its headers nest. Reader resumes its scan after each read.
//
// Decisions: RESP3 attributes ('|') are read and dropped. A double ",-nan"
// (Redis 7's 0/0 in a script) decodes to a NaN with its sign bit set. The
// reply encoder writes every NaN as "nan"; Redis 7 writes "-nan" for a
// negative one (see FormatFloat).
package resp
