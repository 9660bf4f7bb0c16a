package tests

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestOpsIdleTimeout runs the real binary with --idle-timeout 2s: a client
// that sends nothing is disconnected (EOF, as from Redis's "timeout"), one
// that keeps talking keeps its connection (same CLIENT ID throughout), and
// a lockproxy with the default (0) leaves an idle client alone.
func TestOpsIdleTimeout(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	withIdle := testsrv.StartBinary(t, bin, "--idle-timeout", "2s")
	never := testsrv.StartBinary(t, bin)

	idleConn := func(addr string) (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rd := bufio.NewReader(c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("PING\r\n"))
		if line, err := rd.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("PING = %q, %v", line, err)
		}
		return c, rd
	}
	idle, idleRd := idleConn(withIdle.Addr)
	kept, keptRd := idleConn(never.Addr)

	active := redis.NewClient(&redis.Options{Addr: withIdle.Addr, PoolSize: 1, MaxRetries: -1})
	defer active.Close()
	ctx := t.Context()
	id, err := active.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}

	// The idle client is closed: a generous deadline, the server decides.
	closed := make(chan error, 1)
	go func() {
		idle.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, err := idleRd.ReadByte()
		closed <- err
	}()
	start := time.Now()
	var closedAfter time.Duration
	for closedAfter == 0 || time.Since(start) < 6*time.Second {
		select {
		case err := <-closed:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("idle client: read = %v; want EOF (closed by the server)", err)
			}
			closedAfter = time.Since(start)
		default:
		}
		if err := active.Ping(ctx).Err(); err != nil {
			t.Fatalf("the active client lost its connection: %v", err)
		}
		if time.Since(start) > 90*time.Second {
			t.Fatal("the idle client was never disconnected")
		}
		time.Sleep(100 * time.Millisecond) // the active client's pace: far below the 2s timeout
	}
	if info, err := active.Info(ctx).Result(); err != nil || !strings.Contains(info, "lockproxy_idle_timeout_seconds:2\r\n") {
		t.Errorf("INFO lacks lockproxy_idle_timeout_seconds:2 (%v)", err)
	}
	if got, err := active.ClientID(ctx).Result(); err != nil || got != id {
		t.Errorf("active client: CLIENT ID = %d, %v; want %d (the same connection)", got, err, id)
	}
	if closedAfter < time.Second {
		t.Errorf("the idle client was closed after %v, before its 2s idle timeout", closedAfter)
	}

	// idle-timeout 0: the client idle as long as the other was is still served.
	kept.SetDeadline(time.Now().Add(10 * time.Second))
	kept.Write([]byte("PING\r\n"))
	if line, err := keptRd.ReadString('\n'); line != "+PONG\r\n" {
		t.Errorf("idle client with idle-timeout 0: PING after %v = %q, %v; want +PONG", time.Since(start), line, err)
	}
}
