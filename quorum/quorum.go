package quorum

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
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
	// CheckInterval is how often each node's persistence settings and
	// run_id are read. default: 5s
	CheckInterval time.Duration
	// Dialer, when set, opens node connections (tests inject faults).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives background events. default: discard
	Logger *slog.Logger
	// Runner runs clients' scripts, in this process (evalmodel.go): the
	// script time limit and libraries are its. default: luascripts.New
	// with its defaults
	Runner *luascripts.Runner
	// ScriptTimeLimit is Runner's script time limit: a script's keys stay
	// leased on the nodes for it and a few node timeouts at most
	// (evalmodel.go). default: 5s
	ScriptTimeLimit time.Duration
	// MaxTTL, when set, is the longest TTL granted: a write with a longer
	// one is refused before anything is written (or undone, for a lock
	// script the nodes run), and a node's quarantine after a restart
	// never exceeds it (marker.go). default: 0, none
	MaxTTL time.Duration
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
	if c.CheckInterval <= 0 {
		c.CheckInterval = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.ScriptTimeLimit <= 0 {
		c.ScriptTimeLimit = 5 * time.Second
	}
	if c.Runner == nil {
		c.Runner = luascripts.New(luascripts.Config{})
	}
	return c
}

// Backend runs the lock model on a majority of nodes. It is safe for
// concurrent use.
type Backend struct {
	cfg    Config
	nodes  []*node
	q      int
	grants grants          // who took the locks this instance granted (holders.go)
	keys   [256]stripeLock // striped by key: see stripe.go

	health  []health
	replies *prometheus.HistogramVec // per node: see metrics.go
	maxTTL  atomic.Int64             // the longest TTL granted, as a Duration
	// acquires counts the blocking acquires run through StartSet (acquire).
	acquires atomic.Int64
	hz       horizon // the horizon markers on the nodes (marker.go)

	classes    luascripts.Classes // what each script does (classify.go)
	runner     *luascripts.Runner // clients' scripts, run here (evalmodel.go)
	leaseSelf  string             // this instance's prefix of lease nonces (evalmodel.go)
	order      orderHolds         // each node's unanswered writes, by stripe (order.go)
	bus        bus                // pub/sub between instances (pubsub.go)
	pubScripts pubScripts         // scripts that publish, as the nodes run them (scriptpub.go)
	lp         loops              // the event loops' node connections (loop.go)
	late       lateWork           // work that must not block a loop or a reader: late undos, horizon raises
	resyncs    pendingResyncs     // keys a resync is pending for (evalmodel.go)
	repairs    repairQueue        // keys whose node connection broke unanswered (repair.go)
	repairDone chan struct{}
	stop       chan struct{}
	done       chan struct{}
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Checker = (*Backend)(nil)
)

// node is one Redis node: what its connections share, and a go-redis
// client for the monitor.
type node struct {
	addr   string
	opt    *redis.Options
	client *redis.Client

	replies  prometheus.Observer // reply times
	failures atomic.Uint64       // operations it failed (settle)
	onRunID  func(string)        // each new connection's run_id (Backend.noteRunID)
}

// New connects to the nodes (a node down at start is a node down, not a
// failure to start), reads their settings once, and starts the monitor that
// Close stops.
func New(cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Nodes) == 0 {
		return nil, errors.New("quorum: no nodes")
	}
	if err := checkNodeList(cfg.Nodes); err != nil {
		return nil, err
	}
	b := &Backend{repairs: repairQueue{wake: make(chan struct{}, 1)}, cfg: cfg, runner: cfg.Runner, leaseSelf: newLeaseSelf(), q: len(cfg.Nodes)/2 + 1, replies: newReplyHistogram(), health: make([]health, len(cfg.Nodes)), order: make(orderHolds, len(cfg.Nodes))}
	for i, a := range cfg.Nodes {
		opt, err := nodeOptions(a, cfg)
		if err != nil {
			return nil, fmt.Errorf("quorum: node %q: %w", a, err)
		}
		b.nodes = append(b.nodes, &node{addr: opt.Addr, opt: opt, client: redis.NewClient(opt),
			replies: b.replies.WithLabelValues(opt.Addr), onRunID: func(id string) { b.noteRunID(i, id) }})
	}
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	b.initHorizon()
	// Database 0's connections are made now (a node down is a node down,
	// not a failure to start); the others on first use.
	b.startOwnLoops(ownLoops())
	b.checkAll()
	b.hz.ready.Store(true)
	go b.monitor()
	b.repairDone = make(chan struct{})
	go func() {
		defer close(b.repairDone)
		b.repairLoop(b.stop)
	}()
	if err := b.checkRunIDs(); err != nil {
		b.Close(context.Background())
		return nil, err
	}
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
	// These options are the monitor's client's; the engine's connections
	// use Addr, the credentials, TLSConfig and the Dialer (link.go).
	opt.Protocol = 2
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = 2
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

// Close stops the monitor and closes every node client.
func (b *Backend) Close(context.Context) error {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	<-b.repairDone
	b.late.close()
	b.bus.close()
	var errs *multierror.Error
	errs = multierror.Append(errs, b.closeHorizon())
	b.closeLoops()
	for _, n := range b.nodes {
		errs = multierror.Append(errs, n.client.Close())
	}
	return errs.ErrorOrNil()
}

// errNoQuorum is the client's reply when failures, not contention, leave no
// majority.
func (b *Backend) errNoQuorum(replies []nodeReply) error {
	var errs *multierror.Error
	ok, quarantined := 0, 0
	for i, r := range replies {
		switch {
		case errors.Is(r.err, errQuarantined):
			quarantined++
		case r.failed():
			errs = multierror.Append(errs, fmt.Errorf("node %s: %w", b.nodes[i].addr, r.err))
		default:
			ok++
		}
	}
	reply := fmt.Sprintf("TRYAGAIN quorum not reached: %d of %d nodes answered", ok, len(b.nodes))
	if quarantined > 0 { // they answer, but may have forgotten locks: say so, as /readyz does
		reply = fmt.Sprintf("TRYAGAIN quorum not reached: %d of %d nodes usable, %d quarantined after a restart",
			ok, len(b.nodes), quarantined)
	}
	return &backend.ReplyError{Reply: reply, Err: errs.ErrorOrNil()}
}

// lateWork runs the work a late reply asks for (a script a node had not
// run, a horizon raise) on goroutines of its own: the event loop, which
// delivers it, must not wait. Close waits for them; work asked for
// after that is dropped (the nodes' connections are closing).
type lateWork struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f unless the Backend is closing.
func (l *lateWork) Go(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.wg.Go(f)
}

func (l *lateWork) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.wg.Wait()
}

// ownLoops is how many loops of its own a Backend runs for its blocking
// callers: one per processor the Go scheduler uses, so that a goroutine
// front end under load spreads its operations' votes as the event-loop
// front end does.
func ownLoops() int { return max(1, min(runtime.GOMAXPROCS(0), 8)) }
