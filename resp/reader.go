package resp

import (
	"io"

	"github.com/lockproxy/lockproxy/backend"
)

// Reader decodes replies from an io.Reader, for a goroutine that owns a
// connection: Decode over a buffer it fills as a reply needs. It reads as
// much as the connection has, so one read brings many pipelined replies.
// A reply that takes many reads is scanned on from where the last read
// left it and decoded once, when complete (scan.go).
type Reader struct {
	rd   io.Reader
	buf  []byte // buf[r:] is read and not yet decoded
	r    int
	size int // the buffer's usual capacity
	err  error
	sc   scanner // the scan of the reply at buf[r:], resumed after each fill
}

// NewReader returns a Reader over rd with a buffer of size bytes, which
// grows for a reply that does not fit and shrinks back after it.
func NewReader(rd io.Reader, size int) *Reader {
	return &Reader{rd: rd, buf: make([]byte, 0, size), size: size}
}

// ReadValue reads the next reply. Its error is ErrProtocol or the
// connection's.
func (r *Reader) ReadValue() (backend.Value, error) {
	for {
		if r.r < len(r.buf) {
			v, n, err := r.next()
			if err != nil {
				return backend.Value{}, err
			}
			if n > 0 {
				r.consume(n)
				return v, nil
			}
		}
		if err := r.fill(); err != nil {
			return backend.Value{}, err
		}
	}
}

// next decodes the reply at buf[r:] once it is whole: a scalar at once
// (it allocates only then), an aggregate after scanning on to its end.
func (r *Reader) next() (backend.Value, int, error) {
	b := r.buf[r.r:]
	if !aggregate(b) {
		return decode(b, 0)
	}
	var n int
	var err error
	if r.sc, n, err = r.sc.scan(b); n == 0 {
		return backend.Value{}, 0, err
	}
	return decode(b[:n], 0)
}

// consume drops n decoded bytes; an emptied buffer that grew for a large
// reply is let go.
func (r *Reader) consume(n int) {
	r.r += n
	if r.r < len(r.buf) {
		return
	}
	if cap(r.buf) > r.size && cap(r.buf) > 1<<20 {
		r.buf = make([]byte, 0, r.size)
	}
	r.buf, r.r = r.buf[:0], 0
}

// fill reads once more into the buffer, after moving what is left to its
// start and growing it when full.
func (r *Reader) fill() error {
	if r.err != nil {
		return r.err
	}
	if r.r > 0 {
		n := copy(r.buf, r.buf[r.r:])
		r.buf, r.r = r.buf[:n], 0
	}
	if len(r.buf) == cap(r.buf) {
		r.buf = append(r.buf, make([]byte, cap(r.buf)+1)...)[:len(r.buf)]
	}
	n, err := r.rd.Read(r.buf[len(r.buf):cap(r.buf)])
	r.buf = r.buf[:len(r.buf)+n]
	if err != nil {
		r.err = err
		if n == 0 {
			return err
		}
	}
	return nil
}
