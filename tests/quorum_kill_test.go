package tests

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestQuorumNodeKilledMidRun: 8 workers take a lock through lockproxy on a
// quorum of three while one node is killed halfway; the counter proves
// exclusion held throughout and the two remaining nodes kept serving.
func TestQuorumNodeKilledMidRun(t *testing.T) {
	t.Parallel()
	addr, nodes := testsrv.StartQuorumProxy(t, 3)
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, MaxRetries: -1})
	defer rdb.Close()
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	const workers, iter = 8, 40
	var cycles atomic.Int64
	clientCounter(t, workers, iter, func(w int) (func() error, error) {
		if cycles.Add(1) == workers*iter/2 {
			nodes[1].Kill()
		}
		tok := fmt.Sprintf("w%d-%d", w, time.Now().UnixNano())
		for {
			ok, err := rdb.SetNX(ctx, "killed:counter", tok, 10*time.Second).Result()
			if err != nil {
				return nil, err
			}
			if ok {
				return func() error {
					n, err := release.Run(ctx, rdb, []string{"killed:counter"}, tok).Int()
					if err == nil && n != 1 {
						err = fmt.Errorf("release answered %d", n)
					}
					return err
				}, nil
			}
			time.Sleep(time.Millisecond) // the retry delay of a lock client
		}
	})
}
