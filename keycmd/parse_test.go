package keycmd

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseSet(t *testing.T) {
	tests := []struct {
		name  string
		opts  string
		flags int
		err   bool
	}{
		{"none", "", 0, false},
		{"nx px", "NX PX 100", setNX | setPX, false},
		{"redsync order", "ex 8 nx", setEX | setNX, false},
		{"xx px", "XX px 5", setXX | setPX, false},
		{"nx get", "nx GET", setNX | setGET, false},
		{"keepttl xx", "keepttl xx", setKEEPTTL | setXX, false},
		{"ifeq", "IFEQ tok PX 10", setIFEQ | setPX, false},
		{"ex twice", "EX 1 EX 2", setEX, false},
		{"nx xx", "NX XX", 0, true},
		{"ifeq nx", "IFEQ a NX", 0, true},
		{"ex px", "EX 1 PX 2", 0, true},
		{"keepttl px", "KEEPTTL PX 2", 0, true},
		{"px keepttl", "PX 2 KEEPTTL", 0, true},
		{"px no value", "PX", 0, true},
		{"ifeq no value", "IFEQ", 0, true},
		{"unknown", "NX FOO", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := [][]byte{[]byte("set"), []byte("k"), []byte("v")}
			for _, f := range strings.Fields(tt.opts) {
				args = append(args, []byte(f))
			}
			o, err := parseSet(args)
			if (err != nil) != tt.err {
				t.Fatalf("parseSet(%q) error = %v; want error %v", tt.opts, err, tt.err)
			}
			if err == nil && o.flags != tt.flags {
				t.Errorf("parseSet(%q) flags = %b; want %b", tt.opts, o.flags, tt.flags)
			}
		})
	}
}

// FuzzParseSet checks that any option list parses or fails with the syntax
// error, never panics, and that a parsed expire argument is one of the args.
func FuzzParseSet(f *testing.F) {
	for _, s := range []string{"NX PX 100", "ex 8 nx", "XX PX 5 GET", "KEEPTTL", "IFEQ a EX 1", "PX", "EXAT 1 PXAT 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, opts string) {
		args := [][]byte{[]byte("set"), []byte("k"), []byte("v")}
		for _, w := range strings.Fields(opts) {
			args = append(args, []byte(w))
		}
		o, err := parseSet(args)
		if err != nil {
			if !errors.Is(err, errSyntax) {
				t.Fatalf("parseSet(%q) = %v; want the syntax error", opts, err)
			}
			return
		}
		if o.flags&setNX != 0 && o.flags&setXX != 0 {
			t.Fatalf("parseSet(%q) accepted NX with XX", opts)
		}
		if o.expire != nil {
			found := false
			for _, a := range args[3:] {
				found = found || bytes.Equal(a, o.expire)
			}
			if !found {
				t.Fatalf("parseSet(%q) expire %q not among the args", opts, o.expire)
			}
		}
	})
}
