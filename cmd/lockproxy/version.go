package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/proxy"
)

// version is set at build time for a release binary:
//
//	go build -ldflags "-X main.version=v1.4.0" ./cmd/lockproxy
//
// Empty, the version the Go toolchain recorded stands (proxy.BuildVersion):
// the module version for go install, a pseudo-version with the revision
// for go build in a checkout.
var version string

// versionString is the version lockproxy reports everywhere: --version,
// lockproxy_build_info, the status page.
func versionString() string {
	if version != "" {
		return version
	}
	return proxy.BuildVersion()
}

// printVersion is --version's output.
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "lockproxy %s (%s, %s/%s)\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildInfo is the lockproxy_build_info gauge: always 1, its labels the
// version and the Go version, for dashboards that show what runs where.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "lockproxy_build_info",
		Help:        "The running lockproxy's version and Go version (always 1).",
		ConstLabels: prometheus.Labels{"version": versionString(), "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
