package migrate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// Config configures a Backend.
type Config struct {
	// URL names the legacy Redis: redis://[user:pass@]host[:port] or
	// rediss://… (TLS). Required.
	URL string
	// Timeout bounds each operation on the legacy Redis; it must stay far
	// below the locks' TTLs. default: 50ms
	Timeout time.Duration
	// PoolSize is the number of connections to the legacy Redis per
	// database in use. default: 64
	PoolSize int
	// StatusInterval is how often the legacy Redis's CLIENT LIST is read
	// for the cutover status. default: 5s
	StatusInterval time.Duration
	// ClientName is the name lockproxy's connections to the legacy Redis
	// carry (CLIENT SETNAME), by which the cutover status leaves them out:
	// every lockproxy instance of a fleet uses the same name. default:
	// lockproxy-migrate
	ClientName string
	// TLS configures rediss:// connections. default: the system's roots,
	// the URL's host as server name
	TLS *tls.Config
	// Dialer, when set, opens the connections to the legacy Redis (tests
	// inject faults with it).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Runner runs scripts on an empty key space to learn which keys they
	// create. default: luascripts.New with its defaults
	Runner *luascripts.Runner
	// Logger receives the status loop's problems. default: discard
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = 50 * time.Millisecond
	}
	if c.PoolSize <= 0 {
		c.PoolSize = 64
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = 5 * time.Second
	}
	if c.ClientName == "" {
		c.ClientName = "lockproxy-migrate"
	}
	if c.Runner == nil {
		c.Runner = luascripts.New(luascripts.Config{})
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Legacy is a parsed legacy Redis URL.
type Legacy struct {
	Addr     string // host:port (port 6379 when the URL names none)
	Username string
	Password string
	TLS      bool // rediss://
	Host     string
}

// ParseURL parses redis://[user:pass@]host[:port] or rediss://…. A URL
// with a user part but no password (redis://secret@host) carries the
// password alone, as redis-cli -u reads it. Databases and options in the
// URL are refused: clients' SELECT picks the database.
func ParseURL(s string) (Legacy, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" || u.Opaque != "" {
		return Legacy{}, fmt.Errorf("%s is not a redis:// or rediss:// URL", MaskURL(s))
	}
	if u.Path != "" && u.Path != "/" {
		return Legacy{}, fmt.Errorf("a database in the URL (%q) is not supported", u.Path)
	}
	if u.RawQuery != "" {
		return Legacy{}, fmt.Errorf("URL options (?%s) are not supported", u.RawQuery)
	}
	l := Legacy{Addr: u.Host, TLS: u.Scheme == "rediss", Host: u.Hostname()}
	if u.Port() == "" {
		l.Addr = net.JoinHostPort(u.Hostname(), "6379")
	} else if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return Legacy{}, fmt.Errorf("%q is not host:port", u.Host)
	}
	if u.User != nil {
		l.Username = u.User.Username()
		if p, ok := u.User.Password(); ok {
			l.Password = p
		} else {
			l.Username, l.Password = "", u.User.Username()
		}
	}
	return l, nil
}

// MaskURL hides a URL's password, for logs, INFO and errors.
func MaskURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(url)"
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok { // redis://secret@host: the user part is the password
		u.User = url.UserPassword("", "xxxxx")
	}
	return u.Redacted()
}

// Backend takes every lock in the legacy Redis and in the inner backend
// (package doc). It is safe for concurrent use; its status goroutine runs
// from New until Close.
type Backend struct {
	inner  backend.Backend
	cfg    Config
	legacy Legacy

	mu       sync.Mutex
	clients  [16]*redis.Client // by database, made on first use
	releases luascripts.Releases

	st     status
	own    ownConns // this instance's connections to the legacy Redis
	stop   chan struct{}
	done   chan struct{}
	close  sync.Once
	bridge sync.WaitGroup // the pub/sub bridge (pubsub.go), once SetHub started it
	hubSet sync.Once
	evals  inflight // script runs between their two sides (pubsub.go)
}

var _ backend.Backend = (*Backend)(nil)

// New wraps inner: every lock is taken in the legacy Redis cfg.URL names
// and in inner. It does not wait for the legacy Redis to answer (its
// absence makes acquisitions fail with TRYAGAIN, and shows in the status).
// Close closes inner too.
func New(inner backend.Backend, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	l, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	b := &Backend{inner: inner, cfg: cfg, legacy: l, stop: make(chan struct{}), done: make(chan struct{})}
	b.st.init()
	go b.statusLoop()
	return b, nil
}

// client returns the go-redis client of database db of the legacy Redis.
func (b *Backend) client(db int) *redis.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	if db < 0 || db >= len(b.clients) {
		db = 0
	}
	if c := b.clients[db]; c != nil {
		return c
	}
	c := redis.NewClient(b.options(db))
	b.clients[db] = c
	return c
}

// options are the go-redis options of database db of the legacy Redis.
func (b *Backend) options(db int) *redis.Options {
	o := &redis.Options{
		Addr:                  b.legacy.Addr,
		Username:              b.legacy.Username,
		Password:              b.legacy.Password,
		DB:                    db,
		ClientName:            b.cfg.ClientName,
		Protocol:              2,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              b.cfg.PoolSize,
		DialTimeout:           b.cfg.Timeout,
		ReadTimeout:           b.cfg.Timeout,
		WriteTimeout:          b.cfg.Timeout,
		PoolTimeout:           b.cfg.Timeout,
		DialerRetries:         1,    // one dial per operation: a legacy Redis that is down costs one refused dial, not five with backoff
		DisableIdentity:       true, // no CLIENT SETINFO: one command less per connection, and older Redis refuse it
	}
	if b.legacy.TLS {
		o.TLSConfig = b.cfg.TLS
		if o.TLSConfig == nil {
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: b.legacy.Host}
		}
	}
	dial := b.cfg.Dialer
	if dial == nil {
		dial = redis.NewDialer(o) // go-redis's own, TLS included
	}
	o.Dialer = b.own.dialer(dial)
	return o
}

// legacyCtx bounds one operation on the legacy Redis.
func (b *Backend) legacyCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.Timeout)
}

// cleanupCtx is the context of an undo: never the one that failed.
func (b *Backend) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout)
}

// Close stops the status goroutine and waits for it, closes the legacy
// connections and then the inner backend.
func (b *Backend) Close(ctx context.Context) error {
	var err error
	b.close.Do(func() {
		close(b.stop)
		select {
		case <-b.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		b.bridge.Wait()
		b.mu.Lock()
		for i, c := range b.clients {
			if c != nil {
				c.Close()
				b.clients[i] = nil
			}
		}
		b.mu.Unlock()
		err = errors.Join(err, b.inner.Close(ctx))
	})
	return err
}

// Check implements backend.Checker: the inner backend's readiness, and
// the legacy Redis answering PING within the timeout (without it no lock
// can be granted).
func (b *Backend) Check(ctx context.Context) error {
	if c, ok := b.inner.(backend.Checker); ok {
		if err := c.Check(ctx); err != nil {
			return err
		}
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	if err := b.client(0).Ping(lctx).Err(); err != nil {
		return legacyFailed(err)
	}
	return nil
}

// legacyFailed is the error of an operation the legacy Redis did not
// complete: TRYAGAIN for the client (no false OK, no false nil).
func legacyFailed(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		return &backend.ReplyError{Reply: "TRYAGAIN migrate: the legacy Redis answered " + firstLine(re.Error()), Err: err}
	}
	return &backend.ReplyError{Reply: "TRYAGAIN migrate: the legacy Redis did not answer", Err: err}
}

// firstLine keeps one line of s, so a reply stays one line.
func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' || s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
