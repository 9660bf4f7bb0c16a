package testsrv

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// DataPathEnv names the front end (proxy.Config.DataPath) the proxies
// started by this package use unless a test picks one: "loops" or
// "goroutines"; unset, the default.
const DataPathEnv = "LOCKPROXY_TEST_DATA_PATH"

// StartLockproxy serves b in process on a free 127.0.0.1 port and returns
// its address. When the test ends the proxy shuts down (in-flight replies
// are delivered) and b is closed; a failure of either fails the test.
// Without cfg.DataPath, the front end is DataPathEnv's.
func StartLockproxy(t testing.TB, cfg proxy.Config, b backend.Backend) string {
	t.Helper()
	if cfg.DataPath == "" {
		cfg.DataPath = os.Getenv(DataPathEnv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := proxy.New(cfg, b)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("lockproxy shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("lockproxy serve: %v", err)
		}
		if err := b.Close(ctx); err != nil {
			t.Errorf("lockproxy backend close: %v", err)
		}
	})
	return ln.Addr().String()
}

// StartMemoryProxy serves a fresh memory backend with the default proxy
// configuration and returns its address.
func StartMemoryProxy(t testing.TB) string {
	t.Helper()
	return StartLockproxy(t, proxy.Config{}, memory.New(memory.Config{}))
}

// StartQuorumProxy starts n real redis-servers and serves a quorum backend
// over them; it returns the proxy's address and the nodes.
func StartQuorumProxy(t testing.TB, n int) (string, []*Redis) {
	t.Helper()
	// A generous node timeout: the whole suite shares two cores under -race,
	// and a node that answers late must not turn a test's OK into TRYAGAIN.
	return StartQuorumProxyWith(t, n, time.Second, proxy.Config{BackendName: "quorum"})
}

// StartQuorumProxyWith is StartQuorumProxy with the node timeout and the
// proxy's configuration (its front end, for example) given.
func StartQuorumProxyWith(t testing.TB, n int, nodeTimeout time.Duration, cfg proxy.Config) (string, []*Redis) {
	t.Helper()
	nodes := make([]*Redis, n)
	addrs := make([]string, n)
	for i := range nodes {
		nodes[i] = StartRedis(t)
		addrs[i] = nodes[i].Addr
	}
	b, err := quorum.New(quorum.Config{Nodes: addrs, NodeTimeout: nodeTimeout})
	if err != nil {
		t.Fatalf("quorum: %v", err)
	}
	return StartLockproxy(t, cfg, b), nodes
}

// StartPostgresProxy serves a pgbridge backend of strategy (advisory or
// lease) on a fresh database of the shared test PostgreSQL; it returns the
// proxy's address and the database's DSN.
func StartPostgresProxy(t testing.TB, strategy string) (string, string) {
	t.Helper()
	dsn := SharedPostgres(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: PostgresRowDelay(t)})
	if err != nil {
		t.Fatalf("pgbridge: %v", err)
	}
	return StartLockproxy(t, proxy.Config{BackendName: "postgres"}, b), dsn
}

// StartMigratingProxy starts a legacy redis-server and serves inner
// wrapped by a migrate.Backend that takes every lock in both (docs/migration.md);
// it returns the proxy's address, the legacy Redis and the wrapper. The
// legacy timeout is generous (the suite shares two cores under -race) and
// the status is read every 50ms, so tests see a change quickly.
func StartMigratingProxy(t testing.TB, name string, inner backend.Backend) (string, *Redis, *migrate.Backend) {
	t.Helper()
	legacy := StartRedis(t)
	b, err := migrate.New(inner, migrate.Config{URL: "redis://" + legacy.Addr, Timeout: time.Second, StatusInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return StartLockproxy(t, proxy.Config{BackendName: name}, b), legacy, b
}
