package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/reclaim"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// goRedisLog carries go-redis's own messages (a node that refuses
// connections, on every health check) into lockproxy's log at debug
// level: the quorum monitor reports a node's failures itself, and
// go-redis's plain lines would break --log-format json. go-redis has one
// logger per process, so main installs this once and run points it at its
// logger.
type goRedisLog struct{ l atomic.Pointer[slog.Logger] }

func (g *goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	if l := g.l.Load(); l != nil && l.Enabled(ctx, slog.LevelDebug) {
		l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
	}
}

var redisLog goRedisLog

func main() {
	redis.SetLogger(&redisLog)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errInvalidConfig):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "lockproxy:", err)
		os.Exit(1)
	}
}

var errInvalidConfig = errors.New("invalid configuration")

// run is lockproxy: it serves until ctx ends, then drains and returns.
func run(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	cfg, opts, err := load(args, env, stderr)
	var probs problems
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case errors.As(err, &probs) && cfg.Listen != "": // values that did not parse kept their defaults: report the rest too
	case err != nil:
		fmt.Fprintln(stderr, err)
		return errInvalidConfig
	}
	if opts.version {
		printVersion(stdout)
		return nil
	}
	if opts.healthcheck && probs == nil { // needs only admin-listen: the server's own problems are the server's
		return healthcheck(ctx, cfg.AdminListen)
	}
	if probs = append(probs, cfg.validate()...); len(probs) > 0 {
		fmt.Fprintln(stderr, probs)
		return errInvalidConfig
	}
	if opts.checkConfig {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	log := newLogger(cfg, stderr)
	redisLog.l.Store(log)
	stopPprof, err := startPprof(env)
	if err != nil {
		return fmt.Errorf("%s: %w", pprofEnv, err)
	}
	defer stopPprof()
	scriptLimit, _ := parseDuration(cfg.ScriptTimeLimit)
	drain, _ := parseDuration(cfg.ShutdownTimeout)
	idle, _ := parseDuration(cfg.IdleTimeout)

	// Large frees (a big value, a flush, a big request) are given back to
	// the system at once, not at the runtime's leisure (internal/reclaim).
	rec := reclaim.New(50*time.Millisecond, time.Second)
	defer rec.Close()
	b, warnings, err := newBackend(cfg, scriptLimit, log, rec)
	if err != nil {
		return err
	}
	if cfg.MigrateFrom != "" {
		if b, err = withMigration(b, cfg, scriptLimit, log); err != nil {
			return err
		}
		warnings = append(warnings, "migrating: every lock is also taken in "+migrate.MaskURL(cfg.MigrateFrom)+"; remove migrate-from once no client uses it directly (INFO lockproxy_migration_legacy_clients)")
	}
	defer closeBackend(b, drain, log)
	warnings = append(warnings, cfg.warnings()...)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	up, _ := cfg.upstream() // validated
	tlsCfg, err := cfg.serverTLS()
	if err != nil {
		ln.Close()
		return fmt.Errorf("tls-cert-file: %w", err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	reg := newRegistry(b)
	srv := proxy.New(proxy.Config{
		RequirePass: cfg.RequirePass, Users: cfg.Users.proxyUsers(), NoFlush: !cfg.AllowFlush, MaxClients: cfg.MaxClients, MaxRequestBytes: cfg.MaxRequestBytes,
		MaxScriptBytes: cfg.MaxScriptBytes, IdleTimeout: idle, Passthrough: up, BackendName: cfg.Backend, Logger: log, Registerer: reg,
		DataPath: cfg.dataPath(), Instance: cfg.instanceName(), Freed: rec.Freed,
	}, b)
	stopAdmin, err := serveAdmin(cfg.AdminListen, srv, reg)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopAdmin()
	log.Info("lockproxy started", startFields(cfg, ln.Addr().String(), tlsCfg != nil, warnings)...)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight commands", "timeout", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain incomplete", "err", err)
	}
	if err := <-served; err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// closeBackend closes b within d: a backend stuck behind a hung operation
// must not keep the process from ending after SIGTERM (its goroutines end
// with the process).
func closeBackend(b backend.Backend, d time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan struct{})
	go func() {
		b.Close(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn("the backend did not close in time: exiting without it", "timeout", d.String())
	}
}

// newRegistry is the process's one metrics registry: Go's and the
// process's collectors, the build, and the backend's own state (postgres:
// sessions, leases, pool) where it has one.
func newRegistry(b backend.Backend) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	if c, ok := b.(prometheus.Collector); ok {
		reg.MustRegister(c)
	}
	return reg
}

// serveAdmin serves the admin port (metrics, health, the locks and the
// status page) on addr until the returned stop; an empty addr serves
// nothing.
func serveAdmin(addr string, srv *proxy.Server, reg *prometheus.Registry) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	h := proxy.NewAdmin(srv, proxy.AdminConfig{Gatherer: reg, Version: versionString()})
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	return func() {
		hs.Close()
		h.Close()
	}, nil
}

// withMigration wraps b in the migration backend for cfg.MigrateFrom; on
// an error it closes b. go-redis's own lines (one per failed dial of the
// legacy Redis) reach the log through redisLog, at debug: failures are
// counted in lockproxy_migration_legacy_errors_total and answered TRYAGAIN.
func withMigration(b backend.Backend, cfg Config, scriptLimit time.Duration, log *slog.Logger) (backend.Backend, error) {
	mt, _ := parseDuration(cfg.MigrateTimeout)
	m, err := migrate.New(b, migrate.Config{URL: cfg.MigrateFrom, Timeout: mt, Logger: log,
		Runner: luascripts.New(luascripts.Config{TimeLimit: scriptLimit, MemoryLimit: cfg.scriptMemory(), Logger: log})})
	if err != nil {
		b.Close(context.Background())
		return nil, err
	}
	return m, nil
}

// startFields are the fields of the "lockproxy started" line: where it
// listens and what it serves, secrets masked.
func startFields(cfg Config, addr string, tlsOn bool, warnings []string) []any {
	start := []any{"backend", cfg.Backend, "listen", addr, "admin", cfg.AdminListen}
	switch cfg.Backend {
	case "quorum":
		start = append(start, "nodes", cfg.nodes())
	case "postgres":
		start = append(start, "postgres_strategy", cfg.PostgresStrategy, "postgres_dsn", maskDSN(cfg.PostgresDSN))
	}
	return append(start, "requirepass", cfg.RequirePass != "", "users", cfg.Users.names(),
		"passthrough", maskURL(cfg.Passthrough), "migrate_from", migrate.MaskURL(cfg.MigrateFrom), "tls", tlsOn, "client_certs", cfg.TLSCACertFile != "", "data_path", cfg.dataPath(),
		"warnings", strings.Join(warnings, "; "))
}

// warnings are the start line's warnings about the configuration itself.
func (c Config) warnings() []string {
	var w []string
	if c.open() {
		w = append(w, "protected-mode is off: clients from the network are served without a password")
	}
	return w
}

// newBackend builds the configured backend and the safety warnings the
// start line reports.
func newBackend(cfg Config, scriptLimit time.Duration, log *slog.Logger, rec *reclaim.Reclaimer) (backend.Backend, []string, error) {
	switch cfg.Backend {
	case "quorum":
		timeout, _ := parseDuration(cfg.QuorumTimeout)
		maxTTL, _ := parseDuration(cfg.QuorumMaxTTL)
		nodes := cfg.nodes()
		qc := quorum.Config{Nodes: nodes, NodeTimeout: timeout, MaxTTL: maxTTL, Logger: log,
			Runner: luascripts.New(luascripts.Config{TimeLimit: scriptLimit, Logger: log}), ScriptTimeLimit: scriptLimit}
		tc, err := cfg.quorumTLS()
		if err != nil {
			return nil, nil, fmt.Errorf("quorum-tls: %w", err)
		}
		if tc != nil {
			qc.Dialer = tlsDialer(tc)
		}
		b, err := quorum.New(qc)
		if err != nil {
			return nil, nil, err
		}
		warnings := b.Warnings()
		if len(nodes) < 3 {
			warnings = append(warnings, fmt.Sprintf("%d quorum nodes: losing one loses the majority; use 3 or more", len(nodes)))
		}
		return b, warnings, nil
	case "postgres":
		return newPostgres(cfg, luascripts.New(luascripts.Config{TimeLimit: scriptLimit, MemoryLimit: cfg.scriptMemory(), Logger: log}), log)
	}
	runner := luascripts.New(luascripts.Config{TimeLimit: scriptLimit, MemoryLimit: cfg.scriptMemory(), Logger: log})
	return memory.New(memory.Config{Runner: runner, Freed: rec.Freed}), []string{"memory backend: single node, not HA; locks end with the process"}, nil
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel))
	o := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// healthcheck asks a running lockproxy's admin endpoint whether it is
// alive (for container health checks, where there is no curl).
func healthcheck(ctx context.Context, admin string) error {
	if admin == "" {
		return errors.New("healthcheck: admin-listen is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s", resp.Status)
	}
	return nil
}

// scriptMemory is script-memory-limit in bytes (checked by validation).
func (c Config) scriptMemory() int64 {
	n, _ := parseMemory(c.ScriptMemory)
	return n
}
