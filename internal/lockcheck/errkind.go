package lockcheck

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Error kinds reported by ErrorKind.
const (
	KindTryAgain = "TRYAGAIN"
	KindTimeout  = "timeout"
	KindRefused  = "connection refused"
	KindConnLost = "connection lost"
	KindOther    = "other"
)

// ErrorKind sorts an acquire or release error into a small set of kinds: a
// TRYAGAIN reply, a timeout, a refused connection, a connection lost
// mid-request (EOF, reset, broken pipe), or other.
func ErrorKind(err error) string {
	var ne net.Error
	switch msg := err.Error(); {
	case strings.Contains(msg, "TRYAGAIN"):
		return KindTryAgain
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(), strings.Contains(msg, "i/o timeout"):
		return KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(msg, "connection refused"):
		return KindRefused
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed),
		strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"), strings.Contains(msg, "EOF"):
		return KindConnLost
	}
	return KindOther
}

// errCounts counts errors by kind and keeps the first text of each kind. It
// is safe for concurrent use.
type errCounts struct {
	mu     sync.Mutex
	n      map[string]int64
	sample map[string]string
}

func newErrCounts() *errCounts {
	return &errCounts{n: map[string]int64{}, sample: map[string]string{}}
}

func (c *errCounts) add(err error) {
	k := ErrorKind(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[k]++
	if _, ok := c.sample[k]; !ok {
		c.sample[k] = err.Error()
	}
}

func (c *errCounts) counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *errCounts) samples() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.sample)
}
