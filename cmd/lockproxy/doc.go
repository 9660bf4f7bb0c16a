// Command lockproxy serves distributed locks to unmodified Redis clients.
// See the README for its flags, its configuration file and its backends.
package main
