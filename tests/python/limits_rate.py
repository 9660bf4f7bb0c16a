"""Drives Python `limits` (Debian's python3-limits) against a Redis-speaking
address: python3 limits_rate.py HOST:PORT PREFIX STRATEGY..., each STRATEGY
moving-window or fixed-window on limits' RedisStorage, all at once, each on
its key PREFIX+STRATEGY.

For each strategy WORKERS threads, each with a RedisStorage of its own (as
processes of one service would have), make ATTEMPTS hits each against a limit
of LIMIT per WINDOW_S seconds (a window the run never reaches the end of).
Prints one JSON object for tests/ratelimit_test.go, per strategy
{"admitted", "counts", "refused", "errors"}. counts are, for the fixed
window, the counter values the storage's increment answered to the admitted
hits; the moving window's script answers only yes or no, so there the list
the window keeps is read after the run and every entry must be the timestamp
of an admitted hit (an entry of a refused hit, or one missing, is reported in
errors) and counts stays empty.
"""

import json
import sys
import threading

from limits import RateLimitItemPerMinute, strategies
from limits.storage import RedisStorage

WORKERS = 8
ATTEMPTS = 4
LIMIT = 10
WINDOW_S = 120  # RateLimitItemPerMinute(LIMIT, 2)


def main():
    addr, prefix, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    runs = {name: Run(addr, name, prefix + name) for name in names}
    for r in runs.values():
        r.start()
    print(json.dumps({name: r.finish() for name, r in runs.items()}))


class Run:
    """Run is one strategy's workload: WORKERS threads hitting its key."""

    def __init__(self, addr, strategy, key):
        if strategy not in ("moving-window", "fixed-window"):
            raise SystemExit(f"unknown strategy {strategy}")
        self.addr, self.strategy, self.key = addr, strategy, key
        self.item = RateLimitItemPerMinute(LIMIT, WINDOW_S // 60)
        self.lock = threading.Lock()
        self.result = {"admitted": 0, "counts": [], "refused": 0, "errors": []}
        self.stamps = []  # the moving window's timestamps of admitted hits
        # The storages are made here, one after another: limits loads its
        # dependency (redis) lazily, and threads doing it at once see it
        # missing.
        storages = [RedisStorage(f"redis://{addr}/0", socket_timeout=30) for _ in range(WORKERS)]
        self.threads = [threading.Thread(target=self.worker, args=(s,)) for s in storages]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        """finish waits for the workers and returns the result."""
        for t in self.threads:
            t.join()
        if self.strategy == "moving-window":
            check_window(self.addr, self.item.key_for(self.key), self.stamps, self.result)
        self.result["counts"].sort()
        return self.result

    def worker(self, storage):
        counts = []  # what the storage answered to this worker's last hit
        if self.strategy == "fixed-window":
            limiter = strategies.FixedWindowRateLimiter(storage)
            incr = storage.incr

            def recording_incr(*args, **kwargs):
                n = incr(*args, **kwargs)
                counts.append(n)
                return n

            storage.incr = recording_incr
        else:
            limiter = strategies.MovingWindowRateLimiter(storage)
            acquire = storage.lua_acquire_window

            def recording_acquire(keys, args):
                ok = acquire(keys, args)
                counts.append(args[0] if ok else None)
                return ok

            storage.lua_acquire_window = recording_acquire
        for _ in range(ATTEMPTS):
            del counts[:]
            try:
                ok = limiter.hit(self.item, self.key)
            except Exception as e:  # noqa: BLE001 - reported, judged by the go test
                with self.lock:
                    self.result["errors"].append(f"{type(e).__name__}: {e}")
                continue
            with self.lock:
                if not ok:
                    self.result["refused"] += 1
                elif self.strategy == "fixed-window":
                    self.result["admitted"] += 1
                    self.result["counts"].append(counts[-1])
                else:
                    self.result["admitted"] += 1
                    self.stamps.append(counts[-1])
        storage.storage.close()


def check_window(addr, rkey, stamps, result):
    """check_window reads the window's list and reports in result's errors
    each entry that is no admitted hit's timestamp and each admitted hit
    whose timestamp is missing."""
    storage = RedisStorage(f"redis://{addr}/0", socket_timeout=30)
    entries = [float(e) for e in storage.storage.lrange(rkey, 0, -1)]
    storage.storage.close()
    left = sorted(stamps)
    for e in entries:
        match = next((s for s in left if abs(s - e) < 1e-5), None)
        if match is None:
            result["errors"].append(f"window entry {e!r} is no admitted hit's")
        else:
            left.remove(match)
    for s in left:
        result["errors"].append(f"admitted hit {s!r} is not in the window")


if __name__ == "__main__":
    main()
