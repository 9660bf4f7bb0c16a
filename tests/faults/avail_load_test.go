package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// outcome is how one request of the load ended.
type outcome byte

const (
	granted outcome = 'g' // acquire: the lock was granted; release: released
	refused outcome = 'n' // acquire: held by another (nil, 0, the library's "not obtained"); release: not held
	failed  outcome = 'e' // an error: an error reply, a timeout, a lost connection
)

// event is one acquire ('a') or release ('r') request of the load, with
// when it started and ended on the wall clock (the node load reports its
// own, from the same clock).
type event struct {
	op         byte
	start, end time.Time
	out        outcome
	err        string // for failed
}

// loadConfig is the load an availability run puts on lockproxy.
type loadConfig struct {
	Addr      string
	Prefix    string // every key starts with it
	Contended bool   // Workers share Keys keys; otherwise each attempt is on a fresh key of its worker
	Workers   int
	Keys      int
	TTL       time.Duration
	Hold      time.Duration // a grant is released after Hold
	OpTimeout time.Duration // bounds each request
}

// key returns the key of worker w's attempt i.
func (c loadConfig) key(w, i int, r *rand.Rand) string {
	if c.Contended {
		return c.Prefix + "c:" + strconv.Itoa(r.IntN(c.Keys))
	}
	return c.Prefix + "u:" + strconv.Itoa(w) + ":" + strconv.Itoa(i)
}

// load is a running availability load; stop ends it and returns every
// request it made.
type load interface {
	stop(t *testing.T) []event
}

// goLoad runs cfg.Workers goroutines, each with its own lockcheck.Locker:
// acquire once, on a grant hold cfg.Hold and release, after a refusal or an
// error back off 0–2ms; again until stopped. An acquire that failed is not
// released (the Go clients do not do it either).
type goLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events [][]event
}

func startGoLoad(t *testing.T, cfg loadConfig, newLocker func(addr string) lockcheck.Locker) *goLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &goLoad{cancel: cancel, events: make([][]event, cfg.Workers)}
	runID := strconv.FormatUint(rand.Uint64(), 36)
	for w := range cfg.Workers {
		lk := newLocker(cfg.Addr)
		l.wg.Go(func() {
			if c, ok := lk.(io.Closer); ok {
				defer c.Close()
			}
			r := rand.New(rand.NewPCG(uint64(w), rand.Uint64()))
			for i := 0; ctx.Err() == nil; i++ {
				key, token := cfg.key(w, i, r), fmt.Sprintf("w%d-%d-%s", w, i, runID)
				ok, err := l.do(ctx, w, 'a', cfg.OpTimeout, func(ctx context.Context) (bool, error) {
					return lk.Acquire(ctx, key, token, cfg.TTL)
				})
				if !ok {
					if err != nil && ctx.Err() != nil {
						return
					}
					time.Sleep(time.Duration(r.Int64N(int64(2 * time.Millisecond)))) // the load's backoff
					continue
				}
				time.Sleep(cfg.Hold) // the load's hold time
				l.do(ctx, w, 'r', cfg.OpTimeout, func(ctx context.Context) (bool, error) {
					return true, lk.Release(ctx, key, token)
				})
			}
		})
	}
	return l
}

// do runs one request of worker w and records it. A request cut short by
// the end of the load is not recorded.
func (l *goLoad) do(ctx context.Context, w int, op byte, timeout time.Duration, f func(context.Context) (bool, error)) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	ok, err := f(rctx)
	e := event{op: op, start: start, end: time.Now(), out: granted}
	switch {
	case err != nil && ctx.Err() != nil:
		return false, err
	case err != nil:
		e.out, e.err = failed, err.Error()
	case !ok:
		e.out = refused
	}
	l.events[w] = append(l.events[w], e)
	return ok, err
}

func (l *goLoad) stop(*testing.T) []event {
	l.cancel()
	l.wg.Wait()
	var out []event
	for _, es := range l.events {
		out = append(out, es...)
	}
	return out
}

// scriptLocker acquires with an acquiring script sent as EVAL (the shape of
// most hand-written locks: SET NX PX inside Lua, 1 or 0) and releases with
// the owner-checked delete script (EVALSHA, EVAL on NOSCRIPT).
type scriptLocker struct{ c *redis.Client }

const acquireScript = `if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then return 1 end return 0`

var ownerRelease = redis.NewScript(`if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`)

func newScriptLocker(addr string) lockcheck.Locker {
	return &scriptLocker{c: redis.NewClient(lockcheck.ClientOptions(addr))}
}

func (l *scriptLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := l.c.Eval(ctx, acquireScript, []string{key}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

func (l *scriptLocker) Release(ctx context.Context, key, token string) error {
	return ownerRelease.Run(ctx, l.c, []string{key}, token).Err()
}

func (l *scriptLocker) Close() error { return l.c.Close() }

// nodeModules is where ./test.sh installs the node client libraries.
const nodeModules = "../node/node_modules"

// needNode returns the node binary, or skips the test (fails it when CI is
// set) when node or the client libraries are missing.
func needNode(t *testing.T) string {
	t.Helper()
	node := testsrv.Need(t, "node")
	if _, err := os.Stat(filepath.Join(nodeModules, "redlock5")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tests/node/node_modules is missing: run npm ci in tests/node (./test.sh does)")
		}
		t.Skip("tests/node/node_modules is missing: run npm ci in tests/node (./test.sh does)")
	}
	return node
}

// nodeLoad is the same load run by a node client library in one node
// process (testdata/avail.js): it starts when the process says "ready" and
// ends when its stdin closes, then the process prints every request.
type nodeLoad struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	errs  *testsrv.SyncBuffer
}

func startNodeLoad(t *testing.T, lib string, cfg loadConfig) *nodeLoad {
	t.Helper()
	node := needNode(t)
	abs, err := filepath.Abs(nodeModules)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "testdata/avail.js", cfg.Addr, lib, cfg.Prefix, strconv.FormatBool(cfg.Contended),
		strconv.Itoa(cfg.Workers), strconv.Itoa(cfg.Keys), strconv.FormatInt(cfg.TTL.Milliseconds(), 10),
		strconv.FormatInt(cfg.Hold.Microseconds(), 10), strconv.FormatInt(cfg.OpTimeout.Milliseconds(), 10))
	cmd.Env = append(os.Environ(), "NODE_PATH="+abs)
	l := &nodeLoad{cmd: cmd, errs: &testsrv.SyncBuffer{}}
	cmd.Stderr = l.errs
	if l.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	l.out = bufio.NewReader(stdout)
	if line, err := l.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("node %s: %q, %v\n%s", lib, line, err, l.errs)
	}
	return l
}

func (l *nodeLoad) stop(t *testing.T) []event {
	t.Helper()
	l.stdin.Close()
	var out []event
	for {
		line, err := l.out.ReadString('\n')
		if line != "" {
			e, perr := parseNodeEvent(strings.TrimSuffix(line, "\n"))
			if perr != nil {
				t.Fatalf("node load: %v", perr)
			}
			out = append(out, e)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("node load: %v", err)
		}
	}
	if err := l.cmd.Wait(); err != nil {
		t.Fatalf("node load: %v\n%s", err, l.errs)
	}
	return out
}

// parseNodeEvent reads "op startµs endµs outcome [error text]".
func parseNodeEvent(line string) (event, error) {
	f := strings.SplitN(line, " ", 5)
	if len(f) < 4 || len(f[0]) != 1 || len(f[3]) != 1 {
		return event{}, fmt.Errorf("bad line %q", line)
	}
	s, err1 := strconv.ParseInt(f[1], 10, 64)
	e, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return event{}, fmt.Errorf("bad line %q: %v", line, err)
	}
	ev := event{op: f[0][0], start: time.UnixMicro(s), end: time.UnixMicro(e), out: outcome(f[3][0])}
	if len(f) == 5 {
		ev.err = f[4]
	}
	return ev, nil
}
