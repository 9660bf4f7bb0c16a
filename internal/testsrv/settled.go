package testsrv

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// Settled polls cond until it holds or 2s pass, and reports whether it
// held. A quorum operation answers once a majority agreed: what the other
// nodes do (a late write kept, a late write repaired) lands just after it.
func Settled(cond func() bool) bool { return wait.Poll(2*time.Second, cond) }
