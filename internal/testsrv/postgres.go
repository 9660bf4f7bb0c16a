package testsrv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGEnv names the environment variable that points the tests at an
// existing PostgreSQL instead of a throwaway cluster: a DSN whose user may
// CREATE DATABASE. Tests that restart or kill the server always start a
// cluster of their own.
const PGEnv = "LOCKPROXY_TEST_PG_DSN"

// PGRowDelayEnv names the environment variable that sets the lease row
// delay (pgbridge.Config.LeaseRowDelay) of the tests that do not choose
// one: e.g. 0s to write every row at once. Unset, they run with
// lockproxy's default, DefaultPGRowDelay.
const PGRowDelayEnv = "LOCKPROXY_TEST_PG_ROW_DELAY"

// DefaultPGRowDelay is lockproxy's default postgres-lease-row-delay
// (cmd/lockproxy's config test checks that they agree).
const DefaultPGRowDelay = 200 * time.Millisecond

// PostgresRowDelay is the lease row delay of LOCKPROXY_TEST_PG_ROW_DELAY,
// or lockproxy's default (DefaultPGRowDelay); 0s is a row at once.
func PostgresRowDelay(t testing.TB) time.Duration {
	t.Helper()
	v := os.Getenv(PGRowDelayEnv)
	if v == "" {
		return DefaultPGRowDelay
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q is not a duration of 0 or more", PGRowDelayEnv, v)
	}
	return d
}

// Postgres is a PostgreSQL server for tests: a throwaway cluster started by
// StartPostgres, or the server of LOCKPROXY_TEST_PG_DSN.
type Postgres struct {
	DSN  string // the maintenance database (postgres) on this server
	Port int

	t       testing.TB
	bin     string // directory of postgres, initdb
	dir     string
	cred    *syscall.Credential
	extra   []string // more server arguments (TLS)
	mu      sync.Mutex
	proc    *process
	dbCount atomic.Int64
}

var shared struct {
	once sync.Once
	pg   *Postgres
	err  error
}

// SharedPostgres returns one PostgreSQL server for the whole test process:
// the one of LOCKPROXY_TEST_PG_DSN, or a throwaway cluster started on first
// use, which ends with the test process. Give each test its own database
// with NewDatabase: advisory locks are per database.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	if dsn := os.Getenv(PGEnv); dsn != "" {
		return &Postgres{DSN: dsn, t: t}
	}
	bin := pgBin(t)
	shared.once.Do(func() {
		shared.pg, shared.err = startPostgres(bin, nil)
		if shared.err == nil {
			shared.pg.cleanAfterExit()
		}
	})
	if shared.err != nil {
		t.Fatalf("start PostgreSQL: %v", shared.err)
	}
	return shared.pg
}

// StartPostgres starts a throwaway PostgreSQL cluster of the test's own
// (for tests that stop, kill or restart it) and removes it when the test
// ends.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return startOwn(t, nil)
}

// StartPostgresTLS starts a cluster of the test's own that accepts TLS
// with f's server certificate (clients verify it against f.CA).
func StartPostgresTLS(t testing.TB, f *TLSFiles) *Postgres {
	t.Helper()
	return startOwn(t, f)
}

// StartPostgresWith starts a cluster of the test's own with more server
// settings (name=value, e.g. max_locks_per_transaction=10), for tests
// that need a configuration other than the default.
func StartPostgresWith(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	var args []string
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	return startOwn(t, nil, args...)
}

func startOwn(t testing.TB, f *TLSFiles, extra ...string) *Postgres {
	t.Helper()
	p, err := startPostgres(pgBin(t), f, extra...)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(p.remove)
	return p
}

// pgBin finds the newest installed PostgreSQL server binaries.
func pgBin(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	if len(dirs) > 0 {
		return filepath.Dir(dirs[0])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	Need(t, "initdb") // skips or, in CI, fails
	return ""
}

func pgMajor(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// startPostgres runs initdb into a new directory and starts the server on a
// free loopback port. initdb refuses to run as root, so as root the cluster
// belongs to the postgres user.
func startPostgres(bin string, tlsFiles *TLSFiles, extra ...string) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "lockproxy-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{bin: bin, dir: dir, extra: extra}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := p.command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if tlsFiles != nil {
		// PostgreSQL reads them as its own user and wants the key private.
		for _, c := range [][2]string{{tlsFiles.Cert, "server.crt"}, {tlsFiles.Key, "server.key"}} {
			data, err := os.ReadFile(c[0])
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, c[1]), data, 0o600)
			}
			if err == nil && p.cred != nil {
				err = os.Chown(filepath.Join(dir, c[1]), int(p.cred.Uid), int(p.cred.Gid))
			}
			if err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
		}
		p.extra = append(p.extra, "-c", "ssl=on", "-c", "ssl_cert_file="+filepath.Join(dir, "server.crt"),
			"-c", "ssl_key_file="+filepath.Join(dir, "server.key"))
	}
	var lastErr error
	for range startAttempts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p.Port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		p.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
		if lastErr = p.Start(); lastErr == nil {
			return p, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGQUIT}
	return cmd
}

// Start starts the cluster's server (again) on its port and waits until it
// accepts connections. Tests call it after Kill or Stop.
func (p *Postgres) Start() error {
	if p.bin == "" {
		return errors.New("not a cluster of the tests' own")
	}
	return p.startBy(time.Now().Add(30 * time.Second))
}

func (p *Postgres) startBy(deadline time.Time) error {
	logStart := 0
	if fi, err := os.Stat(filepath.Join(p.dir, "postgres.log")); err == nil {
		logStart = int(fi.Size())
	}
	logf, err := os.OpenFile(filepath.Join(p.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// fsync off: a test cluster needs no durability, and the tests must
	// not wait on the disk. Everything else is PostgreSQL's default.
	cmd := p.command(filepath.Join(p.bin, "postgres"), append([]string{"-D", filepath.Join(p.dir, "data"),
		"-p", strconv.Itoa(p.Port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + p.dir,
		"-c", "fsync=off", "-c", "max_connections=300", "-c", "log_min_messages=warning"}, p.extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	proc := &process{cmd: cmd, log: logf, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(proc.exited)
	}()
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, p.DSN)
		if err == nil {
			c.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-proc.exited:
			log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
			if len(log) >= logStart && bytes.Contains(log[logStart:], []byte("pre-existing shared memory block")) && time.Now().Before(deadline) {
				// A backend of the previous server has not exited yet
				// (one forked after signal noted the children): try again.
				time.Sleep(100 * time.Millisecond)
				return p.startBy(deadline)
			}
			return fmt.Errorf("postgres exited (%v); log:\n%s", cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("postgres did not accept connections within 30s: %w", err)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness
	}
}

// Kill ends the server at once with SIGKILL, as a crash would (every
// session and advisory lock is gone), and waits until it has exited.
func (p *Postgres) Kill() { p.signal(syscall.SIGKILL) }

// Stop shuts the server down fast (SIGINT: sessions are terminated) and
// waits until it has exited.
func (p *Postgres) Stop() { p.signal(syscall.SIGINT) }

// Immediate shuts the server down as `pg_ctl stop -m immediate` does
// (SIGQUIT: every process quits at once, without a checkpoint) and waits
// until it has exited. The next Start runs crash recovery, which empties
// UNLOGGED tables; committed data survives.
func (p *Postgres) Immediate() { p.signal(syscall.SIGQUIT) }

func (p *Postgres) signal(s syscall.Signal) {
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if proc == nil {
		return
	}
	// The postmaster's children outlive it for a moment (a SIGKILLed
	// postmaster cannot tell them to go), and a new postmaster refuses to
	// start while one of them still holds the old shared memory ("pre-
	// existing shared memory block … is still in use"): note them now, by
	// parent, and wait for each after the postmaster.
	children := childPids(proc.cmd.Process.Pid)
	proc.cmd.Process.Signal(s)
	<-proc.exited
	if s != syscall.SIGKILL && s != syscall.SIGQUIT {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range children {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL) // a crash takes them all
			}
			time.Sleep(10 * time.Millisecond) // polling: they are not our children
		}
	}
	os.Remove(filepath.Join(p.dir, "data", "postmaster.pid"))
}

// childPids lists the processes whose parent is pid (the postmaster's
// backends and auxiliary processes).
func childPids(pid int) []int {
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// cleanAfterExit leaves a watchdog that stops the shared cluster and
// removes its directory once the test process has exited (the server also
// gets SIGQUIT from the kernel then, as its parent-death signal).
func (p *Postgres) cleanAfterExit() {
	script := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 1; done; kill -QUIT $(head -1 %s) 2>/dev/null; sleep 2; rm -rf %s`,
		os.Getpid(), filepath.Join(p.dir, "data", "postmaster.pid"), p.dir)
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err == nil {
		go cmd.Wait()
	}
}

func (p *Postgres) remove() {
	p.Stop()
	os.RemoveAll(p.dir)
}

// NewDatabase creates an empty database for the test and returns its DSN;
// the database is dropped (with force) when the test ends.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		t.Fatalf("connect to %s: %v", p.DSN, err)
	}
	defer c.Close(ctx)
	name := fmt.Sprintf("lockproxy_test_%d_%d", os.Getpid(), p.dbCount.Add(1))
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, p.DSN); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	return withDatabase(p.DSN, name)
}

// withDatabase returns dsn (a URL or keyword/value string) naming database
// name instead.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name // a later keyword wins
}
