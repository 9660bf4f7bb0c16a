package quorum

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/proxy/keycmd"
)

// Config configures a Backend.
type Config struct {
	// Nodes are the host:port (or redis:// URLs) of independent Redis
	// nodes; 3 or more for fault tolerance.
	Nodes []string
	// NodeTimeout bounds one operation on one node. default: 50ms
	NodeTimeout time.Duration
	// DriftFactor and DriftConst make the clock-drift allowance of an
	// acquire: TTL·DriftFactor + DriftConst. default: 0.01 and 2ms
	DriftFactor float64
	DriftConst  time.Duration
	// PoolSize is the connection pool size per node. default: 64
	PoolSize int
	// CheckInterval is how often each node's persistence settings and
	// run_id are read. default: 5s
	CheckInterval time.Duration
	// Dialer, when set, opens node connections (tests inject faults).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives background events. default: discard
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = 50 * time.Millisecond
	}
	if c.DriftFactor <= 0 {
		c.DriftFactor = 0.01
	}
	if c.DriftConst <= 0 {
		c.DriftConst = 2 * time.Millisecond
	}
	if c.PoolSize <= 0 {
		c.PoolSize = 64
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Backend runs the lock model on a majority of nodes. It is safe for
// concurrent use.
type Backend struct {
	cfg   Config
	nodes []*node
	q     int
	keys  [256]sync.Mutex // striped by key: see lockKeys

	health []health
	maxTTL atomic.Int64 // the longest TTL granted, as a Duration
	stop   chan struct{}
	done   chan struct{}
}

// lockKeys serialises this proxy's operations on the same keys, so that
// every node sees them in the same order: concurrent acquires of one key
// then cannot split the vote, and concurrent scripts over the same keys
// cannot leave the nodes disagreeing. (Several proxy instances in front
// of the same nodes do not share this order; their split votes end in nil
// or TRYAGAIN and the clients retry, as with client-side Redlock.) The
// stripes are taken in ascending order, so two multi-key operations cannot
// deadlock.
func (b *Backend) lockKeys(keys ...string) func() {
	var idx []int
	for _, k := range keys {
		i := int(stripe(k))
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		b.keys[i].Lock()
	}
	return func() {
		for _, i := range idx {
			b.keys[i].Unlock()
		}
	}
}

func stripe(key string) uint8 {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return uint8(h)
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Checker = (*Backend)(nil)
)

// node is one Redis node, with one client per database used so far.
type node struct {
	addr string
	opt  *redis.Options
	mu   sync.Mutex
	dbs  [keycmd.Databases]*redis.Client
	bts  [keycmd.Databases]*batcher
}

// nodeConn is one node's client for one database and its batcher.
type nodeConn struct {
	*redis.Client
	bt *batcher
}

// conn returns the node's client and batcher for db.
func (n *node) conn(db int, timeout time.Duration, stop <-chan struct{}) nodeConn {
	c := n.client(db)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.bts[db] == nil {
		n.bts[db] = newBatcher(c, timeout, stop)
	}
	return nodeConn{Client: c, bt: n.bts[db]}
}

// New connects to the nodes (a node down at start is a node down, not a
// failure to start), reads their settings once, and starts the monitor that
// Close stops.
func New(cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Nodes) == 0 {
		return nil, errors.New("quorum: no nodes")
	}
	b := &Backend{cfg: cfg, q: len(cfg.Nodes)/2 + 1}
	for _, a := range cfg.Nodes {
		opt, err := nodeOptions(a, cfg)
		if err != nil {
			return nil, fmt.Errorf("quorum: node %q: %w", a, err)
		}
		b.nodes = append(b.nodes, &node{addr: opt.Addr, opt: opt})
	}
	b.health = make([]health, len(b.nodes))
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	b.checkAll()
	go b.monitor()
	return b, nil
}

func nodeOptions(a string, cfg Config) (*redis.Options, error) {
	opt := &redis.Options{Addr: a}
	if strings.Contains(a, "://") {
		var err error
		if opt, err = redis.ParseURL(a); err != nil {
			return nil, err
		}
	}
	opt.Protocol = 3 // raw script replies keep their RESP3 types (resp.go)
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = cfg.PoolSize
	opt.DialTimeout = cfg.NodeTimeout * 4
	opt.ReadTimeout = cfg.NodeTimeout
	opt.WriteTimeout = cfg.NodeTimeout
	opt.DisableIdentity = true
	opt.DialerRetries = 1 // a node that refuses is down: the vote, not a retry, deals with it
	opt.DialerRetryTimeout = cfg.NodeTimeout
	if cfg.Dialer != nil {
		opt.Dialer = cfg.Dialer
	}
	return opt, nil
}

// client returns the node's client for db.
func (n *node) client(db int) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dbs[db] == nil {
		o := *n.opt
		o.DB = db
		n.dbs[db] = redis.NewClient(&o)
	}
	return n.dbs[db]
}

// Close stops the monitor and closes every node client.
func (b *Backend) Close(context.Context) error {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	var errs *multierror.Error
	for _, n := range b.nodes {
		n.mu.Lock()
		for i, c := range n.dbs {
			if c != nil {
				errs = multierror.Append(errs, c.Close())
				n.dbs[i] = nil
			}
		}
		n.mu.Unlock()
	}
	return errs.ErrorOrNil()
}

// answer is one node's reply to a fanned-out operation.
type answer struct {
	node int
	v    any
	err  error
}

// fanout runs op on every node in parallel, each under its own NodeTimeout,
// and returns every node's answer. One slow node costs at most its timeout.
func (b *Backend) fanout(ctx context.Context, db int, op func(ctx context.Context, c nodeConn) (any, error)) []answer {
	ch := make(chan answer, len(b.nodes)) // one send per node: no sender is ever stranded
	for i, n := range b.nodes {
		go func() {
			if b.quarantined(i) {
				ch <- answer{node: i, err: errQuarantined}
				return
			}
			nctx, cancel := context.WithTimeout(ctx, b.cfg.NodeTimeout)
			defer cancel()
			v, err := op(nctx, n.conn(db, b.cfg.NodeTimeout, b.stop))
			ch <- answer{node: i, v: v, err: err}
		}()
	}
	out := make([]answer, 0, len(b.nodes))
	for range b.nodes {
		out = append(out, <-ch)
	}
	return out
}

// errNoQuorum is the client's reply when failures, not contention, leave no
// majority.
func (b *Backend) errNoQuorum(answers []answer) error {
	var errs *multierror.Error
	ok := 0
	for _, a := range answers {
		if a.err != nil && !errors.Is(a.err, redis.Nil) {
			errs = multierror.Append(errs, fmt.Errorf("node %s: %w", b.nodes[a.node].addr, a.err))
		} else {
			ok++
		}
	}
	return &backend.ReplyError{
		Reply: fmt.Sprintf("TRYAGAIN quorum not reached: %d of %d nodes answered", ok, len(b.nodes)),
		Err:   errs.ErrorOrNil(),
	}
}

// failed reports whether an answer is a node failure (not a reply).
func failed(a answer) bool { return a.err != nil && !errors.Is(a.err, redis.Nil) }
