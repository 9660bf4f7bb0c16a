// Command lockproxy serves distributed locks to unmodified Redis clients.
// README.md lists its flags and backends; docs/operations.md says how to
// run it in production.
package main
