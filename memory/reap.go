package memory

import (
	"time"

	"github.com/lockproxy/lockproxy/proxy/keycmd"
)

// Reaping follows Redis's active expiry: per tick, sample reapSample keys
// of each shard and database and delete the expired ones; while more than a
// quarter of a sample had expired, sample again, at most reapRounds times.
// Each round holds one shard's mutex for a few microseconds.
const (
	reapSample = 20
	reapRounds = 16
)

func (b *Backend) reap(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.reapOnce()
		}
	}
}

// reapOnce runs one tick of the reaper and returns how many keys it
// deleted.
func (b *Backend) reapOnce() int {
	total := 0
	for i := range b.shards {
		sh := &b.shards[i]
		for db := range keycmd.Databases {
			for range reapRounds {
				b.mu.RLock()
				sh.mu.Lock()
				seen, expired := sh.sample(db, reapSample, now())
				sh.mu.Unlock()
				b.mu.RUnlock()
				total += expired
				if seen == 0 || expired*4 <= seen {
					break
				}
			}
		}
	}
	return total
}
