package faults

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// restartable is a lockproxy process that a fault may kill and start again
// on the same address.
type restartable struct {
	mu sync.Mutex
	b  *testsrv.Binary
}

func (r *restartable) kill(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	killBinary(t, r.b)
}

func (r *restartable) start(t *testing.T, nodeAddrs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.b = startQuorumBinary(t, nodeAddrs, "--listen", r.b.Addr, "--admin-listen", r.b.Admin)
}

// TestKillLockproxy: lockproxy itself is killed with SIGKILL mid-run and
// started again on the same port, over and over; the locks it granted live
// on in the nodes, and the new process must respect them.
func TestKillLockproxy(t *testing.T) {
	nodes := quorumNodes(t, 3)
	lp := &restartable{b: startQuorumBinary(t, addrs(nodes))}
	cycles := 0
	runNemesis(t, nemesis{Name: "kill -9 lockproxy, restart on the same port", Backend: "quorum", Client: "fence-read", Addrs: []string{lp.b.Addr}},
		func(ctx context.Context) {
			for pause(ctx, 600*time.Millisecond) {
				lp.kill(t)
				pause(ctx, 50*time.Millisecond)
				lp.start(t, addrs(nodes))
				cycles++
			}
		})
	faultRan(t, cycles)
}

// TestTwoLockproxies: two lockproxy instances in front of the same nodes,
// half the workers on each; one is killed mid-run and started again later.
// The two split votes between them (clients see nil or TRYAGAIN) but must
// never both grant one lock.
func TestTwoLockproxies(t *testing.T) {
	nodes := quorumNodes(t, 3)
	a := startQuorumBinary(t, addrs(nodes))
	b := &restartable{b: startQuorumBinary(t, addrs(nodes))}
	d := runDuration(t)
	cycles := 0
	runNemesis(t, nemesis{Name: "two lockproxies, one killed and restarted", Backend: "quorum", Client: "fence-read", Addrs: []string{a.Addr, b.b.Addr}},
		func(ctx context.Context) {
			if !pause(ctx, d/3) {
				return
			}
			b.kill(t)
			pause(ctx, d/3)
			b.start(t, addrs(nodes))
			cycles++
		})
	faultRan(t, cycles)
}

// TestPauseLockproxy: lockproxy itself is frozen with SIGSTOP for 300ms
// (a long GC pause or a descheduled VM) and continued, over and over:
// requests queue in its sockets and are served late; replies written before
// the pause reach clients after it.
func TestPauseLockproxy(t *testing.T) {
	nodes := quorumNodes(t, 3)
	lp := startQuorumBinary(t, addrs(nodes))
	cycles := 0
	runNemesis(t, nemesis{Name: "SIGSTOP lockproxy (300ms), SIGCONT", Backend: "quorum", Client: "goredis", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			defer syscall.Kill(lp.Pid(), syscall.SIGCONT)
			for pause(ctx, 400*time.Millisecond) {
				if err := syscall.Kill(lp.Pid(), syscall.SIGSTOP); err != nil {
					t.Errorf("SIGSTOP lockproxy: %v", err)
					return
				}
				pause(ctx, 300*time.Millisecond)
				if err := syscall.Kill(lp.Pid(), syscall.SIGCONT); err != nil {
					t.Errorf("SIGCONT lockproxy: %v", err)
					return
				}
				cycles++
			}
		})
	faultRan(t, cycles)
}
