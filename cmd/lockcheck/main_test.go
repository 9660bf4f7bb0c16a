package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv"
)

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-client", "nope"},
		{"-workers", "0"},
		{"-ttl", "1ms"},
		{"-bogus"},
		{"extra"},
		{"-duration", "0"},
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), args, &out, &errb); code != exitUsage {
			t.Errorf("lockcheck %q = exit %d; want %d (stderr %q)", args, code, exitUsage, errb.String())
		}
		if errb.Len() == 0 {
			t.Errorf("lockcheck %q printed no error", args)
		}
	}
}

func TestRunAgainstRedis(t *testing.T) {
	r := testsrv.StartRedis(t)
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"-addr", r.Addr, "-workers", "4", "-keys", "1", "-duration", "300ms", "-client", "redsync"}, &out, &errb)
	if code != exitOK || !strings.Contains(out.String(), "0 violations") {
		t.Errorf("exit %d; want 0\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}

// TestExitOnViolation: against a store that forgets its locks (FLUSHALL in
// a loop) lockcheck prints the violations and exits 1.
func TestExitOnViolation(t *testing.T) {
	r := testsrv.StartRedis(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		c := redis.NewClient(lockcheck.ClientOptions(r.Addr))
		defer c.Close()
		for ctx.Err() == nil {
			c.FlushAll(ctx)
		}
	})
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"-addr", r.Addr, "-workers", "8", "-keys", "1", "-duration", "500ms"}, &out, &errb)
	cancel()
	wg.Wait()
	if code != exitViolation || !strings.Contains(out.String(), "VIOLATION") {
		t.Errorf("exit %d; want %d with violations\nstdout %s\nstderr %s", code, exitViolation, out.String(), errb.String())
	}
}
