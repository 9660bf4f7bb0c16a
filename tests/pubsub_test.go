package tests

import (
	"bufio"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// pubsubTarget is one lockproxy deployment under test. Each connection of
// a scenario opens on instance A or B, so "publisher on B, subscriber on
// A" tests delivery between instances; a single instance is both.
type pubsubTarget struct {
	name  string
	addrs [2]string                                 // instance A, instance B
	dial  func(t testing.TB, addr string) *respConn // nil: dialRESP (plain TCP)
}

// pubsubTargets starts the deployments TestPubSub checks. Add one here:
// a name and the addresses of its instances.
func pubsubTargets(t *testing.T) []pubsubTarget {
	mem := testsrv.StartMemoryProxy(t)
	adv, _ := testsrv.StartPostgresProxy(t, pgbridge.Advisory)
	lease, _ := testsrv.StartPostgresProxy(t, pgbridge.Lease)
	return []pubsubTarget{
		{name: "memory", addrs: [2]string{mem, mem}},
		{name: "pg-advisory", addrs: [2]string{adv, adv}},
		{name: "pg-lease", addrs: [2]string{lease, lease}},
	}
}

// Instances a scenario's connection opens on.
const (
	instA = 0
	instB = 1
)

const (
	psWait  = 5 * time.Second        // for a frame that must come (room for a loaded machine)
	psQuiet = 100 * time.Millisecond // for a frame that must not
)

// psConn is a scenario's connection: its name in steps and its instance.
type psConn struct {
	name string
	on   int
}

// psOrder says how a step's frames are compared where Redis leaves the
// order unspecified (it walks a hash table).
type psOrder int

const (
	psExact    psOrder = iota
	psElemsSet         // the one frame's elements in any order (PUBSUB CHANNELS)
	psChanSet          // the frames' channels in any order, kinds and counts in order (UNSUBSCRIBE with no argument)
)

// psStep is one step on one connection: a command sent and its frames
// read, frames pushed unasked read, no frame within psQuiet, the server
// closing the connection, the client closing it, or a state the server
// must come to.
type psStep struct {
	conn   string
	args   []string // the command; nil reads pushed frames
	frames int
	quiet  bool
	closed bool
	hangup bool   // the client closes the connection
	state  string // a line INFO clients must come to show, asked on conn
	now    bool   // … must show at once (asked once)
	order  psOrder
}

func psSend(conn string, frames int, args ...string) psStep {
	return psStep{conn: conn, args: args, frames: frames}
}

func psRecv(conn string, frames int) psStep { return psStep{conn: conn, frames: frames} }

func psNone(conn string) psStep { return psStep{conn: conn, quiet: true} }

func psClosed(conn string) psStep { return psStep{conn: conn, closed: true} }

func psHangup(conn string) psStep { return psStep{conn: conn, hangup: true} }

// psState waits until INFO clients, asked on conn, shows line
// ("blocked_clients:1"): a state change the server makes on its own
// (a client blocking, or going), which no reply of the scenario shows.
func psState(conn, line string) psStep { return psStep{conn: conn, state: line} }

// psStateNow is psState asked once: a state the commands before it must
// have left (Redis serves blocked clients before the reply to the push).
func psStateNow(conn, line string) psStep { return psStep{conn: conn, state: line, now: true} }

func (s psStep) in(o psOrder) psStep { s.order = o; return s }

// psScenario is a script over several connections. It runs in each of
// protos (RESP2 and RESP3 when nil); for RESP3 every connection starts
// with HELLO 3.
type psScenario struct {
	name   string
	protos []int
	conns  []psConn
	steps  []psStep
	only   []string // the targets that serve every command of it (nil: all)
}

// psRedissonUnlock is Redisson's forceUnlock script: a lock's release is
// announced on its channel, which is passed as a key.
const psRedissonUnlock = "if (redis.call('del', KEYS[1]) == 1) then redis.call('publish', KEYS[2], ARGV[1]); return 1 else return 0 end"

// psPublish is the simplest script that publishes: the channel is a key,
// as clients pass it.
const psPublish = "return redis.call('publish', KEYS[1], ARGV[1])"

var psScenarios = []psScenario{
	{name: "subscribe", conns: []psConn{{"sub", instA}, {"sub2", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("sub", 1, "SUBSCRIBE", "news"),
			psSend("pub", 1, "PUBLISH", "news", "hello"),
			psRecv("sub", 1),
			psSend("sub", 2, "SUBSCRIBE", "a", "b\r\n\x00ch"), // one frame per channel, with the running count
			psSend("pub", 1, "PUBLISH", "b\r\n\x00ch", "bin\r\n\x00ary\r\n"),
			psRecv("sub", 1),
			psSend("pub", 1, "PUBLISH", "a", ""),
			psRecv("sub", 1),
			psSend("sub", 1, "SUBSCRIBE", "news"), // again: the count stays 3
			psSend("sub2", 1, "SUBSCRIBE", "news"),
			psSend("pub", 1, "PUBLISH", "news", "both"), // 2 receivers, not 3
			psRecv("sub", 1),
			psRecv("sub2", 1),
			psSend("pub", 1, "PUBLISH", "nobody", "x"),
			psNone("sub"),
		}},
	// Redis 7 sends (un)subscribe confirmations as pushes, which CLIENT
	// REPLY OFF does not mute, in RESP2 as in RESP3 (a client that turned
	// replies off waited for ever for its SUBSCRIBE here).
	{name: "subscribe with replies off", conns: []psConn{{"sub", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("sub", 0, "CLIENT", "REPLY", "OFF"),
			psSend("sub", 1, "SUBSCRIBE", "quiet", "loud"),
			psRecv("sub", 1),
			psSend("pub", 1, "PUBLISH", "loud", "hello"),
			psRecv("sub", 1),
			psSend("sub", 1, "PSUBSCRIBE", "q*"),
			psSend("sub", 1, "UNSUBSCRIBE", "quiet"),
			psSend("sub", 1, "PUNSUBSCRIBE", "q*"),
			psSend("sub", 1, "UNSUBSCRIBE"),
			psSend("sub", 0, "PING"),
			psNone("sub"),
		}},
	{name: "psubscribe", conns: []psConn{{"sub", instA}, {"psub", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("psub", 4, "PSUBSCRIBE", "lock:*", "a?c", "[ab]x", `esc\*`),
			psSend("psub", 1, "PSUBSCRIBE", "a?c"),
			psSend("pub", 1, "PUBLISH", "lock:1", "v1"),
			psRecv("psub", 1),
			psSend("pub", 1, "PUBLISH", "abc", "v2"),
			psRecv("psub", 1),
			psSend("pub", 1, "PUBLISH", "bx", "v3"),
			psRecv("psub", 1),
			psSend("pub", 1, "PUBLISH", "esc*", "v4"),
			psRecv("psub", 1),
			psSend("pub", 1, "PUBLISH", "ac", "no"), // ? is exactly one byte
			psSend("pub", 1, "PUBLISH", "cx", "no"),
			psSend("pub", 1, "PUBLISH", "escX", "no"),
			psSend("pub", 1, "PUBLISH", "lock", "no"),
			psNone("psub"),
			// A channel and a matching pattern on one connection: the
			// message, then the pmessage, and both count.
			psSend("sub", 1, "SUBSCRIBE", "lock:9"),
			psSend("sub", 1, "PSUBSCRIBE", "lock:*"),
			psSend("pub", 1, "PUBLISH", "lock:9", "v5"),
			psRecv("sub", 2),
			psRecv("psub", 1),
		}},
	{name: "unsubscribe", conns: []psConn{{"sub", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("sub", 1, "UNSUBSCRIBE"), // nil channel, count 0
			psSend("sub", 1, "PUNSUBSCRIBE"),
			psSend("sub", 1, "UNSUBSCRIBE", "never"),
			psSend("sub", 3, "SUBSCRIBE", "c1", "c2", "c3"),
			psSend("sub", 2, "PSUBSCRIBE", "p1*", "p2*"),
			psSend("sub", 2, "UNSUBSCRIBE", "c1", "never"), // a channel not subscribed is answered too
			psSend("pub", 1, "PUBLISH", "c1", "gone"),
			psNone("sub"),
			psSend("sub", 2, "UNSUBSCRIBE").in(psChanSet), // one frame per channel left, in hash-table order
			psSend("sub", 1, "UNSUBSCRIBE"),               // patterns remain: nil channel, count 2
			psSend("sub", 1, "PUNSUBSCRIBE", "p1*"),
			psSend("pub", 1, "PUBLISH", "p1x", "gone"),
			psSend("pub", 1, "PUBLISH", "p2x", "here"),
			psRecv("sub", 1),
			psSend("sub", 1, "PUNSUBSCRIBE"),
			psSend("sub", 1, "PUNSUBSCRIBE"),
			psSend("pub", 1, "PUBLISH", "p2x", "gone"),
			psNone("sub"),
			psSend("sub", 1, "GET", "pubsub:k"), // out of subscribed mode
		}},
	{name: "subscribed-mode", protos: []int{2}, conns: []psConn{{"sub", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("sub", 1, "SUBSCRIBE", "c"),
			psSend("sub", 1, "GET", "pubsub:k"),
			psSend("sub", 1, "SET", "pubsub:k", "v"),
			psSend("sub", 1, "PUBLISH", "c", "x"),
			psSend("sub", 1, "EVAL", "return 1", "0"),
			psSend("sub", 1, "PUBSUB", "NUMPAT"),
			psSend("sub", 1, "MULTI"),
			psSend("sub", 1, "HELLO", "3"),
			psSend("sub", 1, "NOSUCHCMD"),
			psSend("sub", 1, "PING"),
			psSend("sub", 1, "PING", "x"),
			psSend("sub", 1, "PING", "x", "y"),
			psSend("sub", 1, "PSUBSCRIBE", "p*"),
			psSend("sub", 1, "UNSUBSCRIBE", "c"),
			psSend("sub", 1, "GET", "pubsub:k"), // a pattern left: still subscribed
			psSend("sub", 1, "PUNSUBSCRIBE", "p*"),
			psSend("sub", 1, "GET", "pubsub:k"),
			psSend("sub", 1, "PING"),
			psSend("sub", 1, "SUBSCRIBE", "c"),
			psSend("sub", 1, "RESET"),
			psSend("sub", 1, "GET", "pubsub:k"),
			psSend("pub", 1, "PUBLISH", "c", "after reset"),
			psSend("sub", 1, "SUBSCRIBE", "c"),
			psSend("sub", 1, "QUIT"),
			psClosed("sub"),
			psSend("pub", 1, "PUBLISH", "c", "after quit"), // unsubscribed before the close
		}},
	{name: "resp3", protos: []int{3}, conns: []psConn{{"sub", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("sub", 1, "UNSUBSCRIBE"), // the nil channel is RESP3's null
			psSend("sub", 1, "SUBSCRIBE", "c"),
			psSend("sub", 1, "GET", "pubsub:k"),
			psSend("sub", 1, "SET", "pubsub:k", "v"),
			psSend("sub", 1, "GET", "pubsub:k"),
			psSend("sub", 1, "DEL", "pubsub:k"),
			psSend("sub", 1, "PING"),
			psSend("sub", 1, "PING", "x"),
			psSend("pub", 1, "PUBLISH", "c", "m1"),
			psRecv("sub", 1),
			psSend("sub", 1, "PSUBSCRIBE", "p*"),
			psSend("pub", 1, "PUBLISH", "px", "m2"),
			psRecv("sub", 1),
			psSend("sub", 2, "PUBLISH", "c", "self"), // the push comes before the count
			psSend("sub", 2, "EVAL", psPublish, "1", "c", "script"),
			psSend("sub", 1, "PUBSUB", "NUMSUB", "c"),
			psSend("sub", 1, "RESET"), // back to RESP2 and out of subscribed mode
			psSend("sub", 1, "GET", "pubsub:k"),
			psSend("pub", 1, "PUBLISH", "c", "after reset"),
		}},
	// CLIENT TRACKING (client-side caching): invalidation pushes.
	{name: "tracking", protos: []int{3}, conns: []psConn{{"c", instA}, {"w", instA}},
		steps: []psStep{
			// The keys of an earlier target's run are gone (a reply that is nil on both).
			psSend("w", 1, "EVAL", "redis.call('del', unpack(KEYS))", "9", "trk:k", "trk:k2", "trk:s", "trk:o", "trk:o2", "trk:b1", "trk:z", "trk:n", "trk:f"),
			psSend("c", 1, "CLIENT", "GETREDIR"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON"),
			psSend("c", 1, "CLIENT", "GETREDIR"),
			psSend("c", 1, "GET", "trk:k"),
			psSend("w", 1, "SET", "trk:k", "v"),
			psRecv("c", 1), // invalidate [trk:k]
			psSend("c", 1, "GET", "trk:k"),
			psSend("c", 2, "SET", "trk:k", "own"), // its own write: the push, then the reply
			psSend("w", 1, "SET", "trk:k", "v2"),  // not read since: nothing
			psNone("c"),
			psSend("w", 1, "SET", "trk:k2", "v"),
			psSend("c", 1, "MGET", "trk:k", "trk:k2"),
			psSend("w", 1, "DEL", "trk:k", "trk:k2"),
			psRecv("c", 2), // a push per key (lockproxy would also send one for a key DEL did not find)
			psSend("c", 1, "EVAL_RO", "return redis.call('get', KEYS[1])", "1", "trk:s"),
			psSend("w", 1, "EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "trk:s", "x"),
			psRecv("c", 1),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "OPTOUT"), // mode switch needs OFF first
			psSend("c", 1, "CLIENT", "TRACKING", "OFF"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "OPTIN"),
			psSend("c", 1, "GET", "trk:o"),
			psSend("w", 1, "SET", "trk:o", "1"),
			psNone("c"), // OPTIN: not cached without CLIENT CACHING YES
			psSend("c", 1, "CLIENT", "CACHING", "YES"),
			psSend("c", 1, "GET", "trk:o"),
			psSend("c", 1, "GET", "trk:o2"), // CACHING YES lasts one command
			psSend("w", 1, "SET", "trk:o2", "1"),
			psNone("c"),
			psSend("w", 1, "SET", "trk:o", "2"),
			psRecv("c", 1),
			psSend("c", 1, "CLIENT", "CACHING", "NO"),
			psSend("c", 1, "CLIENT", "TRACKING", "OFF"),
			psSend("c", 1, "CLIENT", "CACHING", "YES"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "trk:b"),
			psSend("w", 1, "SET", "trk:b1", "x"),
			psRecv("c", 1),
			psSend("w", 1, "SET", "trk:z", "x"),
			psNone("c"),
			psSend("c", 1, "CLIENT", "TRACKING", "OFF"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "NOLOOP"),
			psSend("c", 1, "GET", "trk:n"),
			psSend("c", 1, "SET", "trk:n", "1"), // NOLOOP: no push for its own write
			psSend("w", 1, "SET", "trk:n", "2"), // and the key was dropped from the table
			psNone("c"),
			psSend("c", 1, "CLIENT", "TRACKING", "OFF"),
		}},
	{name: "tracking-flush", protos: []int{3}, only: []string{"memory"}, // postgres serves no FLUSHDB
		conns: []psConn{{"c", instA}, {"d", instA}, {"w", instA}},
		steps: []psStep{
			psSend("c", 1, "CLIENT", "TRACKING", "ON"),
			psSend("c", 1, "GET", "trk:f"),
			psSend("w", 1, "FLUSHDB"),
			psRecv("c", 1), // invalidate with a null: everything
			psSend("c", 1, "GET", "trk:f"),
			psSend("c", 1, "CLIENT", "TRACKING", "OFF"),
			psSend("d", 1, "CLIENT", "TRACKING", "ON"),
			psSend("d", 1, "GET", "trk:g"),
			psSend("w", 1, "FLUSHDB"),
			psRecv("d", 1),
			psNone("c"), // its tracking is off: nothing
		}},
	{name: "tracking-errors", conns: []psConn{{"c", instA}},
		steps: []psStep{
			psSend("c", 1, "CLIENT", "CACHING", "YES"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "PREFIX", "a"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"),
			psSend("c", 1, "CLIENT", "TRACKING", "MAYBE"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "NOSUCH"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "REDIRECT", "999999999"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "REDIRECT", "x"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "OPTIN"),
			psSend("c", 1, "CLIENT", "CACHING", "NO"),
			psSend("c", 1, "CLIENT", "CACHING", "MAYBE"),
			psSend("c", 1, "CLIENT", "TRACKING", "ON", "BCAST"),
			psSend("c", 1, "CLIENT", "TRACKING", "OFF"),
			psSend("c", 1, "CLIENT", "TRACKING"),
		}},
	// Blocking pops: BLPOP and BRPOP woken by a push from another connection.
	{name: "blocking-pops", conns: []psConn{{"c", instA}, {"w", instA}},
		steps: []psStep{
			psSend("w", 1, "EVAL", "redis.call('del', unpack(KEYS))", "7", "bl:a", "bl:b", "bl:c", "bl:d", "bl:e", "bl:s", "bl:none"),
			psSend("w", 1, "RPUSH", "bl:a", "x", "y"),
			psSend("c", 1, "BLPOP", "bl:none", "bl:a", "1"),
			psSend("c", 1, "BRPOP", "bl:a", "1"),
			psSend("c", 1, "BLPOP", "bl:a", "0.1"), // empty: a null array after the timeout
			psSend("c", 0, "BLPOP", "bl:b", "5"),
			psNone("c"),
			psSend("w", 1, "LPUSH", "bl:b", "v"),
			psRecv("c", 1),
			psSend("c", 0, "BRPOP", "bl:c", "bl:d", "0"),
			psSend("w", 1, "RPUSH", "bl:d", "v1", "v2"),
			psRecv("c", 1),
			psSend("c", 1, "LRANGE", "bl:d", "0", "-1"),
			psSend("c", 1, "BLPOP", "bl:a", "-1"),
			psSend("c", 1, "BLPOP", "bl:a", "x"),
			psSend("c", 1, "BLPOP", "bl:a"),
			psSend("w", 1, "SET", "bl:s", "v"),
			psSend("c", 1, "BLPOP", "bl:s", "1"),
			psSend("c", 1, "MULTI"),
			psSend("c", 1, "BLPOP", "bl:e", "0"),
			psSend("c", 1, "EXEC"), // inside MULTI nothing blocks
		}},
	// BZPOPMIN and BZPOPMAX: [key, member, score], blocking while every set is empty.
	{name: "blocking-zpops", conns: []psConn{{"c", instA}, {"w", instA}},
		steps: []psStep{
			psSend("w", 1, "EVAL", "redis.call('del', unpack(KEYS))", "4", "bz:a", "bz:b", "bz:s", "bz:none"),
			psSend("w", 1, "ZADD", "bz:a", "1", "x", "2.5", "y"),
			psSend("c", 1, "BZPOPMIN", "bz:none", "bz:a", "1"),
			psSend("c", 1, "BZPOPMAX", "bz:a", "1"),
			psSend("c", 1, "BZPOPMIN", "bz:a", "0.1"), // empty: a null array after the timeout
			psSend("c", 0, "BZPOPMAX", "bz:none", "bz:b", "5"),
			psNone("c"),
			psSend("w", 1, "ZADD", "bz:b", "3", "m", "4", "n"),
			psRecv("c", 1),
			psSend("c", 1, "ZRANGE", "bz:b", "0", "-1", "WITHSCORES"),
			psSend("c", 1, "BZPOPMIN", "bz:a", "-1"),
			psSend("c", 1, "BZPOPMIN", "bz:a", "x"),
			psSend("c", 1, "BZPOPMIN", "bz:a"),
			psSend("w", 1, "SET", "bz:s", "v"),
			psSend("c", 1, "BZPOPMIN", "bz:s", "1"),
			psSend("c", 1, "MULTI"),
			psSend("c", 1, "BZPOPMAX", "bz:none", "0"),
			psSend("c", 1, "EXEC"), // inside MULTI nothing blocks
		}},
	// BLMOVE and BRPOPLPUSH: LMOVE's reply, blocking while the source is empty.
	{name: "blocking-moves", conns: []psConn{{"c", instA}, {"w", instA}},
		steps: []psStep{
			psSend("w", 1, "EVAL", "redis.call('del', unpack(KEYS))", "5", "bm:a", "bm:b", "bm:c", "bm:s", "bm:none"),
			psSend("w", 1, "RPUSH", "bm:a", "x", "y"),
			psSend("c", 1, "BLMOVE", "bm:a", "bm:b", "LEFT", "RIGHT", "1"),
			psSend("c", 1, "BRPOPLPUSH", "bm:a", "bm:b", "1"),
			psSend("c", 1, "LRANGE", "bm:b", "0", "-1"),
			psSend("c", 1, "BLMOVE", "bm:a", "bm:b", "left", "left", "0.1"), // empty: a null array after the timeout
			psSend("c", 1, "BRPOPLPUSH", "bm:none", "bm:b", "0.1"),
			psSend("c", 0, "BLMOVE", "bm:c", "bm:b", "RIGHT", "LEFT", "5"),
			psNone("c"),
			psSend("w", 1, "LPUSH", "bm:c", "v"),
			psRecv("c", 1),
			psSend("c", 0, "BRPOPLPUSH", "bm:c", "bm:c", "0"),
			psSend("w", 1, "RPUSH", "bm:c", "r1", "r2"),
			psRecv("c", 1),
			psSend("c", 1, "LRANGE", "bm:c", "0", "-1"),
			psSend("c", 1, "BLMOVE", "bm:a", "bm:b", "UP", "LEFT", "-1"),
			psSend("c", 1, "BLMOVE", "bm:a", "bm:b", "LEFT", "LEFT", "-1"),
			psSend("c", 1, "BLMOVE", "bm:a", "bm:b", "LEFT", "LEFT"),
			psSend("c", 1, "BRPOPLPUSH", "bm:a", "bm:b", "x"),
			psSend("w", 1, "SET", "bm:s", "v"),
			psSend("c", 1, "BLMOVE", "bm:s", "bm:b", "LEFT", "LEFT", "1"),
			psSend("c", 1, "BRPOPLPUSH", "bm:b", "bm:s", "1"),
			psSend("c", 1, "MULTI"),
			psSend("c", 1, "BLMOVE", "bm:none", "bm:b", "LEFT", "LEFT", "0"),
			psSend("c", 1, "BRPOPLPUSH", "bm:none", "bm:b", "0"),
			psSend("c", 1, "EXEC"), // inside MULTI nothing blocks
		}},
	{name: "pubsub-introspection", conns: []psConn{{"s1", instA}, {"s2", instA}, {"q", instB}},
		steps: []psStep{
			psSend("q", 1, "PUBSUB", "CHANNELS"),
			psSend("q", 1, "PUBSUB", "NUMPAT"),
			psSend("q", 1, "PUBSUB", "NUMSUB"),
			psSend("s1", 3, "SUBSCRIBE", "news.1", "news.2", "other"),
			psSend("s2", 1, "SUBSCRIBE", "news.1"),
			psSend("s2", 2, "PSUBSCRIBE", "news.*", "n?ws.*"),
			psSend("s1", 1, "PSUBSCRIBE", "news.*"),
			// Redis lists channels in its hash table's order: compared sorted.
			psSend("q", 1, "PUBSUB", "CHANNELS").in(psElemsSet),
			psSend("q", 1, "PUBSUB", "channels", "news.*").in(psElemsSet),
			psSend("q", 1, "PUBSUB", "CHANNELS", "zzz*"),
			psSend("q", 1, "PUBSUB", "NUMSUB", "news.1", "news.2", "nosuch", "news.1"),
			psSend("q", 1, "PUBSUB", "numpat"), // distinct patterns, not subscriptions
			psSend("s2", 1, "PUNSUBSCRIBE", "news.*"),
			psSend("q", 1, "PUBSUB", "NUMPAT"),
			psSend("s1", 1, "PUNSUBSCRIBE", "news.*"),
			psSend("s1", 1, "UNSUBSCRIBE", "news.2"),
			psSend("q", 1, "PUBSUB", "NUMPAT"),
			psSend("q", 1, "PUBSUB", "CHANNELS").in(psElemsSet),
			psSend("q", 1, "PUBSUB", "NUMSUB", "news.1", "news.2"),
		}},
	{name: "publish-from-script", conns: []psConn{{"sub", instA}, {"pub", instB}},
		steps: []psStep{
			psSend("sub", 2, "SUBSCRIBE", "ch", "redisson_lock__channel:{pubsub:lock}"),
			psSend("pub", 1, "EVAL", psPublish, "1", "ch", "payload"),
			psRecv("sub", 1),
			psSend("pub", 1, "EVAL", psPublish, "1", "nobody", "payload"),
			psSend("pub", 1, "SET", "pubsub:lock", "token"),
			psSend("pub", 1, "EVAL", psRedissonUnlock, "2", "pubsub:lock", "redisson_lock__channel:{pubsub:lock}", "0"),
			psRecv("sub", 1),
			psSend("pub", 1, "EVAL", psRedissonUnlock, "2", "pubsub:lock", "redisson_lock__channel:{pubsub:lock}", "0"),
			psNone("sub"),
			psSend("pub", 1, "SCRIPT", "LOAD", psPublish),
			psSend("pub", 1, "EVALSHA", psSHA1(psPublish), "1", "ch", "by sha"),
			psRecv("sub", 1),
		}},
	{name: "errors", conns: []psConn{{"c", instA}},
		steps: []psStep{
			psSend("c", 1, "SUBSCRIBE"),
			psSend("c", 1, "PSUBSCRIBE"),
			psSend("c", 1, "PUBLISH"),
			psSend("c", 1, "PUBLISH", "ch"),
			psSend("c", 1, "PUBLISH", "ch", "m", "extra"),
			psSend("c", 1, "PUBSUB"),
			psSend("c", 1, "PUBSUB", "NOSUCH"),
			psSend("c", 1, "PUBSUB", "NUMPAT", "x"),
			psSend("c", 1, "PUBSUB", "CHANNELS", "a", "b"),
			psSend("c", 1, "EVAL", "return redis.pcall('publish', KEYS[1])", "1", "ch"),
			psSend("c", 1, "GET", "pubsub:k"), // no error left the connection subscribed
		}},
}

// TestPubSub runs each scenario on a real redis-server and on each
// target, and requires the same frames, byte for byte.
func TestPubSub(t *testing.T) {
	t.Parallel()
	redis := testsrv.StartRedis(t)
	for _, target := range pubsubTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			for _, sc := range psScenarios {
				if sc.only != nil && !slices.Contains(sc.only, target.name) {
					continue
				}
				protos := sc.protos
				if protos == nil {
					protos = []int{2, 3}
				}
				for _, proto := range protos {
					t.Run(fmt.Sprintf("resp%d/%s", proto, sc.name), func(t *testing.T) {
						psRun(t, redis.Addr, target, proto, sc)
					})
				}
			}
		})
	}
}

// psRun runs sc step by step on a real redis-server and on target, each
// step on both before the next, and reports the first step whose frames
// differ (what follows a difference would only repeat it).
func psRun(t *testing.T, redisAddr string, target pubsubTarget, proto int, sc psScenario) {
	for _, st := range sc.steps {
		if !slices.ContainsFunc(sc.conns, func(c psConn) bool { return c.name == st.conn }) {
			t.Fatalf("a step uses connection %q, which the scenario does not declare", st.conn)
		}
	}
	ref := psOpen(t, pubsubTarget{name: "redis", addrs: [2]string{redisAddr, redisAddr}}, proto, sc.conns)
	got := psOpen(t, target, proto, sc.conns)
	if ref == nil || got == nil {
		return
	}
	closed := map[string]bool{}
	steps := slices.Clone(sc.steps)
	// RESET every connection left open: its reply must be the next frame
	// (nothing pushed is pending), and the servers end with no
	// subscription for the next scenario to see.
	for _, c := range sc.conns {
		steps = append(steps, psSend(c.name, 1, "RESET"))
	}
	failed := false
	for i, st := range steps {
		if closed[st.conn] {
			continue
		}
		if failed {
			if slices.Equal(st.args, []string{"RESET"}) {
				psDrainReset(ref[st.conn])
				psDrainReset(got[st.conn])
			}
			continue
		}
		w, g := psStepBoth(ref, got, st)
		if err := psExpected(st, w); err != "" {
			t.Fatalf("step %d on %s: %s: redis-server answered %q: %s; the scenario is wrong",
				i+1, st.conn, psShowStep(st), w, err)
		}
		if st.closed || st.hangup {
			closed[st.conn] = true
		}
		if msg := psDiff(st, w, g, target.name); msg != "" {
			t.Errorf("step %d on %s: %s%s", i+1, st.conn, psShowStep(st), msg)
			failed = true
		}
	}
}

// psOpen dials a scenario's connections to one deployment, on its addrs
// (A and B); for RESP3 each sends HELLO 3 first. It fails the test and
// returns nil when a HELLO 3 is not answered with a map.
func psOpen(t *testing.T, target pubsubTarget, proto int, conns []psConn) map[string]*respConn {
	t.Helper()
	name := target.name
	s := map[string]*respConn{}
	for _, c := range conns {
		var rc *respConn
		if target.dial != nil {
			rc = target.dial(t, target.addrs[c.on])
		} else {
			rc = dialRESP(t, target.addrs[c.on])
		}
		if proto == 3 {
			// Not compared: the map names the server's version and the
			// connection's ID.
			if r, err := rc.do("HELLO", "3"); err != nil || !strings.HasPrefix(r, "%") {
				t.Errorf("%s: %s: HELLO 3 = %q, %v", name, c.name, r, err)
				return nil
			}
		}
		s[c.name] = rc
	}
	return s
}

// psStepBoth runs st on both sides. A quiet step waits psQuiet once: both
// deadlines are set before either side is read.
func psStepBoth(ref, got map[string]*respConn, st psStep) (w, g []string) {
	r, c := ref[st.conn], got[st.conn]
	switch {
	case st.hangup:
		r.c.Close()
		c.c.Close()
		return nil, nil
	case st.state != "":
		wait := psWait
		if st.now {
			wait = 0
		}
		return psAwait(r, st.state, wait), psAwait(c, st.state, wait)
	}
	if !st.quiet {
		w = psDo(r, st)
		return w, psDoLike(c, st, w)
	}
	until := time.Now().Add(psQuiet)
	r.c.SetReadDeadline(until)
	c.c.SetReadDeadline(until)
	return psQuietRead(r), psQuietRead(c)
}

// Pseudo-frames stand for what happened instead of a frame; a real frame
// starts with a RESP type byte, never with "(".
const (
	psNothing   = "(no frame)"
	psEOF       = "(connection closed)"
	psTimeout   = "(no frame in time)"
	psErrPrefix = "(error: "
)

// psDo sends st's command (if any) on c and reads st.frames frames; a
// closed step reads until the server closes the connection.
func psDo(c *respConn, st psStep) []string { return psDoLike(c, st, nil) }

// psDoLike is psDo that stops reading at the first frame unlike want's
// frame in its place (of another type, where the order may differ): an
// error where Redis sends several frames is usually the only frame, and
// waiting psWait for the rest would make each such failure slow.
func psDoLike(c *respConn, st psStep, want []string) []string {
	if st.args != nil {
		c.c.SetWriteDeadline(time.Now().Add(psWait))
		if _, err := c.c.Write(encodeCommand(st.args)); err != nil {
			return []string{psFailure(err)}
		}
	}
	n := st.frames
	if st.closed {
		n = 1
	}
	var out []string
	for i := range n {
		c.c.SetReadDeadline(time.Now().Add(psWait))
		f, err := c.reply()
		if err != nil {
			return append(out, psFailure(err))
		}
		out = append(out, f)
		if i < len(want) && (f[0] != want[i][0] || st.order == psExact && f != want[i]) {
			return out
		}
	}
	return out
}

// psDrainReset sends RESET on c after a failed step and reads until its
// reply, past any frame left unread, so that the server has no
// subscription of c's left when the next scenario starts.
func psDrainReset(c *respConn) {
	st := psSend("", 1, "RESET")
	for f := psDo(c, st); len(f) == 1 && !strings.HasPrefix(f[0], "("); f = psDo(c, psRecv("", 1)) {
		if f[0] == "+RESET\r\n" {
			return
		}
	}
}

// psAwait asks INFO clients on c until it shows line, for up to wait:
// [line], or a pseudo-frame with the field's last value.
func psAwait(c *respConn, line string, d time.Duration) []string {
	field, _, _ := strings.Cut(line, ":")
	var info string
	var err error
	if wait.Poll(d, func() bool {
		info, err = c.do("INFO", "clients")
		return err != nil || strings.Contains(info, "\r\n"+line+"\r\n")
	}) && err == nil {
		return []string{line}
	}
	if err != nil {
		return []string{psFailure(err)}
	}
	last := "(none)"
	if _, rest, ok := strings.Cut(info, "\r\n"+field+":"); ok {
		last, _, _ = strings.Cut(rest, "\r\n")
	}
	return []string{fmt.Sprintf("(INFO clients shows %s:%s, not %s, after %v)", field, last, line, d)}
}

// psQuietRead reads what c receives before its deadline: psNothing, or
// the frame that came.
func psQuietRead(c *respConn) []string {
	if _, err := c.rd.Peek(1); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return []string{psNothing}
		}
		return []string{psFailure(err)}
	}
	return psDo(c, psStep{frames: 1})
}

func psFailure(err error) string {
	if diffClosed(err) {
		return psEOF
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return psTimeout
	}
	return psErrPrefix + err.Error() + ")"
}

// psExpected says what is wrong with redis-server's frames w for st, or
// "" when they are what the scenario expects: a scenario is written
// against Redis, so a mismatch there is the scenario's fault.
func psExpected(st psStep, w []string) string {
	switch {
	case st.quiet:
		if !slices.Equal(w, []string{psNothing}) {
			return "a frame came where none should"
		}
	case st.closed:
		if !slices.Equal(w, []string{psEOF}) {
			return "the connection stayed open"
		}
	case st.hangup:
	case st.state != "":
		if !slices.Equal(w, []string{st.state}) {
			return "the state never came"
		}
	case slices.Equal(st.args, []string{"RESET"}) && !slices.Equal(w, []string{"+RESET\r\n"}):
		// RESET's reply is the one frame whose place is certain: anything
		// else means an earlier step read too few frames or too many.
		return "frames left unread before RESET's reply"
	default:
		for _, f := range w {
			if strings.HasPrefix(f, "(") {
				return fmt.Sprintf("%d frames expected", st.frames)
			}
		}
	}
	return ""
}

// psDiff compares st's frames from redis (w) and the target (g) as st's
// order says, and describes the first difference, or returns "".
func psDiff(st psStep, w, g []string, target string) string {
	nw, ng := psNormalize(st.order, w), psNormalize(st.order, g)
	if slices.Equal(nw, ng) {
		return ""
	}
	note := ""
	if st.order != psExact {
		w, g = nw, ng
		note = " (normalized: " + map[psOrder]string{psElemsSet: "elements sorted", psChanSet: "channels sorted"}[st.order] + ")"
	}
	for i := range max(len(w), len(g)) {
		fw, fg := "(missing)", "(missing)"
		if i < len(w) {
			fw = w[i]
		}
		if i < len(g) {
			fg = g[i]
		}
		if fw != fg {
			return fmt.Sprintf(", frame %d of %d%s\n%12s: %q\n%12s: %q", i+1, len(w), note, "redis", fw, target, fg)
		}
	}
	return ""
}

// psNormalize rewrites frames so that orders Redis leaves unspecified
// compare equal: psElemsSet sorts the elements of each aggregate frame;
// psChanSet sorts the channels (second elements) across the frames and
// gives them back in order, so kinds and running counts still compare
// position by position.
func psNormalize(o psOrder, frames []string) []string {
	if o == psExact {
		return frames
	}
	out := slices.Clone(frames)
	type split struct {
		head  string
		elems []string
	}
	var parts []split
	for _, f := range frames {
		head, elems, ok := psSplit(f)
		if !ok {
			return out // not aggregates: compared as they are
		}
		parts = append(parts, split{head, elems})
	}
	if o == psElemsSet {
		for i, p := range parts {
			slices.Sort(p.elems)
			out[i] = p.head + strings.Join(p.elems, "")
		}
		return out
	}
	var chans []string
	for _, p := range parts {
		if len(p.elems) < 2 {
			return out
		}
		chans = append(chans, p.elems[1])
	}
	slices.Sort(chans)
	for i, p := range parts {
		p.elems[1] = chans[i]
		out[i] = p.head + strings.Join(p.elems, "")
	}
	return out
}

// psSplit splits an array or push frame into its header line and its
// elements' raw bytes.
func psSplit(frame string) (head string, elems []string, ok bool) {
	if frame == "" || (frame[0] != '*' && frame[0] != '>') {
		return "", nil, false
	}
	head, rest, found := strings.Cut(frame, "\r\n")
	if !found {
		return "", nil, false
	}
	head += "\r\n"
	r := &respConn{rd: bufio.NewReader(strings.NewReader(rest))}
	for {
		if _, err := r.rd.Peek(1); err != nil {
			return head, elems, true
		}
		e, err := r.reply()
		if err != nil {
			return "", nil, false
		}
		elems = append(elems, e)
	}
}

func psShowStep(st psStep) string {
	switch {
	case st.quiet:
		return fmt.Sprintf("no frame within %v", psQuiet)
	case st.closed:
		return "the server closes the connection"
	case st.hangup:
		return "the client closes the connection"
	case st.state != "":
		return "INFO clients comes to show " + st.state
	case st.args == nil:
		return fmt.Sprintf("%d pushed frame(s)", st.frames)
	}
	return diffShow(st.args)
}

func psSHA1(src string) string { return fmt.Sprintf("%x", sha1.Sum([]byte(src))) }

// TestPubSubSlowSubscriber: a subscriber that stops reading is closed once
// the messages waiting for it pass Redis's pubsub output limit (32 MiB by
// default), as Redis closes it, and publishing goes on meanwhile.
func TestPubSubSlowSubscriber(t *testing.T) {
	t.Parallel()
	const n, size = 48, 1 << 20
	for _, tc := range []struct{ name, addr string }{
		{"redis", testsrv.StartRedis(t).Addr},
		{"memory", testsrv.StartMemoryProxy(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, pub := dialRESP(t, tc.addr), dialRESP(t, tc.addr)
			if r, err := sub.do("SUBSCRIBE", "flood"); err != nil || !strings.Contains(r, "flood") {
				t.Fatalf("SUBSCRIBE = %q, %v", r, err)
			}
			msg := strings.Repeat("x", size)
			for i := range n {
				if r, err := pub.do("PUBLISH", "flood", msg); err != nil || (r != ":1\r\n" && r != ":0\r\n") {
					t.Fatalf("PUBLISH %d = %q, %v", i, r, err)
				}
			}
			sub.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.Copy(io.Discard, sub.rd)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the subscriber is still open after %d MiB it did not read (%d bytes delivered)", n, got)
			}
			if got >= n*size {
				t.Fatalf("all %d bytes were delivered; want the subscriber closed before", got)
			}
			t.Logf("closed after %d MiB delivered", got>>20)
		})
	}
}

// TestPubSubAcrossInstances: a message published through one lockproxy
// instance — by PUBLISH, and on postgres by a release script once its
// change is committed — reaches a subscriber on another instance sharing
// the backend (by channel and by pattern), once, and the woken waiter finds
// the lock released. The PUBLISH count is the publishing instance's own
// receivers (docs/pubsub.md).
func TestPubSubAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, kind := range sharedKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			a, b := twoInstances(t, kind)
			sub, pub := dialRESP(t, a), dialRESP(t, b)
			for _, cmd := range [][]string{{"SUBSCRIBE", "lock:released"}, {"PSUBSCRIBE", "lock:*"}} {
				if r, err := sub.do(cmd...); err != nil || !strings.HasPrefix(r, "*3\r\n") {
					t.Fatalf("%v = %q, %v", cmd, r, err)
				}
			}
			expect := func(frames ...string) {
				t.Helper()
				sub.c.SetDeadline(time.Now().Add(5 * time.Second))
				for _, want := range frames {
					if got, err := sub.reply(); err != nil || got != want {
						t.Fatalf("on instance A: %q, %v; want %q", got, err, want)
					}
				}
			}
			if r, err := pub.do("PUBLISH", "lock:released", "m1"); err != nil || r != ":0\r\n" {
				t.Fatalf("PUBLISH on instance B = %q, %v; want :0 (nobody subscribed there)", r, err)
			}
			expect("*3\r\n$7\r\nmessage\r\n$13\r\nlock:released\r\n$2\r\nm1\r\n",
				"*4\r\n$8\r\npmessage\r\n$6\r\nlock:*\r\n$13\r\nlock:released\r\n$2\r\nm1\r\n")

			sub.c.SetDeadline(time.Now().Add(psQuiet)) // each message once, though N nodes carried it
			if got, err := sub.reply(); err == nil {
				t.Fatalf("on instance A, a message twice: %q", got)
			}
			sub = dialRESP(t, a)
			for _, cmd := range [][]string{{"SUBSCRIBE", "lock:released"}, {"PSUBSCRIBE", "lock:*"}} {
				if r, err := sub.do(cmd...); err != nil || !strings.HasPrefix(r, "*3\r\n") {
					t.Fatalf("%v = %q, %v", cmd, r, err)
				}
			}
			// A release script on B: the waiter on A, woken, finds the key free.
			if r, err := pub.do("SET", "k", "tok", "NX", "PX", "30000"); err != nil || r != "+OK\r\n" {
				t.Fatalf("SET NX = %q, %v", r, err)
			}
			release := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return redis.call('publish', KEYS[2], ARGV[2]) end return -1"
			if r, err := pub.do("EVAL", release, "2", "k", "lock:released", "tok", "free"); err != nil || r != ":0\r\n" {
				t.Fatalf("release script on B = %q, %v", r, err)
			}
			expect("*3\r\n$7\r\nmessage\r\n$13\r\nlock:released\r\n$4\r\nfree\r\n",
				"*4\r\n$8\r\npmessage\r\n$6\r\nlock:*\r\n$13\r\nlock:released\r\n$4\r\nfree\r\n")
			sub.c.SetDeadline(time.Now().Add(psQuiet))
			if got, err := sub.reply(); err == nil {
				t.Fatalf("on instance A, a script's message twice: %q", got)
			}
			if r, err := dialRESP(t, a).do("SET", "k", "waiter", "NX", "PX", "30000"); err != nil || r != "+OK\r\n" {
				t.Fatalf("the woken waiter's SET NX on A = %q, %v; want OK", r, err)
			}
			if kind == "quorum" {
				return // the nodes carry messages of any size
			}
			// A message too big for a NOTIFY is an error, not a local delivery.
			if r, err := pub.do("PUBLISH", "lock:released", strings.Repeat("x", 10000)); err != nil || !strings.HasPrefix(r, "-ERR lockproxy's postgres backend carries messages of up to") {
				t.Fatalf("PUBLISH of 10 kB = %q, %v; want the limit's error", r, err)
			}
		})
	}
}

// TestTrackingRedirect: a RESP2 client that tracks with REDIRECT has its
// invalidations sent as messages on __redis__:invalidate to the client it
// names; the frames are Redis's (the IDs differ, so this is not a
// psScenarios case).
func TestTrackingRedirect(t *testing.T) {
	t.Parallel()
	frames := func(addr string) []string {
		r, c, w := dialRESP(t, addr), dialRESP(t, addr), dialRESP(t, addr)
		id, err := r.do("CLIENT", "ID")
		if err != nil || !strings.HasPrefix(id, ":") {
			t.Fatalf("CLIENT ID = %q, %v", id, err)
		}
		var out []string
		for _, step := range []struct {
			c    *respConn
			args []string
		}{
			{r, []string{"SUBSCRIBE", "__redis__:invalidate"}},
			{c, []string{"CLIENT", "TRACKING", "ON", "REDIRECT", strings.TrimSpace(id[1:])}},
			{c, []string{"CLIENT", "GETREDIR"}},
			{c, []string{"GET", "trk:r"}},
			{w, []string{"SET", "trk:r", "v"}},
		} {
			got, err := step.c.do(step.args...)
			if err != nil {
				t.Fatalf("%v: %v", step.args, err)
			}
			if step.args[0] == "CLIENT" && step.args[1] == "GETREDIR" {
				got = ":<id>" // differs between servers; checked below
				if g, _ := c.do("CLIENT", "GETREDIR"); g != id {
					t.Fatalf("CLIENT GETREDIR = %q; want %q", g, id)
				}
			}
			out = append(out, got)
		}
		r.c.SetDeadline(time.Now().Add(psWait))
		msg, err := r.reply()
		if err != nil {
			t.Fatalf("no invalidation on __redis__:invalidate: %v", err)
		}
		return append(out, msg)
	}
	want := frames(testsrv.StartRedis(t).Addr)
	got := frames(testsrv.StartMemoryProxy(t))
	if !slices.Equal(got, want) {
		t.Fatalf("frames\n lockproxy: %q\n     redis: %q", got, want)
	}
}

// TestClientListPubsub: CLIENT LIST TYPE pubsub lists the clients with a
// subscription, TYPE normal the others, as Redis divides them.
func TestClientListPubsub(t *testing.T) {
	t.Parallel()
	addr := testsrv.StartMemoryProxy(t)
	sub, other := dialRESP(t, addr), dialRESP(t, addr)
	subID, _ := sub.do("CLIENT", "ID")
	if r, err := sub.do("PSUBSCRIBE", "x*"); err != nil || !strings.HasPrefix(r, "*3\r\n") {
		t.Fatalf("PSUBSCRIBE = %q, %v", r, err)
	}
	id := "id=" + strings.TrimSpace(subID[1:]) + " "
	for typ, want := range map[string]bool{"pubsub": true, "normal": false} {
		r, err := other.do("CLIENT", "LIST", "TYPE", typ)
		if err != nil || strings.Contains(r, id) != want {
			t.Errorf("CLIENT LIST TYPE %s = %q, %v; the subscriber (%s) listed: want %v", typ, r, err, id, want)
		}
	}
	if r, _ := other.do("CLIENT", "LIST", "TYPE", "pubsub"); strings.Count(r, "id=") != 1 {
		t.Errorf("CLIENT LIST TYPE pubsub = %q; want the subscriber alone", r)
	}
}

// TestClientUnblock: CLIENT UNBLOCK ends a BLPOP as a timeout or with
// Redis's UNBLOCKED error, and INFO counts the blocked client; the frames
// are Redis's (the IDs differ, so this is not a psScenarios case).
func TestClientUnblock(t *testing.T) {
	t.Parallel()
	frames := func(addr string) []string {
		b, c := dialRESP(t, addr), dialRESP(t, addr)
		id, err := b.do("CLIENT", "ID")
		if err != nil || !strings.HasPrefix(id, ":") {
			t.Fatalf("CLIENT ID = %q, %v", id, err)
		}
		id = strings.TrimSpace(id[1:])
		var out []string
		for _, reason := range []string{"TIMEOUT", "ERROR"} {
			b.c.SetDeadline(time.Now().Add(psWait))
			if _, err := b.c.Write(encodeCommand([]string{"BLPOP", "unblock:empty", "0"})); err != nil {
				t.Fatal(err)
			}
			wait.Until(t, "INFO to count the blocked client", func() (bool, any) {
				info, _ := c.do("INFO", "clients")
				return strings.Contains(info, "blocked_clients:1\r\n"), info
			})
			r, _ := c.do("CLIENT", "UNBLOCK", id, reason)
			got, err := b.reply()
			if err != nil {
				t.Fatalf("the blocked BLPOP after CLIENT UNBLOCK %s: %v", reason, err)
			}
			out = append(out, r, got)
		}
		for _, args := range [][]string{{"CLIENT", "UNBLOCK", id}, {"CLIENT", "UNBLOCK", id, "MAYBE"}, {"CLIENT", "UNBLOCK", "x"}} {
			r, _ := c.do(args...)
			out = append(out, r)
		}
		return out
	}
	want := frames(testsrv.StartRedis(t).Addr)
	got := frames(testsrv.StartMemoryProxy(t))
	if !slices.Equal(got, want) {
		t.Fatalf("frames\n lockproxy: %q\n     redis: %q", got, want)
	}
}

// TestPubSubRewake: after a link over which messages may have been lost
// comes back — an instance's LISTEN session (postgres), its subscription
// on a node (quorum) — the subscribers get the last messages of their
// channels again, so that a waiter whose wake-up was lost looks again.
func TestPubSubRewake(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{pgbridge.Advisory, "quorum"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var a, b string
			var lose func()
			if kind == "quorum" {
				var nodes []*testsrv.Redis
				a, nodes = testsrv.StartQuorumProxy(t, 3)
				b = a
				lose = nodes[0].Restart // the instance's subscription there breaks and comes back
			} else {
				var dsn string
				a, dsn = testsrv.StartPostgresProxy(t, kind)
				b = startPostgresProxyOn(t, dsn, kind)
				sql := pgConn(t, dsn)
				lose = func() { // every instance's LISTEN session
					if _, err := sql.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
						WHERE datname = current_database() AND query = 'LISTEN "lockproxy_pubsub"'`); err != nil {
						t.Fatal(err)
					}
				}
			}
			sub, pub := dialRESP(t, a), dialRESP(t, b)
			if r, err := sub.do("SUBSCRIBE", "lock:ch"); err != nil || !strings.HasPrefix(r, "*3\r\n") {
				t.Fatalf("SUBSCRIBE = %q, %v", r, err)
			}
			// A message nobody heard is remembered too: a waiter that
			// subscribes afterwards, whose own wake-up is lost, gets it.
			// q1 goes first: m1, committed after it, reaches a's
			// listener after it, so once sub has m1, a has heard q1 (a
			// message still on its way when the link breaks is lost, as
			// docs/pubsub.md says).
			if _, err := pub.do("PUBLISH", "lock:quiet", "q1"); err != nil {
				t.Fatal(err)
			}
			m1 := "*3\r\n$7\r\nmessage\r\n$7\r\nlock:ch\r\n$2\r\nm1\r\n"
			if _, err := pub.do("PUBLISH", "lock:ch", "m1"); err != nil {
				t.Fatal(err)
			}
			sub.c.SetDeadline(time.Now().Add(5 * time.Second))
			if got, err := sub.reply(); err != nil || got != m1 {
				t.Fatalf("message = %q, %v; want m1", got, err)
			}
			late := dialRESP(t, a)
			if r, err := late.do("SUBSCRIBE", "lock:quiet"); err != nil || !strings.HasPrefix(r, "*3\r\n") {
				t.Fatalf("SUBSCRIBE = %q, %v", r, err)
			}
			lose()
			pub.do("PUBLISH", "lock:ch", "m2") // may be lost on the way
			pub.do("PUBLISH", "lock:quiet", "q2")
			for c, want := range map[*respConn]string{sub: m1, late: "*3\r\n$7\r\nmessage\r\n$10\r\nlock:quiet\r\n$2\r\nq1\r\n"} {
				c.c.SetDeadline(time.Now().Add(10 * time.Second))
				for {
					got, err := c.reply()
					if err != nil {
						t.Fatalf("no wake-up %q after the link came back: %v", want, err)
					}
					if got == want {
						break // the message from before again: the wake-up
					}
				}
			}
		})
	}
}
