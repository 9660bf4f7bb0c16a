// Package testsrv starts the real servers lockproxy's tests talk to: a
// redis-server process on a free loopback port, and lockproxy itself in
// process. It is imported only by tests.
//
// When a needed binary is missing, a test is skipped locally and fails when
// the CI environment variable is set: a green CI must never hide a missing
// install step.
package testsrv
