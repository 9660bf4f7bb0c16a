package resp

// Finding where a reply ends before decoding it. Decoding allocates: an
// aggregate's element slice, a copy of each string. Done on a partial
// reply, that work is lost, and bounded by nothing a hostile node must
// send: headers nested in each other each allocate their slice though the
// bytes after them are counted once for all (3 a element). So Decode and
// Reader first scan a reply to its end, which allocates nothing, and
// decode only a complete reply, where every element allocated stands for
// at least 3 bytes of its own.

// scanner finds the end of one reply. Its state survives an incomplete
// buffer, so that a Reader resumes where the last scan stopped when more
// bytes arrive: a reply arriving in many reads is scanned once in all.
// The zero scanner is ready. (scan takes and returns it by value, so that
// Decode's scanner and its stack stay on Decode's stack.)
type scanner struct {
	off int // bytes scanned: complete items
	// pending counts, for the reply and each aggregate opened in it, the
	// values still to come; empty: no reply is being scanned.
	pending []int64
}

// scan returns the length of the reply at the start of b, which begins
// with the bytes of the previous call (the same reply); n == 0 with a nil
// error means b holds only its start. After a complete reply or an error,
// the scanner it returns starts afresh.
func (s scanner) scan(b []byte) (_ scanner, n int, err error) {
	if len(s.pending) == 0 {
		s.off, s.pending = 0, append(s.pending, 1)
	}
	for len(s.pending) > 0 {
		top := len(s.pending) - 1
		if s.pending[top] == 0 {
			s.pending = s.pending[:top]
			continue
		}
		if top > MaxDepth {
			return scanner{pending: s.pending[:0]}, 0, ErrProtocol
		}
		n, follow, err := head(b[s.off:])
		if n == 0 {
			if err != nil {
				s.pending = s.pending[:0]
			}
			return s, 0, err
		}
		s.off += n
		s.pending[top]--
		if follow > 0 {
			s.pending = append(s.pending, follow)
		}
	}
	return s, s.off, nil
}

// head reads the item at the start of b without decoding it: a scalar
// whole, or an aggregate's header, after which follow values come (its
// elements, a map's pairs counted twice, and for an attribute the value it
// describes). n == 0 with a nil error: b holds only the item's start. It
// refuses what decode refuses.
func head(b []byte) (n int, follow int64, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	switch typ := b[0]; typ {
	case ':', '$', '=', '!', '*', '~', '%', '|':
		body, n, err := line(b, maxNumLine)
		if n == 0 {
			return 0, 0, err
		}
		num, ok := ParseInt(body)
		switch {
		case !ok:
			return 0, 0, ErrProtocol
		case typ == ':':
			return n, 0, nil
		case typ == '$' || typ == '=' || typ == '!':
			return stringEnd(b, typ, n, num)
		case num > MaxElems:
			return 0, 0, ErrProtocol
		case num < 0:
			return n, 0, nil
		case typ == '%':
			return n, 2 * num, nil
		case typ == '|':
			return n, 2*num + 1, nil
		}
		return n, num, nil
	case '+', '-', '_', '#', ',', '(':
		body, n, err := line(b, MaxBulk)
		if n == 0 {
			return 0, 0, err
		}
		if typ == ',' { // the one line type whose body can be wrong; a double allocates nothing
			if _, ok := decodeLine(typ, body); !ok {
				return 0, 0, ErrProtocol
			}
		}
		return n, 0, nil
	}
	return 0, 0, ErrProtocol
}

// stringEnd finds the end of a bulk string, verbatim string or bulk error
// of size bytes whose header took hdr bytes.
func stringEnd(b []byte, typ byte, hdr int, size int64) (int, int64, error) {
	switch {
	case size > MaxBulk, typ == '=' && size >= 0 && size < 4: // a verbatim string starts "txt:"
		return 0, 0, ErrProtocol
	case size < 0:
		return hdr, 0, nil
	}
	end := hdr + int(size)
	switch {
	case len(b) < end+2:
		return 0, 0, nil
	case b[end] != '\r' || b[end+1] != '\n':
		return 0, 0, ErrProtocol
	}
	return end + 2, 0, nil
}
