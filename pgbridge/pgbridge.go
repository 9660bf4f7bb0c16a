package pgbridge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/luascripts"
)

// Strategies.
const (
	Advisory = "advisory"
	Lease    = "lease"
)

// Config configures a Backend.
type Config struct {
	// DSN is the PostgreSQL connection string (URL or key=value form).
	DSN string
	// Strategy is Advisory (session advisory locks held by this process) or
	// Lease (the lease table is the truth). default: Advisory
	Strategy string
	// Schema holds the lease table (Schema.leases); it is created if
	// missing. default: lockproxy
	Schema string
	// Holders is the number of dedicated holder connections (advisory).
	// Fewer holders make larger merged statements: at 50 clients on two
	// cores, 2 did ~1.3x the lock cycles of 4 with a lower p99, and 1 was
	// no worse than 2 but puts every lock on one session. An instance whose
	// advisory lock limit (AdvisoryLocks) is large has more: one per 10,000
	// locks of it, at most 32 (capacity.go). default: 2
	Holders int
	// OpTimeout bounds one statement batch on a holder connection. A batch
	// that takes longer closes that connection, which releases its locks:
	// a holder never waits on a client's deadline. default: 5s
	OpTimeout time.Duration
	// LeaseRowDelay (advisory) is how long a lock with a TTL of at most
	// maxDeferredTTL (a minute) is held before its lease row is written: a
	// lock released sooner never touches the lease table (deferred.go).
	// Every instance answers the same whatever it is. 0 writes every row
	// at once; lockproxy's default is 200ms. default: 0
	LeaseRowDelay time.Duration
	// AdvisoryLocks (advisory) is how many advisory locks this instance
	// holds at most: a command that would take one more answers OOM. It may
	// be at most 3/4 of PostgreSQL's lock table, max_locks_per_transaction ×
	// (max_connections + max_prepared_transactions), read at start; New
	// fails when it is more (capacity.go). default: 0, that 3/4
	AdvisoryLocks int
	// ReapInterval is how often lease rows that mean nothing any more are
	// deleted: expired ones (lease) and those whose holder session is gone
	// (advisory). default: 10s
	ReapInterval time.Duration
	// Runner runs EVAL scripts. default: luascripts.New with its defaults
	Runner *luascripts.Runner
	// Logger receives holder losses and reconnects. default: discard
	Logger *slog.Logger
}

// Backend serves the lock model from PostgreSQL. It is safe for concurrent
// use.
type Backend struct {
	cfg      Config
	pool     *pgxpool.Pool
	table    string // quoted schema.leases
	fencing  string // schema.fencing_tokens, their sequence (fencing.go)
	instance string // random per process: this instance's name in lease rows and its NOTIFY channel
	runner   *luascripts.Runner
	log      *slog.Logger
	outage   outage // PostgreSQL unreachable: logged with backoff, its end once
	seed     maphash.Seed
	stripes  [numStripes]stripe
	store    strategy

	ctx    context.Context // ends at Close: background work
	cancel context.CancelFunc
	wg     sync.WaitGroup

	hub     backend.Hub // this instance's subscribers (pubsub.go), set before serving
	hubOnce sync.Once
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Checker = (*Backend)(nil)
)

// numStripes is the number of per-key mutexes: operations on keys of one
// stripe run one after another, across their PostgreSQL round trips.
const numStripes = 4096

// stripe serialises the operations on its keys and, in the advisory
// strategy, guards the leases this process holds for them.
type stripe struct {
	mu    sync.Mutex
	owned map[dbKey]*held
}

type dbKey struct {
	db  int
	key string
}

// state is one key as the model sees it: absent, or a value with a
// deadline (Unix milliseconds, 0 for none). The value is a string (kind
// model.KindString, token its bytes) or a value of another type (token
// its model.Encode bytes).
type state struct {
	present  bool
	kind     uint8
	token    []byte
	deadline int64
	fencing  int64         // the grant's fencing token, from the sequence (fencing.go); 0: none known
	grant    backend.Grant // when and for whom it was granted (holders.go); zero: unknown
}

// same reports whether s and o are the same state.
func (s state) same(o state) bool {
	return s.present == o.present && s.kind == o.kind && bytes.Equal(s.token, o.token) && s.deadline == o.deadline && s.fencing == o.fencing
}

// strategy is where the locks live, and owns everything in which the two
// strategies differ, so that the Backend around it (stripes, the engine,
// the KeySpace methods, metrics) never asks which one it has: its schema,
// its background work, its fast paths for the commands every lock client
// sends, what becomes of an operation on a key held beyond reach, and the
// figures it reports. advisory (advisory.go and the advisory-only files
// holder.go, read.go, route.go, fence.go, deferred.go, horizon.go,
// expiry.go) and leaseStore
// (lease.go) implement it; New picks one by Config.Strategy and nothing
// else looks at Config.Strategy. (One Backend with a strategy rather than
// two Backend types: the KeySpace methods, the engine and the stripes are
// the same code for both, and differ only at these points.)
type strategy interface {
	// logged reports whether the lease table is LOGGED; extraDDL is the
	// strategy's own tables, created after it (createSchema).
	logged() bool
	extraDDL() []string
	// start begins the background work (holder sessions, reapers,
	// listeners) once the schema exists; it returns when the strategy
	// serves. Backend.ctx ends it and Backend.wg waits for it.
	start(ctx context.Context) error

	// prepare makes keys (sorted, distinct, their stripes locked) ready for
	// one operation and returns their states. Keys held beyond this
	// process's reach are reported as a *heldError.
	prepare(ctx context.Context, keys []dbKey) (tx, error)
	// read returns a key's state without preparing it (GET, PTTL, EXISTS).
	read(ctx context.Context, k dbKey) (state, error)
	// countLive counts the live keys of db in the lease table but for the
	// keys of except (DBSIZE); it is run under Backend.retryRead.
	countLive(ctx context.Context, db int, except [][]byte) (int64, error)
	// listLive lists the live keys of db with their types (KEYS, SCAN,
	// RANDOMKEY, FLUSHDB: whole.go), run under Backend.retryRead;
	// dropFences deletes the rows of db no session holds (a flush), and
	// unfenceAll the fences that cover every database (FLUSHALL).
	listLive(ctx context.Context, db int) ([]model.KeyType, error)
	dropFences(ctx context.Context, db int) error
	unfenceAll(ctx context.Context) error

	// acquire is the fast path of SET key token NX (without GET), the
	// command every lock client takes its lock with; its stripe is not
	// locked. done is false when the general path must run.
	acquire(ctx context.Context, k dbKey, token []byte, o backend.SetOptions) (res backend.SetResult, done bool, err error)
	// evalFast is the fast path of a catalogued script (luascripts), for
	// a strategy that has one; the keys' stripes are not locked. done is
	// false when the general path must run.
	evalFast(ctx context.Context, s backend.Script, keys []dbKey, args [][]byte, ro bool) (v backend.Value, done bool, err error)
	// route runs req at the holder of h's keys, where the strategy can
	// reach it, and otherwise answers the client's error (heldReply).
	route(ctx context.Context, h *heldError, req *routeReq) (*routeReply, error)

	// heldLocks and expiredLocks are the figures of Backend.HeldLocks and
	// Backend.ExpiredLocks; collect and infoLines add the strategy's own
	// metrics and INFO lines (metrics.go) to the Backend's.
	heldLocks() int64
	expiredLocks() uint64
	collect(ch chan<- prometheus.Metric)
	infoLines() []string

	// check reports whether the strategy can serve (backend.Checker);
	// drain runs first in Close, while everything still runs; close stops
	// what Backend.ctx does not (before Backend.wg is waited for).
	check(ctx context.Context) error
	drain(ctx context.Context)
	close()
}

// tx is one prepared operation.
type tx interface {
	before() map[dbKey]state
	// clock is the time the operation runs at: the model's clock, stopped
	// for the operation, by which it judges expiry and counts relative
	// expiries.
	clock() time.Time
	// commit makes after (the state of every prepared key once the
	// operation ran) durable; it fails when it cannot tell.
	commit(ctx context.Context, after map[dbKey]state) error
	// rollback undoes prepare.
	rollback()
	// newFence takes the next fence from the sequence for a grant of k
	// the operation makes (fencing.go); 0 for a key that is a fence
	// (fence.go), which no grant holds.
	newFence(ctx context.Context, k dbKey) (int64, error)
}

// heldError reports keys that another holder has: another lockproxy
// instance (advisory, named by instance) or a session using the advisory
// lock from SQL.
type heldError struct {
	keys      []dbKey
	instances []string // the holding instance of each key, "" if unknown
	letGo     bool     // a key was let go before its holder was read (errLetGo)
}

// Is reports a *heldError with a key let go as errLetGo.
func (e *heldError) Is(target error) bool { return target == errLetGo && e.letGo }

func (e *heldError) Error() string {
	return fmt.Sprintf("pgbridge: %d key(s) held elsewhere", len(e.keys))
}

// New connects, creates the schema and lease table if missing and starts
// the holder connections.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Strategy == "" {
		cfg.Strategy = Advisory
	}
	newStrategy, ok := strategies[cfg.Strategy]
	if !ok {
		return nil, fmt.Errorf("pgbridge: unknown strategy %q (use advisory or lease)", cfg.Strategy)
	}
	if cfg.Schema == "" {
		cfg.Schema = "lockproxy"
	}
	if !identifier.MatchString(cfg.Schema) {
		return nil, fmt.Errorf("pgbridge: schema %q is not a plain identifier (letters, digits, _)", cfg.Schema)
	}
	if cfg.Holders <= 0 {
		cfg.Holders = 2
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 5 * time.Second
	}
	if cfg.LeaseRowDelay < 0 {
		return nil, fmt.Errorf("pgbridge: lease row delay %v is negative", cfg.LeaseRowDelay)
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 10 * time.Second
	}
	if cfg.Runner == nil {
		cfg.Runner = luascripts.New(luascripts.Config{})
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgbridge: postgres-dsn: %w", err)
	}
	if pcfg.MaxConns < 16 {
		pcfg.MaxConns = 16
	}
	pcfg.ConnConfig.RuntimeParams[internalParam] = "on" // the lease rows' guard lets lockproxy's own deletes through (release.go)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("pgbridge: %w", err)
	}
	id := make([]byte, 8)
	rand.Read(id)
	b := &Backend{
		cfg: cfg, pool: pool, table: cfg.Schema + ".leases", fencing: cfg.Schema + ".fencing_tokens", instance: hex.EncodeToString(id),
		runner: cfg.Runner,
		log:    cfg.Logger, seed: maphash.MakeSeed(), outage: outage{log: cfg.Logger},
	}
	for i := range b.stripes {
		b.stripes[i].owned = make(map[dbKey]*held)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if err := pool.Ping(ctx); err != nil {
		b.cancel()
		pool.Close()
		return nil, fmt.Errorf("pgbridge: cannot reach PostgreSQL: %w", err)
	}
	b.store = newStrategy(b)
	if err := b.createSchema(ctx); err != nil {
		b.cancel()
		pool.Close()
		return nil, err
	}
	if err := b.store.start(ctx); err != nil {
		b.cancel()
		pool.Close()
		return nil, err
	}
	return b, nil
}

// strategies are the constructors of the strategies by Config.Strategy:
// the one place that picks a strategy. A constructor has no side effects;
// the strategy starts (strategy.start) once the schema exists.
var strategies = map[string]func(*Backend) strategy{
	Advisory: func(b *Backend) strategy { return newAdvisory(b) },
	Lease:    func(b *Backend) strategy { return newLeaseStore(b) },
}

var (
	_ strategy = (*advisory)(nil)
	_ strategy = (*leaseStore)(nil)
)

// ValidSchema reports whether name can be Config.Schema: a plain SQL
// identifier, used unquoted.
func ValidSchema(name string) bool { return identifier.MatchString(name) }

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// createSchema creates the schema and lease table idempotently, LOGGED or
// UNLOGGED as the strategy has it (strategy.logged), then the strategy's
// own tables.
func (b *Backend) createSchema(ctx context.Context) error {
	persistence := "UNLOGGED"
	if b.store.logged() {
		persistence = "LOGGED"
	}
	ddl := []string{
		"CREATE SCHEMA IF NOT EXISTS " + b.cfg.Schema,
		"CREATE " + strings.TrimPrefix(persistence, "LOGGED") + " TABLE IF NOT EXISTS " + b.table + ` (
			db         integer     NOT NULL,
			key        bytea       NOT NULL,
			lock_id    bigint      NOT NULL,
			token      bytea       NOT NULL,
			kind       smallint    NOT NULL DEFAULT 0,
			deadline_ms bigint,
			expires_at timestamptz GENERATED ALWAYS AS (CASE WHEN deadline_ms IS NULL THEN NULL
				WHEN deadline_ms >= 9000000000000000 THEN 'infinity'::timestamptz
				ELSE to_timestamp(deadline_ms / 1000.0) END) STORED,
			holder     text        NOT NULL,
			holder_pid integer     NOT NULL DEFAULT 0,
			fencing_token bigint,
			PRIMARY KEY (db, key))`,
		"ALTER TABLE " + b.table + " SET " + persistence,
		// kind is the value's type (model.Kind…; 0, a string, in tables
		// made before other types were kept): token holds a value of
		// another type in model.Encode's form.
		"ALTER TABLE " + b.table + " ADD COLUMN IF NOT EXISTS kind smallint NOT NULL DEFAULT 0",
		// fencing_token is the grant's (fencing.go); NULL in rows written
		// before fencing tokens.
		"ALTER TABLE " + b.table + " ADD COLUMN IF NOT EXISTS fencing_token bigint",
		"CREATE SEQUENCE IF NOT EXISTS " + b.fencing,
		// Who took the lock (holders.go); NULL when unknown.
		"ALTER TABLE " + b.table + " ADD COLUMN IF NOT EXISTS granted_ms bigint, ADD COLUMN IF NOT EXISTS client_addr text, " +
			"ADD COLUMN IF NOT EXISTS client_name text, ADD COLUMN IF NOT EXISTS client_user text, ADD COLUMN IF NOT EXISTS granted_by text",
		leasesTextDDL(b.cfg.Schema, b.table),
	}
	ddl = append(ddl, b.store.extraDDL()...)
	ddl = append(ddl, releaseDDL(b.cfg.Schema, b.table, b.cfg.Strategy == Advisory)...)
	for _, q := range ddl {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "3D000") {
				return fmt.Errorf("pgbridge: cannot create %s: %s (grant CREATE on the database, or create the schema and table as an owner)", b.table, pe.Message)
			}
			if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") { // a concurrent CREATE by another instance
				continue
			}
			return fmt.Errorf("pgbridge: %s: %w", b.table, err)
		}
	}
	return nil
}

// Close stops background work, closes the holder connections (which
// releases every advisory lock this process holds) and the pool.
func (b *Backend) Close(ctx context.Context) error {
	b.store.drain(ctx)
	b.cancel()
	b.store.close()
	b.wg.Wait()
	b.pool.Close()
	return nil
}

// Check reports whether PostgreSQL answers and, in the advisory strategy,
// whether every holder connection is up (backend.Checker, strategy.check).
func (b *Backend) Check(ctx context.Context) error { return b.store.check(ctx) }

func (b *Backend) stripe(k dbKey) *stripe {
	return &b.stripes[maphash.String(b.seed, k.key)%numStripes]
}

// lockStripes locks the stripes of keys in a fixed order and returns the
// function that unlocks them.
func (b *Backend) lockStripes(keys []dbKey) func() {
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, int(maphash.String(b.seed, k.key)%numStripes))
	}
	sort.Ints(idx)
	var locked []*sync.Mutex
	for i, x := range idx {
		if i > 0 && idx[i-1] == x {
			continue
		}
		m := &b.stripes[x].mu
		m.Lock()
		locked = append(locked, m)
	}
	return func() {
		for _, m := range locked {
			m.Unlock()
		}
	}
}

// hashText is the text whose hashtextextended is a key's advisory lock id:
// the key itself when it is valid UTF-8 without NUL bytes (so SQL users
// lock the same id with hashtextextended('key', db)), else "\x" and its
// hex digits, since PostgreSQL text cannot hold such a key.
func hashText(key string) string {
	if utf8.ValidString(key) && !strings.Contains(key, "\x00") {
		return key
	}
	return `\x` + hex.EncodeToString([]byte(key))
}

// sortKeys returns the distinct keys of db in a fixed order.
func sortKeys(keys []dbKey) []dbKey {
	out := append([]dbKey(nil), keys...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].db != out[j].db {
			return out[i].db < out[j].db
		}
		return out[i].key < out[j].key
	})
	n := 0
	for i, k := range out {
		if i == 0 || k != out[n-1] {
			out[n] = k
			n++
		}
	}
	return out[:n]
}

func checkDB(db int) error {
	if db < 0 || db >= backend.Databases {
		return fmt.Errorf("pgbridge: database %d out of range", db)
	}
	return nil
}

// tryAgain is the error a client sees when PostgreSQL could not tell.
func tryAgain(err error) error {
	var re *backend.ReplyError
	if errors.As(err, &re) {
		return err
	}
	return &backend.ReplyError{Reply: "TRYAGAIN postgres: " + clientText(err), Err: err}
}

// retryRead runs f again after a connection failure, up to three times:
// for reads and for work that commits nothing.
func (b *Backend) retryRead(ctx context.Context, f func() error) error {
	var err error
	for range 3 {
		if err = f(); err == nil {
			b.outage.ok()
			return nil
		}
		if !connError(err) || ctx.Err() != nil {
			return err
		}
		b.dropPool(ctx, err)
	}
	return err
}

// dropPool closes the pool's connections after err, when err is a failure
// of a connection and not of the client's context: after PostgreSQL
// restarts, every idle connection is as dead as the one that failed, and
// the pool would hand them out one by one, a failed command (or a retry)
// each. Connections in use are closed when they come back.
func (b *Backend) dropPool(ctx context.Context, err error) {
	if connError(err) && ctx.Err() == nil {
		b.outage.fail("pool", err)
		b.pool.Reset()
	}
}

// connError reports whether err is a failure of the connection rather
// than an answer of PostgreSQL.
func connError(err error) bool {
	var pe *pgconn.PgError
	var he *heldError
	var re *backend.ReplyError
	switch {
	case errors.As(err, &pe):
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	case errors.As(err, &he), errors.Is(err, pgx.ErrNoRows), errors.As(err, &re):
		return false
	}
	return true
}

// deadlineParam converts a deadline (Unix ms, 0 for none) to the
// deadline_ms parameter. Deadlines are kept in milliseconds because Redis
// allows them up to 2^63-1 ms, far beyond timestamptz; expires_at is the
// same deadline for people, 'infinity' past the year 287000.
func deadlineParam(deadline int64) any {
	if deadline == 0 {
		return nil
	}
	return deadline
}

// addMS adds a remaining time to a clock reading without overflowing:
// Redis allows deadlines up to 2^63-1 ms.
func addMS(now, left int64) int64 {
	if left > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + left
}

// pgNowMS is PostgreSQL's clock (the transaction's start) in Unix ms.
const pgNowMS = `floor(extract(epoch from now()) * 1000)::bigint`

// leaseLive holds for a lease row whose deadline (the column col) has not
// come by PostgreSQL's clock: the lease strategy's one rule of expiry
// (leaseTx.begin runs the operation at now and reads a deadline not after
// it as absent).
func leaseLive(col string) string {
	return `(` + col + ` IS NULL OR ` + col + ` > ` + pgNowMS + `)`
}

// rowQuerier is what a read runs on: the pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckDSN reports whether dsn parses as a PostgreSQL connection string
// (a URL or key=value pairs), without connecting. The error holds no
// password.
func CheckDSN(dsn string) error {
	if _, err := pgxpool.ParseConfig(dsn); err != nil {
		return errors.New("it does not parse as a postgres:// URL or key=value connection string")
	}
	return nil
}
