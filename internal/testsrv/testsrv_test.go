package testsrv

import (
	"net"
	"testing"
	"time"
)

func TestStartRedis(t *testing.T) {
	r := StartRedis(t)
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING %s: %v", r.Addr, err)
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
	r.Kill()
	if err := ping(r.Addr); err == nil {
		t.Error("a killed server answered")
	}
}

func TestStartMemoryProxy(t *testing.T) {
	addr := StartMemoryProxy(t)
	if err := ping(addr); err != nil {
		t.Fatalf("PING lockproxy: %v", err)
	}
}
