package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// The lean load (-client lean, lean-eval): lockbench's own RESP writer and
// reader on one connection per client, no go-redis. go-redis spends
// 30–45 µs of CPU per lock cycle, more than any server under test, which
// caps every party and hides how the servers scale when the load is cheap
// (issue 27). A client sends -pipeline acquires at once (SET key token NX
// PX ttl, one key each), then the releases of those it got (EVALSHA, or
// EVAL with lean-eval) at once; each command's latency is its batch's.

// leanConn is one client's connection.
type leanConn struct {
	c   net.Conn
	w   *bufio.Writer
	r   *resp.Reader
	req resp.Request
}

func dialLean(ctx context.Context, c config, addr string) (*leanConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	lc := &leanConn{c: nc, w: bufio.NewWriterSize(nc, 16<<10), r: resp.NewReader(nc, 16<<10)}
	if c.password != "" {
		if _, err := lc.do("AUTH", c.password); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if c.resp == 3 {
		if _, err := lc.do("HELLO", "3"); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return lc, nil
}

// do sends one command and reads its reply; an error reply is an error.
func (lc *leanConn) do(args ...string) (backend.Value, error) {
	lc.req.B, lc.req.N = lc.req.B[:0], 0
	lc.req.Strs(args...)
	if err := lc.flush(); err != nil {
		return backend.Value{}, err
	}
	v, err := lc.r.ReadValue()
	if err == nil && v.Kind == backend.KindError {
		err = fmt.Errorf("%s", v.Str)
	}
	return v, err
}

func (lc *leanConn) flush() error {
	if _, err := lc.w.Write(lc.req.B); err != nil {
		return err
	}
	return lc.w.Flush()
}

// measureLean runs the lock cycle with the lean load (eval: EVAL release
// instead of EVALSHA).
func measureLean(ctx context.Context, c config, addr string, eval bool) (Result, error) {
	sum := sha1.Sum([]byte(releaseSrc))
	sha := hex.EncodeToString(sum[:])
	conns := make([]*leanConn, c.clients)
	for i := range conns {
		lc, err := dialLean(ctx, c, addr)
		if err != nil {
			return Result{}, err
		}
		defer lc.c.Close()
		conns[i] = lc
	}
	if _, err := conns[0].do("SCRIPT", "LOAD", releaseSrc); err != nil {
		return Result{}, err
	}
	t := newTally(c.clients)
	cycles, contended, fail, acq, rel := &t.cycles, &t.contended, t.fail, t.acq, t.rel
	runCtx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	ttl := strconv.FormatInt(c.ttl.Milliseconds(), 10)
	token := "lockbench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var wg sync.WaitGroup
	start := time.Now()
	for i, lc := range conns {
		wg.Go(func() {
			keys := make([]string, c.pipeline)
			got := make([]bool, c.pipeline)
			tok := token + "-" + strconv.Itoa(i)
			for n := 0; runCtx.Err() == nil; n++ {
				for j := range keys {
					keys[j] = "lockbench:" + strconv.Itoa(i*c.pipeline+j)
					if c.keys > 0 {
						keys[j] = "lockbench:shared:" + strconv.Itoa((i+n+j)%c.keys)
					}
				}
				lc.req.B, lc.req.N = lc.req.B[:0], 0
				for _, k := range keys {
					lc.req.Strs("SET", k, tok, "NX", "PX", ttl)
				}
				t0 := time.Now()
				if err := lc.batch(got, func(v backend.Value) bool { return v.Kind == backend.KindStatus }); err != nil {
					fail(err)
					return
				}
				d := time.Since(t0)
				lc.req.B, lc.req.N = lc.req.B[:0], 0
				held := 0
				for j, k := range keys {
					acq[i] = append(acq[i], d)
					if !got[j] {
						contended.Add(1)
						continue
					}
					held++
					if eval {
						lc.req.Strs("EVAL", releaseSrc, "1", k, tok)
					} else {
						lc.req.Strs("EVALSHA", sha, "1", k, tok)
					}
				}
				if held == 0 {
					continue
				}
				t1 := time.Now()
				if err := lc.batch(got[:held], func(v backend.Value) bool { return v.Kind == backend.KindInt && v.Int == 1 }); err != nil {
					fail(err)
					return
				}
				d = time.Since(t1)
				for _, ok := range got[:held] {
					rel[i] = append(rel[i], d)
					if !ok {
						fail(fmt.Errorf("release not confirmed"))
						continue
					}
					cycles.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return t.result(addr, c.clients, start), nil
}

// batch sends the queued commands and reads one reply each into ok (by
// good); an error reply is an error.
func (lc *leanConn) batch(ok []bool, good func(backend.Value) bool) error {
	if err := lc.flush(); err != nil {
		return err
	}
	for j := range ok {
		v, err := lc.r.ReadValue()
		if err != nil {
			return err
		}
		if v.Kind == backend.KindError {
			return fmt.Errorf("%s", v.Str)
		}
		ok[j] = good(v)
	}
	return nil
}
