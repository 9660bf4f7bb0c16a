package tests

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The scripts the model-based test sends: the owner-checked release and
// extend every lock library uses, a single-key acquire, and node redlock's
// multi-key acquire (refuse if any key exists, else SET each with PX).
const (
	modelRelease  = `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`
	modelExtend   = `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end`
	modelAcquire  = `if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then return 1 end return 0`
	modelAcquireN = `for _, k in ipairs(KEYS) do if redis.call('exists', k) == 1 then return 0 end end ` +
		`for _, k in ipairs(KEYS) do redis.call('set', k, ARGV[1], 'PX', ARGV[2]) end return #KEYS`
)

// modelScripts are the scripts EVALSHA may name: SCRIPT LOAD puts them in
// both servers' caches before any sequence runs.
var modelScripts = []string{modelRelease, modelExtend, modelAcquire, modelAcquireN}

// modelKeys are the logical keys of a healthy sequence; a run replaces
// each argument equal to one of them by its own prefixed name, so replays
// of a sequence never see each other's keys. modelValues repeat across
// clients on purpose: lock values are not always unique (npm redis-lock
// writes a deadline, hand-written locks write "1").
var (
	modelKeys   = []string{"k1", "k2", "k3", "k4"}
	modelValues = []string{"a", "b", "1"}
)

// A modelStep is what one client does in one step of a healthy sequence:
// one command, or MULTI … EXEC on its connection; wait is slept after it
// (past a short TTL, so that both servers have expired the key).
type modelStep struct {
	client int
	cmds   [][]string
	wait   time.Duration
}

func (s modelStep) String() string {
	var parts []string
	for _, c := range s.cmds {
		parts = append(parts, diffShow(c))
	}
	out := fmt.Sprintf("c%d: %s", s.client, strings.Join(parts, "; "))
	if s.wait > 0 {
		out += fmt.Sprintf(" (then wait %v)", s.wait)
	}
	return out
}

// modelShowSteps renders steps one per line, for failure messages.
func modelShowSteps(steps []modelStep) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "\n\t%s", s)
	}
	return b.String()
}

// modelGen draws the steps of one healthy sequence from seed.
//
// Long TTLs keep the replies free of timing races: a PX TTL is one of
// 30000, 60000 or 90000 plus the step's index, and an EX TTL one of 45, 75
// or 105 seconds, so two TTLs compared by PEXPIRE GT/LT differ by 15 s, or
// are of one bucket and then the later one is the larger (its step index
// is larger, and time only shortens the earlier one). A few steps set a
// TTL of 30 ms and wait 60 ms after both servers answered: expiry, checked
// after it has certainly happened on both (each expires at the millisecond
// on its own clock, counted from before its reply).
func modelGen(seed uint64, n, clients int) []modelStep {
	r := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	key := func() string { return modelKeys[r.IntN(len(modelKeys))] }
	val := func() string { return modelValues[r.IntN(len(modelValues))] }
	steps := make([]modelStep, 0, n)
	for i := range n {
		px := func() string { return strconv.Itoa([]int{30000, 60000, 90000}[r.IntN(3)] + i) }
		ex := func() string { return strconv.Itoa([]int{45, 75, 105}[r.IntN(3)]) }
		word := func(w string) string {
			if r.IntN(4) == 0 {
				return strings.ToLower(w)
			}
			return w
		}
		s := modelStep{client: r.IntN(clients)}
		one := func(args ...string) { s.cmds = [][]string{args} }
		k := key()
		switch w := r.IntN(100); {
		case w < 22:
			one(modelGenSet(r, k, val(), val(), px, ex, word)...)
		case w < 27:
			one("SETNX", k, val())
		case w < 37:
			one("GET", k)
		case w < 41:
			if r.IntN(2) == 0 {
				one("DEL", k)
			} else {
				one("DEL", k, key())
			}
		case w < 44:
			one("EXISTS", k, key())
		case w < 50:
			if r.IntN(3) == 0 {
				one("TTL", k)
			} else {
				one("PTTL", k)
			}
		case w < 56:
			c := []string{"PEXPIRE", k, px()}
			if r.IntN(5) == 0 {
				c = []string{"EXPIRE", k, ex()}
			}
			if cond := r.IntN(5); cond < 4 {
				c = append(c, word([]string{"NX", "XX", "GT", "LT"}[cond]))
			}
			one(c...)
		case w < 59:
			one("PERSIST", k)
		case w < 62:
			one("MSETNX", k, val(), key(), val())
		case w < 70:
			one(modelEval(r, modelRelease, []string{k}, val())...)
		case w < 75:
			one(modelEval(r, modelExtend, []string{k}, val(), px())...)
		case w < 82:
			one(modelEval(r, modelAcquire, []string{k}, val(), px())...)
		case w < 86:
			one(modelEval(r, modelAcquireN, []string{k, key()}, val(), px())...)
		case w < 91:
			s.cmds = [][]string{{"MULTI"}, {"SETNX", k, val()}, {"PEXPIRE", k, px()}, {"EXEC"}}
		case w < 98:
			if r.IntN(2) == 0 {
				one("DELIFEQ", k, val())
			} else {
				one("DELEX", k, word("IFEQ"), val())
			}
		default:
			// Expiry: a short TTL, then a wait well past it.
			switch r.IntN(3) {
			case 0:
				one("SET", k, val(), "PX", "30")
			case 1:
				one("SET", k, val(), "NX", "PX", "30")
			default:
				one("PEXPIRE", k, "30")
			}
			s.wait = 60 * time.Millisecond
		}
		steps = append(steps, s)
	}
	return steps
}

// modelGenSet draws a SET in one of its forms: a condition (NX, XX, IFEQ,
// IFNE or none), an expiry (PX, EX, KEEPTTL or none) and GET, in any order
// and case; now and then a combination Redis refuses, whose error text must
// be the same too.
func modelGenSet(r *rand.Rand, k, v, other string, px, ex func() string, word func(string) string) []string {
	var opts [][]string
	switch r.IntN(6) {
	case 0:
		opts = append(opts, []string{word("NX")})
	case 1:
		opts = append(opts, []string{word("XX")})
	case 2:
		opts = append(opts, []string{word("IFEQ"), other})
	case 3:
		opts = append(opts, []string{word("IFNE"), other})
	}
	switch r.IntN(5) {
	case 0, 1:
		opts = append(opts, []string{word("PX"), px()})
	case 2:
		opts = append(opts, []string{word("EX"), ex()})
	case 3:
		opts = append(opts, []string{word("KEEPTTL")})
	}
	if r.IntN(4) == 0 {
		opts = append(opts, []string{word("GET")})
	}
	if r.IntN(20) == 0 {
		opts = append(opts, [][]string{{"NX"}, {"XX"}, {"KEEPTTL"}, {"PX", "0"}}[r.IntN(4)])
	}
	r.Shuffle(len(opts), func(i, j int) { opts[i], opts[j] = opts[j], opts[i] })
	args := []string{"SET", k, v}
	for _, o := range opts {
		args = append(args, o...)
	}
	return args
}

// modelEval is EVAL or EVALSHA of src over keys with args.
func modelEval(r *rand.Rand, src string, keys []string, args ...string) []string {
	c := []string{"EVAL", src}
	if r.IntN(2) == 0 {
		c = []string{"EVALSHA", modelSHA1(src)}
	}
	c = append(c, strconv.Itoa(len(keys)))
	c = append(c, keys...)
	return append(c, args...)
}
