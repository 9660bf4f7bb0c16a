// Package backend is the neutral leaf between lockproxy's RESP front end and
// its storage backends, in the way database/sql/driver sits between
// database/sql and the drivers.
//
// It owns these and imports nothing but the standard library:
//
//   - the Backend interface every store implements (memory, quorum,
//     pgbridge), with its parameter and result types;
//   - Value, one Redis reply independent of the wire protocol (RESP2 or
//     RESP3 is chosen when the proxy writes it);
//   - the exact Redis reply texts (replies.go), so a client that matches on
//     an error string sees what a real Redis 7 would send;
//   - Databases, the number of databases every layer serves (0 to 15).
//
// Two leaves hang below it: package model is the lock model as pure logic
// (the rules memory and pgbridge run on), and package backendtest is the
// conformance suite every Backend passes.
//
// The lock model (docs/architecture.md): a key holds at most one token and
// an optional expiry. Absent and expired keys are the same thing to every
// caller. A Backend never reports an outcome it has not established: no
// false OK, no false nil.
package backend
