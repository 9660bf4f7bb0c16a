// Package tests holds lockproxy's black-box tests: the differential test
// against a real redis-server, the real client libraries of the README's
// compatibility matrix, the load tool's smoke run, and the repository
// checks (repo_test.go). Everything here talks to real processes
// started by internal/testsrv.
package tests
