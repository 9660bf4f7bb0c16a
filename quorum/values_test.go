package quorum_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/quorum"
)

// Scripts over the value types. A client's script runs on the model
// (evalmodel.go): these tests hold what its read, commit and put-back
// leave on each node. (values.go's watch remains for lockproxy's own
// typed writes.)

// semaphoreAcquireSrc is redis-semaphore 5.8.0's Semaphore acquire
// (lib/semaphore/acquire/lua.js), byte for byte: KEYS[1] the semaphore,
// ARGV limit, identifier, lockTimeout, now.
const semaphoreAcquireSrc = `
  local key = KEYS[1]
  local limit = tonumber(ARGV[1])
  local identifier = ARGV[2]
  local lockTimeout = tonumber(ARGV[3])
  local now = tonumber(ARGV[4])
  local expiredTimestamp = now - lockTimeout

  redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)

  if redis.call('zcard', key) < limit then
    redis.call('zadd', key, now, identifier)
    redis.call('pexpire', key, lockTimeout)
    return 1
  else
    return 0
  end`

// hashLockSrc is Redisson's RLock acquire (RedissonLock.tryLockInnerAsync):
// a hash of holder → hold count; nil when acquired (or re-entered), else
// the key's PTTL. ARGV: lease time in ms, holder.
const hashLockSrc = `if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then ` +
	`redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; ` +
	`return redis.call('pttl', KEYS[1]);`

// semAcquire runs the semaphore acquire through b for member id.
func semAcquire(ctx context.Context, b *quorum.Backend, key string, limit int, id string, timeout time.Duration, now int64) (backend.Value, error) {
	return b.Eval(ctx, 0, script(semaphoreAcquireSrc), []string{key}, bytesOf([]string{
		strconv.Itoa(limit), id, strconv.FormatInt(timeout.Milliseconds(), 10), strconv.FormatInt(now, 10)}), false)
}

// members returns the members of the sorted set key on c, sorted.
func members(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	m, err := c.ZRange(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	slices.Sort(m)
	return m
}

// settledMembers waits until every node holds want in the sorted set key
// (a node that answered after the vote is put back just after it).
func settledMembers(t *testing.T, direct []*redis.Client, key string, want ...string) {
	t.Helper()
	for i, d := range direct {
		var got []string
		if !testsrv.Settled(func() bool { got = members(t, d, key); return slices.Equal(got, want) }) {
			t.Errorf("node %d: %s holds %q; want %q", i, key, got, want)
		}
	}
}

// pauseFor pauses nodes (SIGSTOP) for d from now, longer than the node
// timeout and shorter than a connection's overdue grace, so that their
// replies come late on the same connections.
func pauseFor(t *testing.T, d time.Duration, nodes ...*testsrv.Redis) (resumed func()) {
	t.Helper()
	for _, n := range nodes {
		n.Stop()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d) // the fault's length, not a synchronisation
		for _, n := range nodes {
			n.Cont()
		}
	}()
	t.Cleanup(func() { <-done })
	return func() { <-done }
}

// evalCalls is how many EVAL commands node c has run (INFO
// commandstats): the proxy sends client scripts by EVALSHA, its restores
// by EVAL.
func evalCalls(t *testing.T, c *redis.Client) int64 { return cmdCalls(t, c, "eval") }

// cmdCalls is how many times node c has run command cmd.
func cmdCalls(t *testing.T, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, _ := strconv.ParseInt(n, 10, 64)
			return v
		}
	}
	return 0
}

func isTryAgainErr(err error) bool {
	var re *backend.ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Reply, "TRYAGAIN")
}

// TestValuesFailedVoteRestored: redis-semaphore's Semaphore acquire with
// two nodes of three paused beyond the node timeout gets no majority
// (TRYAGAIN); the member it added on the node that answered is taken out
// before the reply, and the paused nodes, which run it when they resume,
// have theirs taken out when their late replies come. Before values.go,
// the watch read strings only: the member stayed on all three nodes, a
// ghost permit refusing others until the key's TTL.
func TestValuesFailedVoteRestored(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	now := time.Now().UnixMilli()
	// Classified first (a blocking call classifies; the paused one must
	// not wait on it): a grant released at once.
	if v, err := semAcquire(ctx, b, "sem:warm", 1, "w", 10*time.Second, now); err != nil || v.Int != 1 {
		t.Fatalf("acquire = %v, %v; want 1", v, err)
	}

	resumed := pauseFor(t, 3*testTimeout, nodes[1], nodes[2])
	_, err := semAcquire(ctx, b, "sem", 1, "mine", 10*time.Second, now)
	if !isTryAgainErr(err) {
		t.Fatalf("acquire with two nodes of three paused = %v; want TRYAGAIN", err)
	}
	resumed()
	settledMembers(t, direct, "sem")
	for i, d := range direct {
		if n, _ := d.Exists(ctx, "sem").Result(); n != 0 {
			t.Errorf("node %d kept the key of a failed acquire", i)
		}
	}
}

// TestValuesLostVoteRestoredWhereItDiffers: nodes 0 and 1 hold another
// client's permit (limit 1) beside a lapsed one; node 2 is free. The
// majority's state is the snapshot: the acquire answers 0, and its commit
// (the lapsed member dropped) brings node 2, which missed the other
// client's acquire, up to the majority's state. Then the same with node
// 2's replies held back past the decision (a late read): node 2 gets the
// commit afterwards, by compare-and-set against what it showed; once
// plain, and once with another client adding its member on node 2 in
// between — then the compare-and-set finds node 2 changed and leaves it
// alone, never removing a member added after the read.
func TestValuesLostVoteRestoredWhereItDiffers(t *testing.T) {
	nodes := startNodes(t, 3)
	hp := startHoldProxy(t, nodes[2].Addr)
	b := newBackend(t, []string{nodes[0].Addr, nodes[1].Addr, hp.addr})
	direct := directClients(t, nodes)
	ctx := t.Context()
	now := time.Now().UnixMilli()
	seed := func(key string) {
		for _, d := range direct[:2] {
			d.ZAdd(ctx, key, redis.Z{Score: float64(now), Member: "other"}, redis.Z{Score: float64(now - 60000), Member: "lapsed"})
			d.PExpire(ctx, key, 10*time.Second)
		}
	}

	seed("sem")
	v, err := semAcquire(ctx, b, "sem", 1, "mine", 10*time.Second, now)
	if err != nil || v.Kind != backend.KindInt || v.Int != 0 {
		t.Fatalf("acquire where two nodes of three are full = %v, %v; want 0", v, err)
	}
	settledMembers(t, direct, "sem", "other")

	// Late: node 2 reads at once, its reply is held back until the
	// majority (nodes 0 and 1) decided and committed.
	late := func(key string, between func()) {
		t.Helper()
		seed(key)
		reads := cmdCalls(t, direct[2], "evalsha")
		hp.hold()
		v, err := semAcquire(ctx, b, key, 1, "mine", 10*time.Second, now)
		if err != nil || v.Int != 0 {
			t.Fatalf("%s: acquire = %v, %v; want 0", key, v, err)
		}
		if !testsrv.Settled(func() bool { return cmdCalls(t, direct[2], "evalsha") > reads }) {
			t.Fatalf("%s: node 2 was never read", key)
		}
		between()
		hp.release()
	}
	late("sem:late", func() {})
	settledMembers(t, direct, "sem:late", "other")

	var evals int64
	late("sem:owner", func() {
		direct[2].ZAdd(ctx, "sem:owner", redis.Z{Score: float64(now), Member: "third"})
		evals = cmdCalls(t, direct[2], "evalsha")
	})
	// The late read's commit (applyScript) runs on node 2, and finds the
	// key changed since the read.
	if !testsrv.Settled(func() bool { return cmdCalls(t, direct[2], "evalsha")+evalCalls(t, direct[2]) > evals }) {
		t.Fatal("node 2's late read was not followed by its commit")
	}
	if got := members(t, direct[2], "sem:owner"); !slices.Equal(got, []string{"third"}) {
		t.Errorf("node 2 holds %q; want [third]: the commit wrote over a member added after its read", got)
	}
}

// TestValuesRetrySameMemberKeepsHolder: a holder retries its acquire with
// the same member (a repeated value) while two nodes are paused: no
// majority (TRYAGAIN), so every node is put back as it was before the
// retry — the holder's member with its own score, never removed because
// the retry named it. Before values.go, the retry's score stayed.
func TestValuesRetrySameMemberKeepsHolder(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	t1 := time.Now().UnixMilli()
	if v, err := semAcquire(ctx, b, "sem", 2, "M", 10*time.Second, t1); err != nil || v.Int != 1 {
		t.Fatalf("acquire = %v, %v; want 1", v, err)
	}
	resumed := pauseFor(t, 3*testTimeout, nodes[1], nodes[2])
	if _, err := semAcquire(ctx, b, "sem", 2, "M", 10*time.Second, t1+1000); !isTryAgainErr(err) {
		t.Fatalf("retry with two nodes of three paused = %v; want TRYAGAIN", err)
	}
	resumed()
	settledMembers(t, direct, "sem", "M")
	for i, d := range direct {
		var score float64
		if !testsrv.Settled(func() bool { score, _ = d.ZScore(ctx, "sem", "M").Result(); return score == float64(t1) }) {
			t.Errorf("node %d: M's score %v; want the holder's %d (the failed retry was not put back)", i, score, t1)
		}
	}
}

// TestValuesHashLockRestored: Redisson's hash lock. Nodes 0 and 1 hold it
// for another owner and answer its PTTL (settled by time); node 2 was free
// and granted, and is put back. Then a holder re-enters (HINCRBY to 2)
// with two nodes paused: no majority, and every node is put back to a
// hold count of 1 — otherwise its single release would leave a ghost hold
// there until the TTL.
func TestValuesHashLockRestored(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	lock := func(key, owner string) (backend.Value, error) {
		return b.Eval(ctx, 0, script(hashLockSrc), []string{key}, bytesOf([]string{"10000", owner}), false)
	}
	for _, d := range direct[:2] {
		d.HSet(ctx, "h", "other", 1)
		d.PExpire(ctx, "h", 10*time.Second)
	}
	v, err := lock("h", "me")
	if err != nil || v.Kind != backend.KindInt || v.Int <= 0 {
		t.Fatalf("acquire of a hash lock two nodes of three hold = %v, %v; want its PTTL", v, err)
	}
	if !testsrv.Settled(func() bool { n, _ := direct[2].Exists(ctx, "h").Result(); return n == 0 }) {
		got, _ := direct[2].HGetAll(ctx, "h").Result()
		t.Errorf("node 2 holds %v; want nothing (its grant lost the vote)", got)
	}
	for i, d := range direct[:2] {
		if got, _ := d.HGetAll(ctx, "h").Result(); len(got) != 1 || got["other"] != "1" {
			t.Errorf("node %d holds %v; want other: 1", i, got)
		}
	}

	if v, err := lock("r", "me"); err != nil || v.Kind != backend.KindNil {
		t.Fatalf("acquire of a free hash lock = %v, %v; want nil (granted)", v, err)
	}
	resumed := pauseFor(t, 3*testTimeout, nodes[1], nodes[2])
	if _, err := lock("r", "me"); !isTryAgainErr(err) {
		t.Fatalf("re-entry with two nodes of three paused = %v; want TRYAGAIN", err)
	}
	resumed()
	for i, d := range direct {
		var got string
		if !testsrv.Settled(func() bool { got, _ = d.HGet(ctx, "r", "me").Result(); return got == "1" }) {
			t.Errorf("node %d: hold count %q; want 1 (the failed re-entry was not put back)", i, got)
		}
	}
}

// TestValuesValidity: a grant by a values script bounds the restart
// quarantine with its TTL (its validity check: TestScriptValidity).
func TestValuesValidity(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newMonitored(t, addrsOf(nodes))
	ctx := t.Context()
	now := time.Now().UnixMilli()
	if v, err := semAcquire(ctx, b, "long", 1, "mine", time.Minute, now); err != nil || v.Int != 1 {
		t.Fatalf("semaphore acquire with a minute = %v, %v; want 1", v, err)
	}
	nodes[0].Restart()
	waitQuarantined(t, b, nodes[0].Addr)
	time.Sleep(300 * time.Millisecond) // not a synchronisation: the quarantine must outlast it
	if q := b.Quarantined(); len(q) != 1 {
		t.Errorf("quarantine ended within 300ms; the semaphore's minute was not noted (quarantined: %v)", q)
	}
}

// TestValuesWatchCommands: a client's script over a value type costs each
// node three calls of lockproxy's own scripts (the read, the commit, the
// leases' release: EVALSHA), and nothing else; the client's script never reaches a node. A
// node that lost its scripts answers NOSCRIPT and gets the same calls by
// EVAL, and grants like the others.
func TestValuesWatchCommands(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	now := time.Now().UnixMilli()
	if v, err := semAcquire(ctx, b, "sem:first", 3, "a", time.Minute, now); err != nil || v.Int != 1 {
		t.Fatalf("acquire = %v, %v; want 1", v, err)
	}
	// The first call loaded lockproxy's scripts on the connections; a
	// node that answered after the majority applies just after.
	settledMembers(t, direct, "sem:first", "a")
	stops := make([]func(map[string]int64) map[string]int64, len(nodes))
	for i, n := range nodes {
		stops[i] = monitor(t, n)
	}
	if v, err := semAcquire(ctx, b, "sem", 3, "a", time.Minute, now); err != nil || v.Int != 1 {
		t.Fatalf("acquire = %v, %v; want 1", v, err)
	}
	want := map[string]int64{"evalsha": 3}
	for i := range nodes {
		got := stops[i](want)
		delete(got, "hello")
		delete(got, "client")
		delete(got, "script") // lockproxy's own, loaded on a connection's first use
		if got["evalsha"] == 2 {
			// A node whose read came after the commit was sent gets its
			// write and its release in one call.
			got["evalsha"] = 3
		}
		if !maps.Equal(got, want) {
			t.Errorf("node %d ran %v; want %v", i, got, want)
		}
	}

	direct[1].ScriptFlush(ctx)
	if v, err := semAcquire(ctx, b, "sem:flushed", 3, "a", time.Minute, now); err != nil || v.Int != 1 {
		t.Fatalf("acquire after node 1 lost its scripts = %v, %v; want 1", v, err)
	}
	settledMembers(t, direct, "sem:flushed", "a")
}

// TestValuesLostReplyRepaired: a plain ZREM that a node paused past its
// connection's grace missed is repaired once the node is back (set to the
// value the two others hold alike); the ZREM itself answers as soon as two
// nodes agree, not after the node timeout. A script meanwhile (nodes 0 and
// 1 full, node 2 paused) is decided by the two others alone.
func TestValuesLostReplyRepaired(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	now := time.Now().UnixMilli()
	for _, d := range direct[:2] {
		d.ZAdd(ctx, "sem", redis.Z{Score: float64(now), Member: "other"})
	}
	if v, err := semAcquire(ctx, b, "sem:warm", 1, "w", 10*time.Second, now); err != nil || v.Int != 1 {
		t.Fatalf("acquire = %v, %v; want 1", v, err)
	}
	settledMembers(t, direct, "sem:warm", "w")
	resumed := pauseFor(t, 1500*time.Millisecond, nodes[2]) // past overdueGrace
	if v, err := semAcquire(ctx, b, "sem", 1, "mine", 10*time.Second, now); err != nil || v.Int != 0 {
		t.Fatalf("acquire where two nodes are full, the third paused = %v, %v; want 0", v, err)
	}
	start := time.Now()
	if n, err := b.Do(ctx, 0, []string{"sem:warm"}, bytesOf([]string{"zrem", "sem:warm", "w"})); err != nil || n.Int != 1 {
		t.Fatalf("ZREM with a node paused = %v, %v; want 1", n, err)
	}
	if d := time.Since(start); d >= testTimeout {
		t.Errorf("ZREM with a node paused took %v; want less than the node timeout %v", d, testTimeout)
	}
	resumed()
	for key, want := range map[string][]string{"sem:warm": nil} {
		var got []string
		// The repair waits for the node's new connection.
		if !wait.Poll(10*time.Second, func() bool { got = members(t, direct[2], key); return slices.Equal(got, want) }) {
			t.Errorf("node 2: %s holds %q; want %q (repaired to the others' value)", key, got, want)
		}
	}
}

// holdProxy forwards connections to a node; while held, what the node
// sends back is kept (not dropped) and passed on at release, as a slow
// network would.
type holdProxy struct {
	addr  string
	mu    sync.Mutex
	held  bool
	conns []*heldConn
}

type heldConn struct {
	c    net.Conn
	kept []byte
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	p := &holdProxy{}
	p.addr = forward(t, target, func(c, u net.Conn) {
		{
			hc := &heldConn{c: c}
			p.mu.Lock()
			p.conns = append(p.conns, hc)
			p.mu.Unlock()
			go func() { // to the node: never held
				defer u.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						u.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // from the node
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						p.mu.Lock()
						if p.held {
							hc.kept = append(hc.kept, buf[:n]...)
						} else {
							c.Write(buf[:n])
						}
						p.mu.Unlock()
					}
					if err != nil {
						return
					}
				}
			}()
		}
	})
	return p
}

func (p *holdProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	for _, hc := range p.conns {
		if len(hc.kept) > 0 {
			hc.c.Write(hc.kept)
			hc.kept = nil
		}
	}
}
