package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
)

// Exit codes.
const (
	exitOK        = 0
	exitViolation = 1
	exitUsage     = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a command-line problem.
var errUsage = errors.New("usage")

// run parses args, runs the check and prints the report to stdout; it
// returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, client, addr, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "lockcheck:", err)
		}
		return exitUsage
	}
	cfg.NewLocker = func(int) lockcheck.Locker {
		l, _ := lockcheck.NewLocker(client, addr) // the name was checked in parse
		return l
	}
	rep, err := lockcheck.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "lockcheck:", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "lockcheck %s via %s: %s", addr, client, rep)
	if len(rep.Violations)+len(rep.FenceViolations) > 0 {
		return exitViolation
	}
	return exitOK
}

func parse(args []string, stderr io.Writer) (lockcheck.Config, string, string, error) {
	var cfg lockcheck.Config
	fs := flag.NewFlagSet("lockcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:6380", "RESP address of the lock service")
	client := fs.String("client", "goredis", "client library: "+strings.Join(lockcheck.Clients, ", "))
	fs.IntVar(&cfg.Workers, "workers", 16, "concurrent workers, one client each")
	fs.IntVar(&cfg.Keys, "keys", 4, "keys contended on")
	fs.StringVar(&cfg.Prefix, "prefix", "lockcheck:", "key name prefix")
	fs.DurationVar(&cfg.TTL, "ttl", 500*time.Millisecond, "lock TTL")
	fs.DurationVar(&cfg.Hold, "hold", 5*time.Millisecond, "mean time a holder keeps a lock")
	fs.DurationVar(&cfg.Backoff, "backoff", time.Millisecond, "mean pause after a contended or failed attempt")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to run (0: until -max-attempts)")
	fs.Int64Var(&cfg.MaxAttempts, "max-attempts", 0, "stop after this many attempts (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return cfg, "", "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", "", fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if !slices.Contains(lockcheck.Clients, *client) {
		return cfg, "", "", fmt.Errorf("%w: unknown -client %q (want %s)", errUsage, *client, strings.Join(lockcheck.Clients, ", "))
	}
	if cfg.Workers < 1 || cfg.Keys < 1 || cfg.TTL <= 0 {
		return cfg, "", "", fmt.Errorf("%w: -workers, -keys and -ttl must be positive", errUsage)
	}
	return cfg, *client, *addr, nil
}
