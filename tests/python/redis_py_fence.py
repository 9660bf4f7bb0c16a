"""docs/fencing.md's Python example, run: redis-py's Lock against the
lockproxy at argv[1], each grant's fencing token read with LOCKPROXY FENCE
and the lock's own token. Fences grow from grant to grant; an extend keeps
the fence where the backend keeps one per grant (argv[2] "keep"). Exits
non-zero with a message on any failure."""

import sys

import redis

host, port = sys.argv[1].rsplit(":", 1)
keeps = len(sys.argv) > 2 and sys.argv[2] == "keep"
r = redis.Redis(host=host, port=int(port), socket_timeout=10)


def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


last = 0
for i in range(3):
    lock = r.lock("orders:42", timeout=30)
    check(lock.acquire(blocking=False), "acquire %d" % i)
    fence = r.execute_command("LOCKPROXY", "FENCE", "orders:42", lock.local.token)
    check(isinstance(fence, int) and fence > last, "fence %r after %r" % (fence, last))
    lock.extend(30)
    again = r.execute_command("LOCKPROXY", "FENCE", "orders:42", lock.local.token)
    check(again == fence if keeps else again > fence, "fence after extend %r, before %r" % (again, fence))
    last = again
    token = lock.local.token  # release forgets it
    lock.release()
    check(r.execute_command("LOCKPROXY", "FENCE", "orders:42", token) is None,
          "a released lock's fence is not nil")
print("OK redis-py fences, last", last)
