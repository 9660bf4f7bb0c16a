"""Drives redis-py's redis.lock.Lock (Debian's python3-redis) against the
address in argv[1]: acquire, blocking acquire with contention across threads,
release, extend, reacquire, owned, locked, and a shared counter incremented
under the lock by 8 threads. Exits non-zero with a message on any failure."""

import sys
import threading
import time

import redis
from redis.exceptions import LockNotOwnedError

host, port = sys.argv[1].rsplit(":", 1)
prefix = sys.argv[2] if len(sys.argv) > 2 else "py"


def client():
    return redis.Redis(host=host, port=int(port), socket_timeout=10)


def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


r = client()

# acquire, owned, locked, contention without blocking
lock = r.lock(prefix + ":lock", timeout=5)
check(lock.acquire(blocking=False), "acquire a free lock")
check(lock.locked(), "locked() after acquire")
check(lock.owned(), "owned() after acquire")
other = r.lock(prefix + ":lock", timeout=5)
check(not other.acquire(blocking=False), "a second owner acquired a held lock")
check(not other.owned(), "owned() of a lock someone else holds")
check(other.locked(), "locked() seen by a non-owner")

# extend (adds to the TTL), extend with replace_ttl, reacquire (resets it)
check(lock.extend(5), "extend")
ttl = r.pttl(prefix + ":lock")
check(5000 < ttl <= 10000, "PTTL after extend(5) = %d" % ttl)
check(lock.extend(3, replace_ttl=True), "extend(replace_ttl=True)")
ttl = r.pttl(prefix + ":lock")
check(0 < ttl <= 3000, "PTTL after replace_ttl = %d" % ttl)
check(lock.reacquire(), "reacquire")
ttl = r.pttl(prefix + ":lock")
check(3000 < ttl <= 5000, "PTTL after reacquire = %d" % ttl)

# release, and release again (not owned any more)
lock.release()
check(not lock.locked(), "locked() after release")
try:
    lock.release()
    check(False, "a second release succeeded")
except Exception as e:  # redis-py raises LockNotOwnedError (a LockError)
    check(isinstance(e, LockNotOwnedError) or "not" in str(e).lower(), "second release raised %r" % e)
try:
    other.extend(1)
    check(False, "extend of a lock not held succeeded")
except Exception:
    pass

# a lock without timeout has no expiry (SET NX without PX)
forever = r.lock(prefix + ":forever")
check(forever.acquire(blocking=False), "acquire without timeout")
check(r.pttl(prefix + ":forever") == -1, "a lock without timeout has a TTL")
forever.release()

# blocking acquire: a waiter gets the lock once its holder releases it
holder = r.lock(prefix + ":block", timeout=10)
check(holder.acquire(blocking=False), "holder acquires")
got = []


def waiter():
    w = client().lock(prefix + ":block", timeout=10, blocking_timeout=10, sleep=0.01)
    got.append(w.acquire())
    w.release()


t = threading.Thread(target=waiter)
t.start()
time.sleep(0.2)  # the waiter is now polling a held lock
check(not got, "the waiter got a held lock")
holder.release()
t.join(15)
check(got == [True], "blocking acquire after release: %r" % got)

# a blocking acquire that times out
holder = r.lock(prefix + ":block2", timeout=10)
holder.acquire()
w = r.lock(prefix + ":block2", timeout=10, blocking_timeout=0.2, sleep=0.01)
check(not w.acquire(), "blocking_timeout acquired a held lock")
holder.release()

# shared counter: 8 threads increment under the lock; a broken lock loses updates
WORKERS, ITER = 8, 40
counter = {"n": 0}
errors = []


def work():
    c = client()
    try:
        for _ in range(ITER):
            with c.lock(prefix + ":counter", timeout=10, blocking_timeout=60, sleep=0.001):
                n = counter["n"]
                time.sleep(0.0005)  # widen the window a second holder would use
                counter["n"] = n + 1
    except Exception as e:
        errors.append(repr(e))


threads = [threading.Thread(target=work) for _ in range(WORKERS)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
check(not errors, "worker errors: %r" % errors)
check(counter["n"] == WORKERS * ITER, "counter = %d, want %d" % (counter["n"], WORKERS * ITER))
print("OK redis-py", redis.__version__, "counter", counter["n"])
