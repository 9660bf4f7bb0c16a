package testsrv

import "time"

// Settled polls cond until it holds or 2s pass, and reports whether it
// held. A quorum operation answers once a majority agreed: what the other
// nodes do (a late write kept, a late write repaired) lands just after it.
func Settled(cond func() bool) bool {
	for end := time.Now().Add(2 * time.Second); ; {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling for the nodes that answer after the majority
	}
}
