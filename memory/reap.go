package memory

import (
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Reaping follows Redis's active expiry: per tick, sample reapSample keys
// of each shard and database and delete the expired ones; while more than a
// quarter of a sample had expired, sample again, at most reapRounds times.
// Each round holds one shard's mutex (under the read side of the store
// lock) for a few microseconds, so the reaper never pauses the store: at
// most reapSample*reapRounds keys per shard and database per tick, and a
// map that emptied after a peak is rebuilt smaller (model.Space.Shrink).
//
// Keys that are expired but not yet sampled are dead to every command
// (the model judges each key by its deadline); the reaper only bounds the
// memory they hold, to about a third more than the live keys need.
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
		for db := range backend.Databases {
			for round := 0; ; round++ {
				b.mu.RLock()
				sh.mu.Lock()
				seen, expired := sh.sp.Sample(db, reapSample, time.Now().UnixMilli())
				again := seen > 0 && expired*4 > seen && round+1 < reapRounds
				if !again {
					sh.sp.Shrink(db)
				}
				sh.mu.Unlock()
				b.mu.RUnlock()
				total += expired
				if !again {
					break
				}
			}
		}
	}
	return total
}
