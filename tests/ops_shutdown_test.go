package tests

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// TestOpsShutdownUnderLoad sends SIGTERM to the real binary (quorum mode
// over three real redis-servers, so the effect of every command outlives
// the process) while 16 clients pipeline acquisitions of fresh keys, 8
// outstanding each. Afterwards every acquisition that took effect on a
// majority of nodes must have had its +OK delivered to the client that
// sent it, every +OK must be backed by a majority, and the process exits
// 0 after the drain.
func TestOpsShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	var nodes []*testsrv.Redis
	var addrs []string
	for range 3 {
		r := testsrv.StartRedis(t)
		nodes, addrs = append(nodes, r), append(addrs, r.Addr)
	}
	lp := testsrv.StartBinary(t, bin, "--backend", "quorum", "--quorum-nodes", strings.Join(addrs, ","),
		"--quorum-node-timeout", "2s", "--shutdown-timeout", "60s")

	const clients, window = 16, 8
	replies := make([]atomic.Int64, clients)
	sent := make([]atomic.Int64, clients)
	bad := make(chan string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		c, err := net.DialTimeout("tcp", lp.Addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		slots := make(chan struct{}, window)
		done := make(chan struct{})
		wg.Go(func() { // writer: fresh keys until the connection fails
			for n := 0; ; n++ {
				select {
				case slots <- struct{}{}:
				case <-done:
					return
				}
				if _, err := c.Write(encodeCommand([]string{"SET", fmt.Sprintf("sd:%d:%d", i, n), "tok", "NX", "PX", "600000"})); err != nil {
					return
				}
				sent[i].Add(1)
			}
		})
		wg.Go(func() { // reader: counts replies, each must be +OK, until EOF
			defer close(done)
			rd := bufio.NewReader(c)
			for {
				c.SetReadDeadline(time.Now().Add(120 * time.Second))
				line, err := rd.ReadString('\n')
				if err != nil {
					return
				}
				if line != "+OK\r\n" {
					bad <- fmt.Sprintf("client %d reply %d = %q", i, replies[i].Load(), line)
					return
				}
				replies[i].Add(1)
				<-slots
			}
		})
	}
	var low int64
	if !wait.Poll(120*time.Second, func() bool {
		low = int64(1 << 62)
		for i := range replies {
			low = min(low, replies[i].Load())
		}
		return low >= 50
	}) {
		t.Fatalf("load did not reach 50 replies per client (lowest %d)\n%s", low, lp.Logs())
	}
	if err := lp.Terminate(90 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM under load: %v\n%s", err, lp.Logs())
	}
	wg.Wait()
	close(bad)
	for b := range bad {
		t.Error(b)
	}

	// Which acquisitions took effect: keys present on a majority of nodes.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	votes := map[string]int{}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		keys, err := c.Keys(ctx, "sd:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			votes[k]++
		}
	}
	var total, totalSent int64
	for i := range clients {
		got := replies[i].Load()
		total += got
		totalSent += sent[i].Load()
		for n := int64(0); n < got; n++ {
			if votes["sd:"+strconv.Itoa(i)+":"+strconv.FormatInt(n, 10)] < 2 {
				t.Errorf("client %d got +OK for key %d, which no majority holds", i, n)
			}
		}
		for k, v := range votes {
			var ci, n int64
			if _, err := fmt.Sscanf(k, "sd:%d:%d", &ci, &n); err != nil || ci != int64(i) || v < 2 {
				continue
			}
			if n >= got {
				t.Errorf("client %d: key %d was acquired on %d nodes but its reply never arrived (%d replies)", i, n, v, got)
			}
		}
	}
	t.Logf("%d commands sent, %d answered before the connections closed", totalSent, total)
	if !strings.Contains(lp.Logs(), "stopped") {
		t.Errorf("no clean stop in the log:\n%s", lp.Logs())
	}
}
