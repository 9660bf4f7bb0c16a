package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
)

// pprofEnv names the address of an opt-in net/http/pprof listener, for
// profiling lockproxy under a benchmark (tests/bench/postgres.sh sets it
// with PPROF=1). It is test tooling, not configuration: the TEST_ prefix
// keeps it out of the LOCKPROXY_* variables that config checks, and the
// profiles never sit on admin-listen, which operators may expose.
const pprofEnv = envPrefix + "TEST_PPROF_LISTEN"

// startPprof serves the pprof handlers on the address env names, if any,
// and returns a func that stops it.
func startPprof(env []string) (func(), error) {
	var addr string
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == pprofEnv {
			addr = v
		}
	}
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	return func() { hs.Close() }, nil
}
