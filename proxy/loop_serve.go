package proxy

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/lockproxy/lockproxy/backend"
)

// serveLoops is Serve on the event-loop front end. Accepting stays a
// plain goroutine on ln (so Serve takes any net.Listener, and the max
// clients check and the drain work as on the goroutine front end); each
// accepted connection is then handed to one of gnet's loops
// (gnet.Client.EnrollContext, which takes over its file descriptor).
// Accepting costs a goroutine wake-up per connection, not per command.
func (s *Server) serveLoops(ln net.Listener) error {
	dl := &drainListener{Listener: ln, done: make(chan struct{})}
	if !s.listening(dl) {
		return nil
	}

	h := &loopHandler{s: s, loops: newLoopBackends(s.b)}
	h.loops.h = h
	cli, err := gnet.NewClient(h,
		gnet.WithNumEventLoop(s.cfg.Loops), gnet.WithLogger(gnetLogger{s.log}),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay))
	if err != nil {
		return err
	}
	if err := cli.Start(); err != nil {
		return err
	}
	defer cli.Stop() // closes what a timed-out drain left
	if s.cfg.IdleTimeout > 0 {
		go s.sweepIdle(dl.done)
	}
	for {
		c, err := accept(ln, s.log)
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if !draining {
				return err
			}
			<-dl.done // Shutdown's wait is over
			return nil
		}
		s.enroll(cli, c)
	}
}

// enroll hands an accepted connection to an event loop, or refuses it
// (draining, max clients) as the goroutine front end does.
func (s *Server) enroll(cli *gnet.Client, c net.Conn) {
	s.mu.Lock()
	draining, full := s.draining, len(s.clients) >= s.cfg.MaxClients
	s.mu.Unlock()
	switch {
	case draining:
		c.Close()
		return
	case full:
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write([]byte("-" + backend.MsgMaxClients + "\r\n"))
		c.Close()
		return
	}
	lc := newLoopConn(s, c.RemoteAddr().String())
	if _, err := cli.EnrollContext(c, lc); err != nil { // it closes c either way
		s.log.Error("event loop refused a connection", "addr", lc.cl.addr, "err", err)
		lc.cl.cancel()
	}
}

// sweepIdle wakes the connections idle for longer than Config.IdleTimeout;
// their loop closes them unless a command is running (afterBatch).
func (s *Server) sweepIdle(done <-chan struct{}) {
	idle := s.cfg.IdleTimeout
	t := time.NewTicker(min(max(idle/10, 10*time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			s.mu.Lock()
			for cl := range s.clients {
				if lc := cl.lc; lc != nil && now.UnixNano()-lc.lastActive.Load() >= int64(idle) {
					lc.wake()
				}
			}
			s.mu.Unlock()
		}
	}
}

// gnetLogger sends gnet's own log lines to the server's logger.
type gnetLogger struct{ log *slog.Logger }

func (l gnetLogger) Debugf(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l gnetLogger) Infof(format string, args ...any)  { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l gnetLogger) Warnf(format string, args ...any)  { l.log.Warn(fmt.Sprintf(format, args...)) }
func (l gnetLogger) Errorf(format string, args ...any) { l.log.Error(fmt.Sprintf(format, args...)) }
func (l gnetLogger) Fatalf(format string, args ...any) { l.log.Error(fmt.Sprintf(format, args...)) }
