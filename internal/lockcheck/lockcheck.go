package lockcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Locker is one worker's lock client (one per worker, not shared). It need not
// be safe for concurrent use.
type Locker interface {
	// Acquire tries once; (false, nil) means contended (held by another), an
	// error means the outcome is unknown or failed.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// Release gives up the lock key if it still holds token.
	Release(ctx context.Context, key, token string) error
}

// FencedLocker is a Locker whose grants come with their fencing token
// (docs/fencing.md): Run records it, and Check reports grants whose fences
// do not grow.
type FencedLocker interface {
	Locker
	// AcquireFenced is Acquire that also returns the grant's fence.
	AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, uint64, error)
}

// Config describes one checked run. Zero fields take the defaults noted.
type Config struct {
	Workers int    // concurrent workers, each with its own Locker; default: 8
	Keys    int    // keys contended on; default: 2
	Prefix  string // key names are Prefix+"0" … Prefix+strconv.Itoa(Keys-1); default: "lockcheck:"

	TTL  time.Duration // lock TTL; default: 500ms
	Hold time.Duration // how long a holder keeps a lock, drawn uniformly from [Hold/2, 3·Hold/2]; default: 5ms
	// Backoff is the pause after a contended or failed attempt, drawn
	// uniformly from [0, 2·Backoff]; default: 1ms.
	Backoff time.Duration
	// OpTimeout bounds each Acquire and Release call; default: TTL.
	OpTimeout time.Duration

	Duration    time.Duration // how long to run; zero means until MaxAttempts or ctx ends
	MaxAttempts int64         // stop after this many acquire attempts in all; zero means no limit

	// NewLocker returns worker's Locker. It is called once per worker before
	// the run starts; a Locker that implements io.Closer is closed at the end.
	NewLocker func(worker int) Locker

	Seed uint64 // seeds the hold and backoff draws; zero picks one
}

// Drift is the allowance for clock drift and processing taken off the end of
// every grant's TTL bound: TTL/100 + 2ms, as in Redlock.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Keys == 0 {
		c.Keys = 2
	}
	if c.Prefix == "" {
		c.Prefix = "lockcheck:"
	}
	if c.TTL == 0 {
		c.TTL = 500 * time.Millisecond
	}
	if c.Hold == 0 {
		c.Hold = 5 * time.Millisecond
	}
	if c.Backoff == 0 {
		c.Backoff = time.Millisecond
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = c.TTL
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// Validate reports the first problem with c (after defaults).
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("lockcheck: workers must be at least 1, got %d", c.Workers)
	case c.Keys < 1:
		return fmt.Errorf("lockcheck: keys must be at least 1, got %d", c.Keys)
	case c.TTL <= Drift(c.TTL):
		return fmt.Errorf("lockcheck: ttl %v leaves nothing after drift %v", c.TTL, Drift(c.TTL))
	case c.Hold < 0 || c.Backoff < 0 || c.OpTimeout < 0 || c.Duration < 0 || c.MaxAttempts < 0:
		return errors.New("lockcheck: durations and max attempts must not be negative")
	case c.Duration == 0 && c.MaxAttempts == 0:
		return errors.New("lockcheck: set a duration or max attempts")
	case c.NewLocker == nil:
		return errors.New("lockcheck: NewLocker is nil")
	}
	return nil
}

// Interval is one grant as the client saw it, in time since the run started.
// End ≤ Start means the grant arrived too late to be used.
type Interval struct {
	Key    string
	Worker int
	Token  string
	Sent   time.Duration // acquire request sent
	Start  time.Duration // acquire reply received
	End    time.Duration // min(release sent, acquire sent + TTL − drift)
	Fence  uint64        // the grant's fence (FencedLocker); 0: none
}

// Run drives the workload described by cfg and checks its history. It
// returns an error only for an invalid cfg; failures of the lock service are
// in the Report. Cancelling ctx ends the run early (holders still release);
// the history up to then is checked.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	r := &run{runID: strconv.FormatUint(rand.Uint64(), 36), cfg: cfg, errs: newErrCounts(), relErrs: newErrCounts()}
	lockers := make([]Locker, cfg.Workers)
	for i := range lockers {
		lockers[i] = cfg.NewLocker(i)
	}
	histories := make([][]Interval, cfg.Workers)
	r.start = time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Workers {
		wg.Go(func() {
			w := worker{run: r, id: i, l: lockers[i], rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
			histories[i] = w.loop(ctx)
		})
	}
	wg.Wait()
	elapsed := time.Since(r.start)
	for _, l := range lockers {
		if c, ok := l.(io.Closer); ok {
			_ = c.Close()
		}
	}
	var all []Interval
	for _, h := range histories {
		all = append(all, h...)
	}
	rep := &Report{
		Workers: cfg.Workers, Keys: cfg.Keys, TTL: cfg.TTL, Elapsed: elapsed,
		Attempts: r.attempts.Load(), Grants: r.grants.Load(), Contended: r.contended.Load(), Late: r.late.Load(),
		Errors: r.errs.counts(), ErrorSamples: r.errs.samples(), ReleaseErrors: r.relErrs.counts(),
		Intervals: all,
	}
	rep.Violations, rep.WorstOverlap = Check(all)
	if _, ok := lockers[0].(FencedLocker); ok {
		rep.Fenced = true
		rep.FenceViolations = CheckFences(all)
	}
	return rep, nil
}

// run is the state the workers of one Run share.
type run struct {
	runID                             string // in every token: runs against one server never share a token
	cfg                               Config
	start                             time.Time
	attempts, grants, contended, late atomic.Int64
	errs, relErrs                     *errCounts
}

// worker is one contending client: it acquires a random key, holds it for a
// while, releases it, and records what it believed it held.
type worker struct {
	*run
	id  int
	l   Locker
	rng *rand.Rand
	seq int
}

func (w *worker) loop(ctx context.Context) []Interval {
	var hist []Interval
	for ctx.Err() == nil {
		if n := w.attempts.Add(1); w.cfg.MaxAttempts > 0 && n > w.cfg.MaxAttempts {
			w.attempts.Add(-1)
			break
		}
		if iv, ok := w.attempt(ctx); ok {
			hist = append(hist, iv)
		}
	}
	return hist
}

// attempt makes one acquire attempt and, when granted, holds and releases
// the lock. It reports the grant's interval.
func (w *worker) attempt(ctx context.Context) (Interval, bool) {
	key := w.cfg.Prefix + strconv.Itoa(w.rng.IntN(w.cfg.Keys))
	w.seq++
	token := "w" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.seq) + "-" + w.runID
	opCtx := context.WithoutCancel(ctx) // the run's end must not cut an operation in half

	sent := time.Since(w.start)
	actx, cancel := context.WithTimeout(opCtx, w.cfg.OpTimeout)
	var fence uint64
	var ok bool
	var err error
	if fl, is := w.l.(FencedLocker); is {
		ok, fence, err = fl.AcquireFenced(actx, key, token, w.cfg.TTL)
	} else {
		ok, err = w.l.Acquire(actx, key, token, w.cfg.TTL)
	}
	cancel()
	got := time.Since(w.start)
	switch {
	case err != nil:
		w.errs.add(err)
		w.release(opCtx, key, token) // the outcome is unknown: free it if it was set
		w.pause(ctx, w.cfg.Backoff)
		return Interval{}, false
	case !ok:
		w.contended.Add(1)
		w.pause(ctx, w.cfg.Backoff)
		return Interval{}, false
	}
	w.grants.Add(1)
	bound := sent + w.cfg.TTL - Drift(w.cfg.TTL)
	if got >= bound {
		w.late.Add(1)
	} else {
		w.hold(ctx)
	}
	end := min(time.Since(w.start), bound)
	w.release(opCtx, key, token)
	return Interval{Key: key, Worker: w.id, Token: token, Sent: sent, Start: got, End: end, Fence: fence}, true
}

func (w *worker) release(ctx context.Context, key, token string) {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	if err := w.l.Release(rctx, key, token); err != nil {
		w.relErrs.add(err)
	}
}

// hold keeps the lock for a draw from [Hold/2, 3·Hold/2]: the workload's
// critical section, not a synchronisation.
func (w *worker) hold(ctx context.Context) {
	h := w.cfg.Hold / 2
	if w.cfg.Hold > 0 {
		h += time.Duration(w.rng.Int64N(int64(w.cfg.Hold) + 1))
	}
	w.wait(ctx, h)
}

func (w *worker) pause(ctx context.Context, d time.Duration) {
	if d > 0 {
		w.wait(ctx, time.Duration(w.rng.Int64N(2*int64(d)+1)))
	}
}

func (w *worker) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
