'use strict';
// The availability load of avail_test.go, run by a node client library:
//   node avail.js HOST:PORT LIB PREFIX CONTENDED WORKERS KEYS TTL_MS HOLD_US OP_TIMEOUT_MS
// LIB is redlock5 (node redlock 5.0.0-beta.2: acquire and release by
// script), semaphore (redis-semaphore 5.8's Mutex: acquire by SET NX PX,
// release by script) or semaphore-n (its Semaphore of one permit: sorted
// sets), each on ioredis 5. Each worker
// has its own connection and does what avail_load_test.go's Go workers do:
// acquire once; on a grant hold and release; after a refusal or an error
// back off 0-2ms. It prints "ready" once every connection is up, runs until
// its stdin closes, then prints one line per request:
//   op startµs endµs outcome [error]
// op a (acquire) or r (release); outcome g (granted/released), n (refused:
// held by another / not held), e (error). NODE_PATH names tests/node/node_modules.
const [, , addr, lib, prefix, contendedArg, workersArg, keysArg, ttlArg, holdArg, timeoutArg] = process.argv;
const IORedis = require('ioredis5');
const i = addr.lastIndexOf(':');
const host = addr.slice(0, i);
const port = Number(addr.slice(i + 1));
const contended = contendedArg === 'true';
const workers = Number(workersArg);
const keys = Number(keysArg);
const ttl = Number(ttlArg);
const holdMs = Number(holdArg) / 1000;
const opTimeout = Number(timeoutArg);

const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const lines = [];
let stopping = false;

function record(op, start, out, err) {
  const text = err ? ' ' + String(err.message || err).replace(/\s+/g, ' ') : '';
  lines.push(`${op} ${start} ${nowUs()} ${out}${text}`);
}

// Each lib returns { acquire(key) -> {out, err, handle}, release(handle) -> {out, err} }.
function redlock5(c) {
  const { default: Redlock, ExecutionError, ResourceLockedError } = require('redlock5');
  const rl = new Redlock([c], { retryCount: 0 });
  rl.on('error', () => {}); // every vote against is emitted too; the outcome says it
  // against tells a refusal (the script's 0: ResourceLockedError) from an error.
  const against = async (e) => {
    if (!(e instanceof ExecutionError) || e.attempts.length === 0) return { out: 'e', err: e };
    const stats = await e.attempts[e.attempts.length - 1];
    for (const v of stats.votesAgainst.values()) {
      if (!(v instanceof ResourceLockedError)) return { out: 'e', err: v };
    }
    return { out: 'n' };
  };
  return {
    async acquire(key) {
      try {
        return { out: 'g', handle: await rl.acquire([key], ttl) };
      } catch (e) {
        return against(e);
      }
    },
    async release(lock) {
      try {
        await lock.release();
        return { out: 'g' };
      } catch (e) {
        return against(e);
      }
    },
  };
}

function semaphore(c) {
  const { Mutex } = require('redis-semaphore');
  return {
    async acquire(key) {
      const m = new Mutex(c, key, { lockTimeout: ttl, acquireAttemptsLimit: 1, retryInterval: 0, refreshInterval: 0 });
      try {
        return (await m.tryAcquire()) ? { out: 'g', handle: m } : { out: 'n' };
      } catch (e) {
        return { out: 'e', err: e };
      }
    },
    async release(m) {
      try {
        await m.release();
        return { out: 'g' };
      } catch (e) {
        return { out: 'e', err: e };
      }
    },
  };
}

// semaphoreN is redis-semaphore's Semaphore with one permit: its
// acquire and release are sorted-set scripts (ZREMRANGEBYSCORE, ZCARD,
// ZADD, PEXPIRE; a top-level ZREM), watched by value on quorum.
function semaphoreN(c) {
  const { Semaphore } = require('redis-semaphore');
  const m = semaphore(c);
  return {
    async acquire(key) {
      const s = new Semaphore(c, key, 1, { lockTimeout: ttl, acquireAttemptsLimit: 1, retryInterval: 0, refreshInterval: 0 });
      try {
        return (await s.tryAcquire()) ? { out: 'g', handle: s } : { out: 'n' };
      } catch (e) {
        return { out: 'e', err: e };
      }
    },
    release: m.release,
  };
}

async function worker(w, c) {
  const l = { redlock5, semaphore, 'semaphore-n': semaphoreN }[lib](c);
  for (let n = 0; !stopping; n++) {
    const key = contended ? `${prefix}c:${Math.floor(Math.random() * keys)}` : `${prefix}u:${w}:${n}`;
    let start = nowUs();
    const a = await l.acquire(key);
    if (stopping) return;
    record('a', start, a.out, a.err);
    if (a.out !== 'g') {
      await sleep(Math.random() * 2);
      continue;
    }
    await sleep(holdMs);
    start = nowUs();
    const r = await l.release(a.handle);
    if (stopping) return;
    record('r', start, r.out, r.err);
  }
}

(async () => {
  // The first PING waits as long as connecting takes (seconds on a loaded
  // machine); only the measured requests are bounded by OP_TIMEOUT_MS, which
  // ioredis reads from its options as each command is sent.
  const clients = Array.from({ length: workers }, () =>
    new IORedis(port, host, { maxRetriesPerRequest: 0, enableOfflineQueue: true }));
  await Promise.all(clients.map((c) => c.ping()));
  clients.forEach((c) => { c.options.commandTimeout = opTimeout; });
  const ended = new Promise((r) => process.stdin.on('end', r));
  process.stdin.resume();
  process.stdout.write('ready\n');
  const running = clients.map((c, w) => worker(w, c));
  await ended;
  stopping = true;
  await Promise.all(running);
  clients.forEach((c) => c.disconnect());
  process.stdout.write(lines.length ? lines.join('\n') + '\n' : '');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
