package quorum

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the commands that concurrent clients issue to one node in
// shared pipelines: each of its loops takes whatever is queued (up to
// maxBatch requests) and sends it in one write, reading the replies in one
// go. A node costs one round trip per batch instead of one per client
// command. Requests are independent: one proxy never has two operations on
// the same key in flight (lockKeys), so their order within a batch does not
// matter.
type batcher struct {
	c       *redis.Client
	reqs    chan *batchReq
	timeout time.Duration
}

// batchReq is one operation's commands, sent back to back in one batch.
type batchReq struct {
	cmds []redis.Cmder
	done chan struct{}
}

const (
	maxBatch     = 128
	batchLoops   = 4 // batches in flight per node and database
	batchBacklog = 1024
)

func newBatcher(c *redis.Client, timeout time.Duration, stop <-chan struct{}) *batcher {
	bt := &batcher{c: c, reqs: make(chan *batchReq, batchBacklog), timeout: timeout}
	for range batchLoops {
		go bt.loop(stop)
	}
	return bt
}

// do sends cmds in the next batch and waits for their replies or ctx.
func (bt *batcher) do(ctx context.Context, cmds ...redis.Cmder) error {
	r := &batchReq{cmds: cmds, done: make(chan struct{})}
	select {
	case bt.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		for _, c := range cmds {
			if err := c.Err(); err != nil && err != redis.Nil {
				return err
			}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (bt *batcher) loop(stop <-chan struct{}) {
	for {
		var first *batchReq
		select {
		case <-stop:
			return
		case first = <-bt.reqs:
		}
		batch := []*batchReq{first}
	fill:
		for len(batch) < maxBatch {
			select {
			case r := <-bt.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), bt.timeout)
		pipe := bt.c.Pipeline()
		for _, r := range batch {
			for _, c := range r.cmds {
				pipe.Process(ctx, c)
			}
		}
		pipe.Exec(ctx) // each command carries its own error
		cancel()
		for _, r := range batch {
			close(r.done)
		}
	}
}
