package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

const releaseSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

type config struct {
	addr, compare, password string
	client                  string
	clients, keys, resp     int
	pipeline                int
	duration, ttl           time.Duration
	json                    bool
}

// Result is one measured run.
type Result struct {
	Addr         string  `json:"addr"`
	Clients      int     `json:"clients"`
	Seconds      float64 `json:"seconds"`
	Cycles       int64   `json:"cycles"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	Contended    int64   `json:"contended"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	Acquire      Pcts    `json:"acquire_ms"`
	Release      Pcts    `json:"release_ms"`
}

// Pcts are latency percentiles in milliseconds.
type Pcts struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var c config
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:6380", "address to measure")
	fs.StringVar(&c.compare, "compare", "", "a second address to measure right after: a real redis-server, redsync:N1,N2,N3 (client-side Redlock), pgx:DSN (raw advisory-lock loop) or pgx-lease:DSN (raw lease-table loop)")
	fs.StringVar(&c.password, "password", "", "AUTH password")
	fs.StringVar(&c.client, "client", "go-redis", "the lock client on a Redis address: go-redis (SET NX PX, release by EVALSHA), redislock (bsm/redislock's Obtain and Release, its own scripts), lean (SET NX PX and EVALSHA on lockbench's own RESP client: a cheap load) or lean-eval (the same with EVAL)")
	fs.IntVar(&c.pipeline, "pipeline", 1, "lean: acquires each client sends at once (then their releases at once)")
	fs.IntVar(&c.clients, "clients", 50, "concurrent clients, one connection each")
	fs.IntVar(&c.keys, "keys", 0, "distinct lock keys shared by all clients (0: one key per client, no contention)")
	fs.IntVar(&c.resp, "resp", 2, "protocol: 2 or 3")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to measure each address")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "lock TTL")
	fs.BoolVar(&c.json, "json", false, "print JSON lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.clients <= 0 || c.duration <= 0 || c.ttl < time.Millisecond {
		return errors.New("-clients, -duration and -ttl must be positive")
	}
	switch c.client {
	case "go-redis", "redislock", "lean", "lean-eval":
	default:
		return fmt.Errorf("-client %q: use go-redis, redislock, lean or lean-eval", c.client)
	}
	if c.pipeline < 1 {
		return errors.New("-pipeline must be at least 1")
	}
	if c.resp != 2 && c.resp != 3 {
		return fmt.Errorf("-resp %d: use 2 or 3", c.resp)
	}
	addrs := []string{c.addr}
	if c.compare != "" {
		addrs = append(addrs, c.compare)
	}
	var results []Result
	for _, a := range addrs {
		r, err := measure(ctx, c, a)
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		results = append(results, r)
		print(out, c.json, r)
	}
	if len(results) == 2 && results[1].CyclesPerSec > 0 {
		ratio := results[0].CyclesPerSec / results[1].CyclesPerSec
		if c.json {
			json.NewEncoder(out).Encode(map[string]any{"ratio": ratio, "of": results[0].Addr, "to": results[1].Addr,
				"acquire_p99_ratio": results[0].Acquire.P99 / results[1].Acquire.P99})
		} else {
			fmt.Fprintf(out, "ratio %s / %s: %.2fx cycles/s, acquire p99 %.2fx\n", results[0].Addr, results[1].Addr,
				ratio, results[0].Acquire.P99/results[1].Acquire.P99)
		}
	}
	return nil
}

func print(out io.Writer, asJSON bool, r Result) {
	if asJSON {
		json.NewEncoder(out).Encode(r)
		return
	}
	fmt.Fprintf(out, "%s: %d clients, %.0f cycles/s (%d cycles in %.1fs), contended %d, errors %d\n",
		r.Addr, r.Clients, r.CyclesPerSec, r.Cycles, r.Seconds, r.Contended, r.Errors)
	fmt.Fprintf(out, "  acquire ms p50 %.3f p99 %.3f p99.9 %.3f | release ms p50 %.3f p99 %.3f p99.9 %.3f\n",
		r.Acquire.P50, r.Acquire.P99, r.Acquire.P999, r.Release.P50, r.Release.P99, r.Release.P999)
	if r.FirstError != "" {
		fmt.Fprintf(out, "  first error: %s\n", r.FirstError)
	}
}

func measure(ctx context.Context, c config, addr string) (Result, error) {
	if strings.HasPrefix(addr, "pgx:") || strings.HasPrefix(addr, "pgx-lease:") {
		return measurePgx(ctx, c, addr)
	}
	if nodes, ok := strings.CutPrefix(addr, "redsync:"); ok {
		return measureRedsync(ctx, c, addr, strings.Split(nodes, ","))
	}
	if c.client == "lean" || c.client == "lean-eval" {
		return measureLean(ctx, c, addr, c.client == "lean-eval")
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, Password: c.password, Protocol: c.resp, PoolSize: c.clients, MinIdleConns: c.clients,
		MaxRetries: -1, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return Result{}, err
	}
	if c.client == "redislock" {
		return measureRedislock(ctx, c, addr, rdb)
	}
	release := redis.NewScript(releaseSrc)
	if err := release.Load(ctx, rdb).Err(); err != nil {
		return Result{}, err
	}

	token := "lockbench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return loop(ctx, c, addr, func(ctx context.Context, i int, key string) (bool, func() error, error) {
		tok := token + "-" + strconv.Itoa(i)
		ok, err := rdb.SetNX(ctx, key, tok, c.ttl).Result()
		return ok, func() error { return release.Run(ctx, rdb, []string{key}, tok).Err() }, err
	})
}

// measureRedsync runs the same cycle with client-side Redlock.
func measureRedsync(ctx context.Context, c config, addr string, nodes []string) (Result, error) {
	var pools []redsyncredis.Pool
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n, Password: c.password, PoolSize: c.clients, MinIdleConns: c.clients})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return Result{}, fmt.Errorf("%s: %w", n, err)
		}
		pools = append(pools, goredis.NewPool(rdb))
	}
	rs := redsync.New(pools...)
	return loop(ctx, c, addr, func(ctx context.Context, i int, key string) (bool, func() error, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(c.ttl), redsync.WithTries(1))
		err := m.LockContext(ctx)
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return false, nil, nil
		}
		return err == nil, func() error {
			if ok, err := m.UnlockContext(ctx); !ok {
				return fmt.Errorf("unlock not confirmed: %v", err)
			}
			return nil
		}, err
	})
}

// measureRedislock runs the cycle with bsm/redislock: Obtain (its acquire
// script by EVALSHA) and Release (its release script), one try each.
func measureRedislock(ctx context.Context, c config, addr string, rdb *redis.Client) (Result, error) {
	locker := redislock.New(rdb)
	return loop(ctx, c, addr, func(ctx context.Context, i int, key string) (bool, func() error, error) {
		l, err := locker.Obtain(ctx, key, c.ttl, nil)
		if errors.Is(err, redislock.ErrNotObtained) {
			return false, nil, nil
		}
		if err != nil {
			return false, nil, err
		}
		return true, func() error { return l.Release(ctx) }, nil
	})
}

// acquireFunc tries to take key for client i; on success it returns the
// release to run.
type acquireFunc func(ctx context.Context, i int, key string) (ok bool, release func() error, err error)

// loop runs the clients' lock cycles for the configured duration.
func loop(ctx context.Context, c config, addr string, acquire acquireFunc) (Result, error) {
	t := newTally(c.clients)
	cycles, contended, fail, acq, rel := &t.cycles, &t.contended, t.fail, t.acq, t.rel
	runCtx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c.clients {
		wg.Go(func() {
			for n := 0; runCtx.Err() == nil; n++ {
				key := "lockbench:" + strconv.Itoa(i)
				if c.keys > 0 {
					key = "lockbench:shared:" + strconv.Itoa((i+n)%c.keys)
				}
				t0 := time.Now()
				ok, release, err := acquire(ctx, i, key)
				acq[i] = append(acq[i], time.Since(t0))
				if err != nil {
					fail(err)
					continue
				}
				if !ok {
					contended.Add(1)
					continue
				}
				t1 := time.Now()
				err = release()
				rel[i] = append(rel[i], time.Since(t1))
				if err != nil {
					fail(err)
					continue
				}
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	return t.result(addr, c.clients, start), nil
}

// tally counts a run's outcomes; acq and rel are each client's latencies
// (one slice per client: no lock).
type tally struct {
	cycles, contended, errs atomic.Int64
	firstErr                atomic.Value
	acq, rel                [][]time.Duration
}

func newTally(clients int) *tally {
	return &tally{acq: make([][]time.Duration, clients), rel: make([][]time.Duration, clients)}
}

// fail counts an error, keeping the first's text.
func (t *tally) fail(err error) {
	t.errs.Add(1)
	t.firstErr.CompareAndSwap(nil, err.Error())
}

// result is the run's Result, the run having started at start.
func (t *tally) result(addr string, clients int, start time.Time) Result {
	secs := time.Since(start).Seconds()
	r := Result{Addr: addr, Clients: clients, Seconds: secs, Cycles: t.cycles.Load(),
		CyclesPerSec: float64(t.cycles.Load()) / secs, Contended: t.contended.Load(), Errors: t.errs.Load(),
		Acquire: percentiles(t.acq), Release: percentiles(t.rel)}
	if e, ok := t.firstErr.Load().(string); ok {
		r.FirstError = e
	}
	return r
}

func percentiles(per [][]time.Duration) Pcts {
	var all []time.Duration
	for _, p := range per {
		all = append(all, p...)
	}
	if len(all) == 0 {
		return Pcts{}
	}
	slices.Sort(all)
	at := func(q float64) float64 {
		return float64(all[min(len(all)-1, int(q*float64(len(all))))]) / float64(time.Millisecond)
	}
	return Pcts{P50: at(0.50), P99: at(0.99), P999: at(0.999)}
}
