"""Drives Python `limits` (Debian's python3-limits) against a Redis-speaking
address: python3 limits_rate.py HOST:PORT STRATEGY KEY, STRATEGY being
moving-window or fixed-window, each on limits' RedisStorage.

WORKERS threads, each with a RedisStorage of its own (as processes of one
service would have), make ATTEMPTS hits each against a limit of LIMIT per
WINDOW_S seconds (a window the run never reaches the end of). Prints one JSON
line for tests/ratelimit_test.go: {"admitted", "counts", "refused",
"errors"}. counts are, for the fixed window, the counter values the storage's
increment answered to the admitted hits; the moving window's script answers
only yes or no, so there the list the window keeps is read after the run and
every entry must be the timestamp of an admitted hit (an entry of a refused
hit, or one missing, is reported in errors) and counts stays empty.
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
    addr, strategy, key = sys.argv[1], sys.argv[2], sys.argv[3]
    item = RateLimitItemPerMinute(LIMIT, WINDOW_S // 60)
    lock = threading.Lock()
    result = {"admitted": 0, "counts": [], "refused": 0, "errors": []}
    stamps = []  # the moving window's timestamps of admitted hits

    def worker(storage):
        counts = []
        if strategy == "fixed-window":
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
                ok = limiter.hit(item, key)
            except Exception as e:  # noqa: BLE001 - reported, judged by the go test
                with lock:
                    result["errors"].append(f"{type(e).__name__}: {e}")
                continue
            with lock:
                if not ok:
                    result["refused"] += 1
                    continue
                result["admitted"] += 1
                if strategy == "fixed-window":
                    result["counts"].append(counts[-1])
                else:
                    stamps.append(counts[-1])
        storage.storage.close()

    # The storages are made here, one after another: limits loads its
    # dependency (redis) lazily, and threads doing it at once see it missing.
    storages = [RedisStorage(f"redis://{addr}/0", socket_timeout=30) for _ in range(WORKERS)]
    threads = [threading.Thread(target=worker, args=(s,)) for s in storages]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if strategy == "moving-window":
        check_window(addr, item.key_for(key), stamps, result)
    result["counts"].sort()
    print(json.dumps(result))


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
