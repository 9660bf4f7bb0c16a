package quorum

import (
	"context"
	"net"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// queueLoop is a backend.Loop whose Execute queues; the test runs the
// queue (a stand-in for gnet's task queue in a unit test of flush's logic).
type queueLoop struct{ tasks []func() }

func (l *queueLoop) Enroll(context.Context, net.Conn, backend.LoopPeer) error { return nil }
func (l *queueLoop) Execute(f func()) error                                   { l.tasks = append(l.tasks, f); return nil }

func (l *queueLoop) drain() {
	for len(l.tasks) > 0 {
		f := l.tasks[0]
		l.tasks = l.tasks[1:]
		f()
	}
}

// hookWriter records what is written and runs onWrite within Write, as a
// failed write that closes its connection runs the close's consequences.
type hookWriter struct {
	got     []byte
	onWrite func()
}

func (w *hookWriter) Write(b []byte) error {
	w.got = append(w.got, b...)
	if f := w.onWrite; f != nil {
		w.onWrite = nil
		f()
	}
	return nil
}
func (w *hookWriter) Close() error { return nil }

// A connection marked dirty while flush writes another (a failed write's
// close ended an operation whose caller started the next) is written all
// the same. Before, flush dropped it with the list it was appended to, it
// stayed marked, and nothing was written to it again.
func TestFlushKeepsConnectionsMarkedDuringFlush(t *testing.T) {
	l := &queueLoop{}
	ql := &qloop{l: l}
	ql.flushFn = ql.flush
	wa, wb := &hookWriter{}, &hookWriter{}
	a := &lnode{ql: ql, state: up, cur: &lconn{w: wa}}
	b := &lnode{ql: ql, state: up, cur: &lconn{w: wb}}
	a.cur.ln, b.cur.ln = a, b
	wa.onWrite = func() {
		b.wbuf = append(b.wbuf, "*1\r\n$4\r\nPING\r\n"...)
		ql.markDirty(b)
	}
	a.wbuf = append(a.wbuf, "*1\r\n$4\r\nPING\r\n"...)
	ql.markDirty(a)
	l.drain()
	if string(wb.got) != "*1\r\n$4\r\nPING\r\n" {
		t.Fatalf("b was written %q; want its PING", wb.got)
	}
	// And b is listed again the next time it has something to write.
	b.wbuf = append(b.wbuf, "*1\r\n$4\r\nECHO\r\n"...)
	ql.markDirty(b)
	l.drain()
	if string(wb.got) != "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nECHO\r\n" {
		t.Fatalf("b was written %q; want PING then ECHO", wb.got)
	}
}

// Commands queued while their connection's Write runs (a failed write
// closes the connection within Write, and an ended acquire queues its undo
// for the next connection) are kept for the next write. Before, write
// cleared the buffer after Write, and they were lost while their calls
// waited for replies.
func TestWriteKeepsCommandsQueuedDuringWrite(t *testing.T) {
	l := &queueLoop{}
	ql := &qloop{l: l}
	ql.flushFn = ql.flush
	w := &hookWriter{}
	ln := &lnode{ql: ql, state: up, cur: &lconn{w: w}}
	ln.cur.ln = ln
	w.onWrite = func() { ln.wbuf = append(ln.wbuf, "*1\r\n$4\r\nECHO\r\n"...) }
	ln.wbuf = append(ln.wbuf, "*1\r\n$4\r\nPING\r\n"...)
	ln.write()
	if string(ln.wbuf) != "*1\r\n$4\r\nECHO\r\n" {
		t.Fatalf("left to write %q; want the ECHO queued during the write", ln.wbuf)
	}
	ln.write()
	if string(w.got) != "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nECHO\r\n" {
		t.Fatalf("written %q; want PING then ECHO", w.got)
	}
}
