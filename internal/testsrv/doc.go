// Package testsrv starts the real servers lockproxy's tests talk to:
// redis-server processes on free loopback ports, a throwaway PostgreSQL
// cluster (or the server of LOCKPROXY_TEST_PG_DSN, a database per test),
// and lockproxy itself in process on each backend. It is imported only by
// tests, and never touches a Redis or PostgreSQL it did not start.
//
// When a needed binary is missing, a test is skipped locally and fails when
// the CI environment variable is set: a green CI must never hide a missing
// install step.
package testsrv
