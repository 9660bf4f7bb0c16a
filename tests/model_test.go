package tests

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// modelCorpus lists seeds that failed once; TestModelHealthy always runs
// them besides its fixed seeds and one drawn afresh. One seed per line,
// "#" starts a comment.
const modelCorpus = "testdata/model/seeds"

// Sizes of the healthy phase: sequences of modelSteps steps by
// modelClients clients, over the fixed seeds 1…modelSeeds, the corpus
// and one random seed. At most modelShrinks failures are shrunk to a
// minimal sequence (each shrink replays the sequence many times).
const (
	modelSeeds   = 16
	modelSteps   = 80
	modelClients = 3
	modelShrinks = 3
)

// TestModelHealthy sends the same random command sequences, one command at
// a time in the same order, to lockproxy on the memory backend (the
// reference of docs/architecture.md) and on the quorum backend over three healthy
// redis-servers: every reply must be the same bytes, remaining times
// within a tolerance. A failing sequence is shrunk to a minimal one, which
// the failure shows with both replies.
func TestModelHealthy(t *testing.T) {
	t.Parallel()
	memAddr := testsrv.StartMemoryProxy(t)
	quoAddr, _ := testsrv.StartQuorumProxy(t, 3)
	for _, addr := range []string{memAddr, quoAddr} {
		c := dialRESP(t, addr)
		for _, src := range modelScripts {
			if r, err := c.do("SCRIPT", "LOAD", src); err != nil || r != "$40\r\n"+modelSHA1(src)+"\r\n" {
				t.Fatalf("%s SCRIPT LOAD = %q, %v", addr, r, err)
			}
		}
	}
	random := uint64(time.Now().UnixNano())
	t.Logf("random seed %d (add it to %s if it fails)", random, modelCorpus)
	seeds := []uint64{random}
	for s := range uint64(modelSeeds) {
		seeds = append(seeds, s+1)
	}
	seeds = append(seeds, modelLoadCorpus(t)...)
	var runs atomic.Int64
	run := func(steps []modelStep) (*modelMismatch, error) {
		return modelReplay(memAddr, quoAddr, fmt.Sprintf("m%d:", runs.Add(1)), steps)
	}
	shrinks := 0
	for _, seed := range seeds {
		steps := modelGen(seed, modelSteps, modelClients)
		m, err := run(steps)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if m == nil {
			continue
		}
		if shrinks >= modelShrinks {
			t.Errorf("seed %d: step %d %s\nmemory:  %q\nquorum:  %q", seed, m.step, steps[m.step], m.mem, m.quo)
			continue
		}
		shrinks++
		first := m.step + 1
		min, m := modelShrink(t, run, steps[:first], m)
		t.Errorf("seed %d: %d steps (shrunk from %d) give different replies:%s\nto the last one\n\tmemory: %q\n\tquorum: %q",
			seed, len(min), first, modelShowSteps(min), m.mem, m.quo)
	}
}

// modelMismatch is the first reply that differed: the step, and the
// replies of each server to it (MULTI … EXEC's joined).
type modelMismatch struct {
	step     int
	mem, quo string
}

// modelReplay runs steps on new connections to both servers (one pair per
// client), with keys named prefix+key. It returns the first step whose
// replies differ, or nil; an error is a failure to talk to a server.
func modelReplay(memAddr, quoAddr, prefix string, steps []modelStep) (*modelMismatch, error) {
	conns := map[int][2]*respConn{}
	defer func() {
		for _, p := range conns {
			p[0].c.Close()
			p[1].c.Close()
		}
	}()
	for i, s := range steps {
		p, ok := conns[s.client]
		if !ok {
			for j, addr := range []string{memAddr, quoAddr} {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					return nil, err
				}
				p[j] = &respConn{c: c, rd: bufio.NewReader(c)}
			}
			conns[s.client] = p
		}
		var mem, quo []string
		same := true
		for _, cmd := range s.cmds {
			args := slices.Clone(cmd)
			for j, a := range args {
				if slices.Contains(modelKeys, a) {
					args[j] = prefix + a
				}
			}
			m, err := p[0].do(args...)
			if err != nil {
				return nil, fmt.Errorf("memory %s: %w", diffShow(args), err)
			}
			q, err := p[1].do(args...)
			if err != nil {
				return nil, fmt.Errorf("quorum %s: %w", diffShow(args), err)
			}
			mem, quo = append(mem, m), append(quo, q)
			same = same && modelSameReply(cmd[0], m, q)
		}
		if !same {
			return &modelMismatch{step: i, mem: strings.Join(mem, ""), quo: strings.Join(quo, "")}, nil
		}
		time.Sleep(s.wait) // past a short TTL on both servers
	}
	return nil, nil
}

// modelSameReply compares two replies to cmd: byte for byte, except that
// remaining times (PTTL, TTL) must be of one class — -2, -1, or positive
// and within 3 s of each other (the two servers set them moments apart on
// a loaded machine; TTLs of different steps differ by 15 s or more).
func modelSameReply(cmd, m, q string) bool {
	if m == q {
		return true
	}
	tol := int64(3000)
	switch strings.ToUpper(cmd) {
	case "TTL":
		tol = 3
	case "PTTL":
	default:
		return false
	}
	mv, err1 := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(m, ":"), "\r\n"), 10, 64)
	qv, err2 := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(q, ":"), "\r\n"), 10, 64)
	return err1 == nil && err2 == nil && mv > 0 && qv > 0 && max(mv-qv, qv-mv) <= tol
}

// modelShrink makes a failing sequence smaller while it still fails
// (any mismatch counts): it drops chunks of steps, halving the chunk size
// down to single steps, and cuts the sequence after its first mismatch.
// It stops after 200 replays and returns the smallest failing sequence
// found and its mismatch.
func modelShrink(t *testing.T, run func([]modelStep) (*modelMismatch, error), steps []modelStep, m *modelMismatch) ([]modelStep, *modelMismatch) {
	t.Helper()
	budget := 200
	for chunk := len(steps) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(steps) && budget > 0; {
			try := append(slices.Clone(steps[:i]), steps[i+chunk:]...)
			budget--
			got, err := run(try)
			if err != nil {
				t.Fatalf("shrink: %v", err)
			}
			if got != nil {
				steps, m = try[:got.step+1], got
				continue
			}
			i += chunk
		}
	}
	return steps, m
}

// modelLoadCorpus reads the seeds of modelCorpus.
func modelLoadCorpus(t *testing.T) []uint64 {
	t.Helper()
	data, err := os.ReadFile(modelCorpus)
	if err != nil {
		t.Fatalf("model corpus: %v", err)
	}
	var seeds []uint64
	for line := range strings.SplitSeq(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		s, err := strconv.ParseUint(line, 10, 64)
		if err != nil {
			t.Fatalf("model corpus: %q: %v", line, err)
		}
		seeds = append(seeds, s)
	}
	return seeds
}

// modelSHA1 is the SHA1 EVALSHA names src by.
func modelSHA1(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}
