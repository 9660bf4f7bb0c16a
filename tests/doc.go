// Package tests holds lockproxy's black-box tests: the differential test
// against a real redis-server, the real client libraries of SPEC §5, and
// the load tool's smoke run. Everything here talks to real processes
// started by internal/testsrv.
package tests
