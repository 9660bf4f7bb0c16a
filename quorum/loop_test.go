package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// The front end's loops (loop.go): a proxy on event loops over real
// nodes; every test checks that the operations it looks at really ran on
// the front end's loops (LoopOps), so that a silent fall back to a
// blocking call cannot pass for it.

const releaseSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// startLoopProxy serves a quorum backend over nodes on the event-loop
// front end with loops loops; it returns a client of the proxy.
func startLoopProxy(t testing.TB, nodes []*testsrv.Redis, loops int, cfg quorum.Config) (*redis.Client, *quorum.Backend) {
	t.Helper()
	for _, n := range nodes {
		cfg.Nodes = append(cfg.Nodes, n.Addr)
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = testTimeout
	}
	b, err := quorum.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := testsrv.StartLockproxy(t, proxy.Config{DataPath: proxy.DataPathLoops, Loops: loops, BackendName: "quorum"}, b)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, Protocol: 2, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	return c, b
}

func directClients(t *testing.T, nodes []*testsrv.Redis) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		out[i] = redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		t.Cleanup(func() { out[i].Close() })
	}
	return out
}

// onLoops runs f and fails the test unless at least n operations ran on
// the loops meanwhile.
func onLoops(t *testing.T, b *quorum.Backend, n int64, f func()) {
	t.Helper()
	before := b.LoopOps()
	f()
	if got := b.LoopOps() - before; got < n {
		t.Fatalf("%d operations ran on the event loops; want at least %d (the loop path was not taken)", got, n)
	}
}

// acquire is SET key tok NX PX ttl.
func acquire(ctx context.Context, c *redis.Client, key, tok string, ttl time.Duration) (bool, error) {
	return c.SetNX(ctx, key, tok, ttl).Result()
}

func isTryAgain(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") }

func TestLoopAcquireRelease(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 2, quorum.Config{})
	ctx := t.Context()
	release := redis.NewScript(releaseSrc)
	acquire(ctx, c, "warm", "x", time.Second) // the loop connects on its first client
	waitLoopReady(t, c, b)
	onLoops(t, b, 5, func() {
		if ok, err := acquire(ctx, c, "k", "t1", 10*time.Second); !ok || err != nil {
			t.Fatalf("SET k t1 NX PX = %v, %v; want OK", ok, err)
		}
		if ok, err := acquire(ctx, c, "k", "t2", 10*time.Second); ok || err != nil {
			t.Fatalf("SET k t2 NX PX on a held key = %v, %v; want nil", ok, err)
		}
		if n, err := release.Run(ctx, c, []string{"k"}, "t2").Int(); n != 0 || err != nil {
			t.Fatalf("release by a stranger = %v, %v; want 0", n, err)
		}
		if n, err := release.Run(ctx, c, []string{"k"}, "t1").Int(); n != 1 || err != nil {
			t.Fatalf("release by the holder = %v, %v; want 1", n, err)
		}
		if ok, err := acquire(ctx, c, "k", "t2", 10*time.Second); !ok || err != nil {
			t.Fatalf("SET k t2 NX PX after the release = %v, %v; want OK", ok, err)
		}
		// EX works as PX.
		if ok, err := c.SetArgs(ctx, "k2", "t", redis.SetArgs{Mode: "NX", TTL: 5 * time.Second}).Result(); ok != "OK" || err != nil {
			t.Fatalf("SET k2 t EX 5 NX = %q, %v; want OK", ok, err)
		}
	})
	for i, d := range directClients(t, nodes) {
		var v string
		if !testsrv.Settled(func() bool { v, _ = d.Get(ctx, "k").Result(); return v == "t2" }) {
			t.Errorf("node %d holds k = %q; want t2", i, v)
		}
		if ttl, _ := d.PTTL(ctx, "k2").Result(); ttl <= 0 || ttl > 5*time.Second {
			t.Errorf("node %d: PTTL k2 = %v; want (0, 5s]", i, ttl)
		}
	}
}

// waitLoopReady waits until an acquire runs on the loop (the loop's node
// connections are up).
func waitLoopReady(t *testing.T, c *redis.Client, b *quorum.Backend) {
	t.Helper()
	i := 0
	wait.For(t, "the loop path to take an acquire (its node connections set up)", func() bool {
		i++
		before := b.LoopOps()
		c.SetNX(t.Context(), fmt.Sprintf("ready%d", i), "x", time.Second)
		return b.LoopOps() > before
	})
}

// GET, PTTL and TTL are majority reads on the loop: the token two of
// three nodes hold, the TTL two nodes still have; no majority is TRYAGAIN.
func TestLoopReads(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	direct := directClients(t, nodes)
	waitLoopReady(t, c, b)
	direct[0].Set(ctx, "k", "a", 0)
	direct[1].Set(ctx, "k", "b", 10*time.Second)
	direct[2].Set(ctx, "k", "b", 20*time.Second)
	onLoops(t, b, 4, func() {
		if v, err := c.Get(ctx, "k").Result(); v != "b" || err != nil {
			t.Errorf("GET k = %q, %v; want b (two of three nodes)", v, err)
		}
		if _, err := c.Get(ctx, "absent").Result(); err != redis.Nil {
			t.Errorf("GET absent = %v; want nil", err)
		}
		if d, err := c.PTTL(ctx, "k").Result(); err != nil || d <= 9*time.Second || d > 10*time.Second {
			t.Errorf("PTTL k = %v, %v; want the second longest, about 10s", d, err)
		}
		if d, err := c.TTL(ctx, "k").Result(); err != nil || d != 10*time.Second {
			t.Errorf("TTL k = %v, %v; want 10s", d, err)
		}
	})
	direct[1].Set(ctx, "k", "c", 0)
	onLoops(t, b, 1, func() {
		if v, err := c.Get(ctx, "k").Result(); !isTryAgain(err) {
			t.Errorf("GET k with three different tokens = %q, %v; want TRYAGAIN", v, err)
		}
	})
}

// A partial acquire is undone on the node that granted it, and the answer
// follows the counts: nil when N−Q+1 nodes said held, TRYAGAIN when a
// failure decided.
func TestLoopUndoPartial(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	direct := directClients(t, nodes)
	waitLoopReady(t, c, b)

	for _, d := range direct[:2] {
		d.Set(ctx, "held", "other", 0)
	}
	onLoops(t, b, 1, func() { // the acquire (its undo may follow the answer: waitGone)
		ok, err := acquire(ctx, c, "held", "mine", 10*time.Second)
		if ok || err != nil {
			t.Fatalf("SET NX on a key two of three nodes hold = %v, %v; want nil", ok, err)
		}
	})
	waitGone(t, direct[2], "held")

	direct[0].Set(ctx, "split", "other", 0)
	nodes[1].Kill()
	onLoops(t, b, 2, func() {
		ok, err := acquire(ctx, c, "split", "mine", 10*time.Second)
		if ok || !isTryAgain(err) {
			t.Fatalf("SET NX with one node holding, one down, one free = %v, %v; want TRYAGAIN", ok, err)
		}
	})
	waitGone(t, direct[2], "split")
}

// An acquiring script runs on the loop once classified, read around on
// every node: where it created the key on too few nodes it is undone there,
// and a script that creates on a majority is kept.
func TestLoopScriptUndoPartial(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	direct := directClients(t, nodes)
	waitLoopReady(t, c, b)
	script := redis.NewScript(acquireSrc)
	// The first call classifies the script, as a blocking call.
	if n, err := script.Run(ctx, c, []string{"first"}, "t", 10000).Int(); n != 1 || err != nil {
		t.Fatalf("acquire script = %d, %v; want 1", n, err)
	}
	for _, d := range direct[:2] {
		d.Set(ctx, "held", "other", 0)
	}
	onLoops(t, b, 1, func() { // the script (its undo may follow the answer: waitGone)
		n, err := script.Run(ctx, c, []string{"held"}, "mine", 10000).Int()
		if n != 0 || err != nil {
			t.Fatalf("acquire script on a key two of three nodes hold = %d, %v; want 0", n, err)
		}
	})
	waitGone(t, direct[2], "held")
	onLoops(t, b, 1, func() {
		n, err := script.Run(ctx, c, []string{"free"}, "mine", 10000).Int()
		if n != 1 || err != nil {
			t.Fatalf("acquire script on a free key = %d, %v; want 1", n, err)
		}
	})
	for i, d := range direct {
		if v, _ := d.Get(ctx, "free").Result(); v != "mine" {
			t.Errorf("node %d holds free = %q; want mine", i, v)
		}
	}
}

// waitGone waits for an undo (sent before the client's reply, but over
// another connection than d's) to reach the node.
func waitGone(t *testing.T, d *redis.Client, key string) {
	t.Helper()
	if !testsrv.Settled(func() bool { n, err := d.Exists(t.Context(), key).Result(); return err == nil && n == 0 }) {
		t.Fatalf("%s still on the node that granted it: the partial acquire was not undone", key)
	}
}

// An acquire whose TTL cannot outlive the vote plus the drift allowance is
// refused with TRYAGAIN (never OK, never nil) and undone everywhere.
func TestLoopValidity(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{DriftConst: 5 * time.Millisecond})
	ctx := t.Context()
	waitLoopReady(t, c, b)
	onLoops(t, b, 2, func() {
		ok, err := acquire(ctx, c, "short", "t", 5*time.Millisecond)
		if ok || !isTryAgain(err) || !strings.Contains(err.Error(), "too late") {
			t.Fatalf("SET NX PX 5 with a 5ms drift allowance = %v, %v; want TRYAGAIN quorum reached too late", ok, err)
		}
	})
}

// A node that lost its scripts (restarted, or SCRIPT FLUSH) answers
// EVALSHA with NOSCRIPT; the loop path sends it the script by EVAL, and
// the node really runs it.
func TestLoopNoScriptFallback(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	direct := directClients(t, nodes)
	sha, err := c.ScriptLoad(ctx, releaseSrc).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Warm up with a release of a key nobody holds (it grants no TTL: the
	// restart below then costs no quarantine, and the restarted node
	// votes). A script's first call classifies it as a blocking call (no
	// Lua runs on a loop); later calls of a release are the loop's.
	before := b.LoopOps()
	wait.For(t, "the loop path to take a script", func() bool {
		if err := c.EvalSha(ctx, sha, []string{"lock"}, "tok").Err(); err != nil {
			t.Fatal(err)
		}
		return b.LoopOps() != before
	})

	nodes[0].Restart()
	direct[1].ScriptFlush(ctx)
	// Until the loop's connection to the restarted node is set up again,
	// that node fails; wait for it (as many connections as node 2 has:
	// quorum's own loops' and the front end's loop's).
	wait.Until(t, "the proxy to reconnect to the restarted node", func() (bool, any) {
		cl, _ := direct[0].ClientList(ctx).Result()
		want, _ := direct[2].ClientList(ctx).Result()
		if n := strings.Count(cl, "name=lockproxy"); n > 0 && n >= strings.Count(want, "name=lockproxy") {
			return true, cl
		}
		c.Eval(ctx, "return 1", nil) // the loop hears of the break when it uses the connection
		return false, cl
	})
	// The loop's own connection to node 0 may still be between attempts
	// (a dial refused while the node restarted): then its call fails at
	// once and node 0 keeps the key, which is not what this test is
	// about. So the release is tried until node 0 takes part, each time
	// with nodes 0 and 1 forgetting the script again.
	held := func() []int {
		var on []int
		for i, d := range direct {
			if v, err := d.Exists(ctx, "lock").Result(); v != 0 || err != nil {
				on = append(on, i)
			}
		}
		return on
	}
	wait.Until(t, "EVALSHA's NOSCRIPT to be followed by EVAL on every node", func() (bool, any) {
		direct[0].ScriptFlush(ctx)
		direct[1].ScriptFlush(ctx)
		for _, d := range direct {
			d.Set(ctx, "lock", "tok", 0)
		}
		onLoops(t, b, 1, func() {
			n, err := c.EvalSha(ctx, sha, []string{"lock"}, "tok").Int()
			if n != 1 || err != nil {
				t.Fatalf("EVALSHA release = %d, %v; want 1", n, err)
			}
		})
		// A node whose NOSCRIPT comes after the other two agreed runs the
		// script by EVAL then, moments after the reply.
		return testsrv.Settled(func() bool { return len(held()) == 0 }), fmt.Sprintf("nodes %v holding the lock", held())
	})
}

// Under load from many clients on few keys, nodes are paused (SIGSTOP)
// and killed: an acquire answers OK only when nobody else holds the key,
// TRYAGAIN when failures decide, and never blocks past the node timeout.
//
// Twice: with SET NX, and with an acquiring script (watched: read around
// on every node, and undone where it created a key on too few).
func TestLoopNodeFaultsUnderLoad(t *testing.T) {
	for _, by := range []string{"set", "script"} {
		t.Run(by, func(t *testing.T) { loopFaultsUnderLoad(t, by) })
	}
}

// acquireSrc is node redlock's kind of acquire: a script that sets the key
// when it is absent.
const acquireSrc = `if redis.call("exists", KEYS[1]) == 0 then redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) return 1 end return 0`

func loopFaultsUnderLoad(t *testing.T, by string) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 2, quorum.Config{})
	ctx := t.Context()
	waitLoopReady(t, c, b)
	release := redis.NewScript(releaseSrc)
	if err := release.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	lock := func(key, tok string) (bool, error) { return acquire(ctx, c, key, tok, ttl) }
	if by == "script" {
		script := redis.NewScript(acquireSrc)
		lock = func(key, tok string) (bool, error) {
			n, err := script.Run(ctx, c, []string{key}, tok, ttl.Milliseconds()).Int()
			return n == 1, err
		}
	}

	var mu sync.Mutex
	type hold struct {
		tok       string
		until     time.Time // the key may be held on the nodes until then
		releasing bool      // a release was sent: the key may be free any time
	}
	holders := map[string]hold{}
	var counts sync.Map // outcome → *int
	count := func(k string) {
		v, _ := counts.LoadOrStore(k, new(int))
		mu.Lock()
		*v.(*int)++
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", i%4)
				tok := fmt.Sprintf("w%d-%d", w, i)
				sent := time.Now()
				ok, err := lock(key, tok)
				took := time.Since(sent)
				if took > 3*testTimeout+time.Second {
					t.Errorf("an acquire took %v with a %v node timeout", took, testTimeout)
				}
				switch {
				case err != nil && !isTryAgain(err):
					t.Errorf("acquire (%s) = %v; want OK, nil or TRYAGAIN", by, err)
					return
				case err != nil:
					count("tryagain")
					continue
				case !ok:
					count("nil")
					continue
				}
				count("ok")
				mu.Lock()
				if h, held := holders[key]; held && !h.releasing && time.Now().Before(h.until) {
					t.Errorf("two holders of %s: %s and %s", key, h.tok, tok)
				}
				holders[key] = hold{tok: tok, until: sent.Add(ttl)}
				mu.Unlock()
				time.Sleep(time.Millisecond) // hold it a little: others contend meanwhile
				mu.Lock()
				if h := holders[key]; h.tok == tok {
					h.releasing = true
					holders[key] = h
				}
				mu.Unlock()
				release.Run(ctx, c, []string{key}, tok)
			}
		})
	}
	loopsBefore := b.LoopOps()
	phase := func(d time.Duration) {
		t.Helper()
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	phase(300 * time.Millisecond)
	nodes[0].Stop() // one node paused: the others carry the vote
	phase(600 * time.Millisecond)
	nodes[1].Stop() // two paused: no majority, TRYAGAIN
	phase(600 * time.Millisecond)
	nodes[0].Cont()
	nodes[1].Cont()
	phase(600 * time.Millisecond)
	nodes[2].Kill() // one killed
	phase(600 * time.Millisecond)
	close(stop)
	wg.Wait()
	got := map[string]int{}
	counts.Range(func(k, v any) bool { got[k.(string)] = *v.(*int); return true })
	t.Logf("outcomes: %v; %d operations on the loops", got, b.LoopOps()-loopsBefore)
	if got["ok"] == 0 || got["tryagain"] == 0 {
		t.Errorf("outcomes %v: want both OK (a majority up) and TRYAGAIN (two nodes paused)", got)
	}
	if b.LoopOps()-loopsBefore < int64(got["ok"]) {
		t.Errorf("%d operations on the loops for %d acquires granted: the load did not run on the loops", b.LoopOps()-loopsBefore, got["ok"])
	}
	// After the pause, the connections to the paused nodes were replaced
	// (overdue replies) and the loop path works with the two live nodes.
	wait.Until(t, "SET NX to be granted once the paused nodes are reconnected", func() (bool, any) {
		ok, err := acquire(ctx, c, "after", "t", ttl)
		return ok && err == nil, fmt.Sprintf("SET NX = %v, %v", ok, err)
	})
}

// A client that shuts down its writing half while its acquire runs on the
// loop still gets the reply (here held up by a stopped node for the node
// timeout), as with a command run off the loop, and is then closed.
func TestLoopHalfCloseGetsReply(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{NodeTimeout: 500 * time.Millisecond})
	waitLoopReady(t, c, b)
	nodes[2].Stop()
	defer nodes[2].Cont()
	conn, err := net.Dial("tcp", c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := b.LoopOps()
	conn.Write([]byte("SET hc tok NX PX 10000\r\nPING\r\n"))
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if string(got) != "+OK\r\n+PONG\r\n" || err != nil {
		t.Fatalf("replies after a half-close = %q, %v; want +OK and +PONG, then the end", got, err)
	}
	if b.LoopOps() == before {
		t.Fatal("the acquire did not run on the loop")
	}
}

// A close decided in the pass that resumes a connection after its command
// ran on the loop (QUIT pipelined behind an acquire: proxy's resumer, not
// gnet's own event, runs that pass and acts on its close) comes after the
// replies before it, and nothing sent after it runs.
func TestLoopQuitAfterLoopCommand(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	waitLoopReady(t, c, b)
	for i := range 20 {
		conn, err := net.Dial("tcp", c.Options().Addr)
		if err != nil {
			t.Fatal(err)
		}
		before := b.LoopOps()
		key := fmt.Sprintf("quit%d", i)
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			conn.Write([]byte("SET " + key + " tok NX PX 10000\r\nQUIT\r\n"))
			time.Sleep(time.Duration(i%4) * time.Millisecond) // before, during or after the acquire's outcome
			conn.Write([]byte("SET " + key + "b tok NX PX 10000\r\nPING\r\n"))
		}()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		<-wrote
		conn.Close()
		switch want := "+OK\r\n+OK\r\n"; {
		case err == nil && string(got) == want:
		case isReset(err) && strings.HasPrefix(want, string(got)):
			// The server closed with the later input unread: the reset may
			// cut replies already on their way.
		default:
			t.Fatalf("replies to SET NX, QUIT, then more = %q, %v; want +OK twice, then the end", got, err)
		}
		if b.LoopOps() == before {
			t.Fatal("the acquire did not run on the loop")
		}
		if v, _ := c.Exists(t.Context(), key+"b").Result(); v != 0 {
			t.Fatalf("a command sent after QUIT ran: %sb exists", key)
		}
	}
}

// isReset reports whether err is a connection reset: the server closed
// with input unread (what came after QUIT), which Linux answers with RST.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// droppingBackend is a quorum backend whose event loops drop the first
// drop node connections enrolled on them the way gnet does when it fails
// to register one: the descriptor is closed, Enroll reports success, and
// the connection is never opened.
type droppingBackend struct {
	*quorum.Backend
	drop *atomic.Int32
}

func (d droppingBackend) NewLoop(l backend.Loop) backend.LoopBackend {
	return d.Backend.NewLoop(droppingLoop{l, d.drop})
}

type droppingLoop struct {
	backend.Loop
	drop *atomic.Int32
}

func (d droppingLoop) Enroll(ctx context.Context, c net.Conn, p backend.LoopPeer) error {
	if d.drop.Add(-1) >= 0 {
		c.Close()
		return nil
	}
	return d.Loop.Enroll(ctx, c, p)
}

// A node connection enrolled on a loop and never opened there counts as
// a failed dial after a node timeout: the loop's connection to that node
// is set up again, and the loop path is taken (it was stuck "dialing",
// and the loop declined every command, for good).
func TestLoopEnrolledNeverOpened(t *testing.T) {
	nodes := startNodes(t, 3)
	cfg := quorum.Config{NodeTimeout: testTimeout}
	for _, n := range nodes {
		cfg.Nodes = append(cfg.Nodes, n.Addr)
	}
	b, err := quorum.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	drop := &atomic.Int32{}
	drop.Store(1)
	addr := testsrv.StartLockproxy(t, proxy.Config{DataPath: proxy.DataPathLoops, Loops: 1, BackendName: "quorum"}, droppingBackend{b, drop})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	acquire(ctx, c, "warm", "x", time.Second) // the loop connects on its first client
	waitLoopReady(t, c, b)
	if drop.Load() >= 0 {
		t.Fatal("no connection was dropped: the test tests nothing")
	}
	// The failed dial is followed by another after a backoff: poll until
	// an acquire on the loop reaches all three nodes.
	direct := directClients(t, nodes)
	i := -1
	wait.Until(t, "an acquire on the loop to reach all 3 nodes (the dropped connection set up again)", func() (bool, any) {
		i++
		key := fmt.Sprintf("k%d", i)
		onLoops(t, b, 1, func() {
			if ok, err := acquire(ctx, c, key, "t", 10*time.Second); !ok || err != nil {
				t.Fatalf("SET %s t NX PX = %v, %v; want OK", key, ok, err)
			}
		})
		held := 0
		for _, d := range direct {
			if v, _ := d.Get(ctx, key).Result(); v == "t" {
				held++
			}
		}
		return held == 3, fmt.Sprintf("%s on %d nodes", key, held)
	})
}

// A lock script sent by EVAL whose source the proxy has not seen is
// compiled off the front end's loops (its first call is a blocking call,
// as an EVALSHA that needs classifying is); later calls run on the loop.
func TestLoopNewEvalOffLoop(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	waitLoopReady(t, c, b)
	for _, src := range []string{
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], 10000) end return 0`,
	} {
		keys := []string{"k"}
		before := b.LoopOps()
		if err := c.Eval(ctx, src, keys, "tok").Err(); err != nil && err != redis.Nil {
			t.Fatalf("EVAL %q: %v", src, err)
		}
		if n := b.LoopOps() - before; n != 0 {
			t.Fatalf("the first EVAL of %q ran on the event loop (%d operations): its source was compiled there", src, n)
		}
		onLoops(t, b, 1, func() {
			if err := c.Eval(ctx, src, keys, "tok").Err(); err != nil && err != redis.Nil {
				t.Fatalf("EVAL %q: %v", src, err)
			}
		})
	}
}

// A script started on the front end's loop is decided as a blocking
// call's: a reentrant acquire agreed on 1 keeps the key on every node
// that answered 1 (TestScriptAgreedKeepsAgreeingNodes is the blocking
// call's).
func TestLoopScriptAgreedKeepsAgreeingNodes(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 1, quorum.Config{})
	ctx := t.Context()
	direct := directClients(t, nodes)
	waitLoopReady(t, c, b)
	script := redis.NewScript(reentrantSrc)
	if n, err := script.Run(ctx, c, []string{"first"}, "t", 10000).Int(); n != 1 || err != nil {
		t.Fatalf("first call (classifies) = %d, %v; want 1", n, err)
	}
	direct[0].Set(ctx, "k", "mine", 0)
	direct[2].Set(ctx, "k", "other", 0)
	onLoops(t, b, 1, func() {
		if n, err := script.Run(ctx, c, []string{"k"}, "mine", 10000).Int(); n != 1 || err != nil {
			t.Fatalf("reentrant acquire = %d, %v; want 1", n, err)
		}
	})
	// An undo would go out before the reply, over the loop's own
	// connections; an acquire sent after it over the same connections
	// reaches each node after it, so once every node holds the barrier, any
	// undo has landed.
	onLoops(t, b, 1, func() {
		if ok, err := acquire(ctx, c, "barrier", "t", 10*time.Second); !ok || err != nil {
			t.Fatalf("SET barrier NX = %v, %v; want OK", ok, err)
		}
	})
	for i, d := range direct {
		wait.For(t, fmt.Sprintf("node %d to hold the barrier", i), func() bool { return d.Get(ctx, "barrier").Val() == "t" })
	}
	for i, want := range []string{"mine", "mine", "other"} {
		if got, _ := direct[i].Get(ctx, "k").Result(); got != want {
			t.Errorf("node %d holds %q; want %q", i, got, want)
		}
	}
}

// A write that never reached a node — its connection down — leaves nothing
// behind: no hold on its key's stripe, which made the writes of that stripe
// from the other loop's connection leave the node out and queue a repair
// each (a dead node's cost on TestAvailability), and no repair of its own.
func TestLoopDeadNodeQueuesNoRepairs(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 2, quorum.Config{})
	waitLoopReady(t, c, b)
	nodes[2].Kill()
	ctx := t.Context()
	onLoops(t, b, 1900, func() { // a few may run off the loops while a connection is set up
		var wg sync.WaitGroup
		for w := range 20 {
			wg.Go(func() {
				for i := range 100 {
					if ok, err := acquire(ctx, c, fmt.Sprintf("dead:%d:%d", w, i), "tok", time.Minute); err != nil || !ok {
						t.Errorf("acquire with a node down: %v, %v", ok, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	if n := b.RepairsPending(); n > 20 { // those in flight when the node died
		t.Fatalf("%d keys queued for repair after 2,000 acquires with a node down; want none but those in flight at the kill", n)
	}
}

// A script reaches each node loaded ahead of its first EVALSHA on a
// connection, never as a NOSCRIPT sent again by EVAL: that retry ran
// after the writes the connection carried meanwhile (a release's retry
// after the next acquire of its key left a node without the lock).
func TestLoopScriptsNeverNoScript(t *testing.T) {
	nodes := startNodes(t, 3)
	c, b := startLoopProxy(t, nodes, 2, quorum.Config{})
	ctx := t.Context()
	waitLoopReady(t, c, b)
	direct := directClients(t, nodes)
	noScripts := func(d *redis.Client) string {
		stats, err := d.Info(ctx, "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, after, _ := strings.Cut(stats, "errorstat_NOSCRIPT:")
		n, _, _ := strings.Cut(strings.TrimPrefix(after, "count="), "\r")
		return n
	}
	// The horizon markers (db 15) are written by a client of their own,
	// EVALSHA and then EVAL; their first write follows the first acquire.
	acquire(ctx, c, "warm", "x", time.Minute)
	var before []string
	for _, d := range direct {
		before = append(before, noScripts(d))
	}
	release := redis.NewScript(releaseSrc)
	onLoops(t, b, 15, func() { // the first EVAL is classified off the loops
		for i := range 10 {
			key := fmt.Sprintf("ns%d", i)
			if ok, err := acquire(ctx, c, key, "t", time.Minute); !ok || err != nil {
				t.Fatalf("SET %s t NX PX = %v, %v", key, ok, err)
			}
			if n, err := release.Run(ctx, c, []string{key}, "t").Int(); n != 1 || err != nil {
				t.Fatalf("release %s = %v, %v; want 1", key, n, err)
			}
		}
	})
	for i, d := range direct {
		if n := noScripts(d); n != before[i] {
			t.Errorf("node %d answered NOSCRIPT to the lock path (%s, before %s)", i, n, before[i])
		}
	}
}
