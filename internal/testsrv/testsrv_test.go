package testsrv

import (
	"github.com/jackc/pgx/v5"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartRedis(t *testing.T) {
	r := StartRedis(t)
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING %s: %v", r.Addr, err)
	}
	if want := "127.0.0.1:" + strconv.Itoa(r.Port); r.Addr != want {
		t.Errorf("Addr = %q; want %q", r.Addr, want)
	}
	if pid, err := serverPID(r.Addr); err != nil || pid != r.Pid() {
		t.Errorf("INFO process_id = %d, %v; want Pid() %d", pid, err, r.Pid())
	}

	r.Stop()
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		t.Fatalf("dial a paused server: %v", err)
	}
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write([]byte("PING\r\n"))
	if _, err := c.Read(make([]byte, 16)); err == nil {
		t.Error("a paused (SIGSTOP) server answered")
	}
	c.Close()
	r.Cont()
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING after SIGCONT: %v", err)
	}

	old := r.Pid()
	r.Restart()
	if r.Pid() == old {
		t.Error("Restart kept the old process")
	}
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}

	r.Stop()
	r.Kill() // a paused server must die too
	if err := ping(r.Addr); err == nil {
		t.Error("a killed server answered")
	}
	r.Kill() // killing twice is harmless
}

func TestStartRedisExtraArgs(t *testing.T) {
	r := StartRedis(t, "--maxmemory-policy", "noeviction", "--databases", "3")
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("SELECT 3\r\n"))
	line := make([]byte, 64)
	n, _ := c.Read(line)
	if got := string(line[:n]); !strings.HasPrefix(got, "-ERR DB index is out of range") {
		t.Errorf("SELECT 3 with --databases 3 = %q; want the out-of-range error", got)
	}
}

// A redis-server that cannot bind its port (another server has it) must be
// reported at once, and the other server must not be taken for it.
func TestStartRedisPortTaken(t *testing.T) {
	first := StartRedis(t)
	second := &Redis{Addr: first.Addr, Port: first.Port, t: t, bin: Need(t, "redis-server"), dir: t.TempDir(),
		args: []string{"--port", strconv.Itoa(first.Port), "--bind", "127.0.0.1", "--save", ""}}
	second.args = append(second.args, "--dir", second.dir)
	t.Cleanup(second.Kill)
	start := time.Now()
	err := second.start()
	if err == nil {
		t.Fatal("a redis-server on a taken port was reported ready")
	}
	if elapsed := time.Since(start); elapsed >= readyTimeout {
		t.Errorf("the failed start took %v; the process exit must end the wait", elapsed)
	}
	if !strings.Contains(err.Error(), "exited") {
		t.Errorf("error %q does not say the server exited", err)
	}
	if err := ping(first.Addr); err != nil {
		t.Errorf("the first server stopped answering: %v", err)
	}
}

// fakeTB records whether Need skipped or failed; both end the goroutine
// like the real methods do.
type fakeTB struct {
	testing.TB
	skipped, failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Skipf(string, ...any)  { f.skipped = true; runtime.Goexit() }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true; runtime.Goexit() }

func TestNeedMissingBinary(t *testing.T) {
	for _, tc := range []struct {
		name, ci     string
		skip, failed bool
	}{
		{name: "local", ci: "", skip: true},
		{name: "CI", ci: "true", failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			f := &fakeTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Need(f, "lockproxy-no-such-binary")
			}()
			<-done
			if f.skipped != tc.skip || f.failed != tc.failed {
				t.Errorf("Need of a missing binary: skipped %v, failed %v; want %v, %v", f.skipped, f.failed, tc.skip, tc.failed)
			}
		})
	}
	if p := Need(t, "redis-server"); p == "" {
		t.Error("Need(redis-server) returned an empty path")
	}
}

func TestStartMemoryProxy(t *testing.T) {
	addr := StartMemoryProxy(t)
	if err := ping(addr); err != nil {
		t.Fatalf("PING lockproxy: %v", err)
	}
}

func TestPostgres(t *testing.T) {
	pg := SharedPostgres(t)
	dsn := pg.NewDatabase(t)
	ctx := t.Context()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var id int64
	if err := c.QueryRow(ctx, "SELECT hashtextextended('lock:x', 0)").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id == 0 {
		t.Fatal("hashtextextended answered 0")
	}
}

func TestStartPostgresKillStart(t *testing.T) {
	pg := StartPostgres(t)
	pg.Kill()
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(t.Context(), pg.DSN)
	if err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	c.Close(t.Context())
}
