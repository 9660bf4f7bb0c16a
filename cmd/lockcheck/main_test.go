package main

import (
	"bytes"
	"strings"
	"testing"

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
