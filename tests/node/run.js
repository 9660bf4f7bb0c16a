'use strict';
// Drives one node lock library on one ioredis major against the address in
// argv[2]: node run.js HOST:PORT LIBRARY IOREDIS [HOST2:PORT2],
// where LIBRARY is redlock4, redlock5, semaphore (redis-semaphore's Mutex),
// semaphore-n (its Semaphore), multisemaphore (its MultiSemaphore),
// simple-redis-mutex (on node-redis 5, IOREDIS "node-redis") or
// node-redisson (on ioredis 5, IOREDIS "ioredis") and IOREDIS is ioredis5
// or ioredis6; every library runs the same checks on every target. HOST2:PORT2
// is another instance in front of the same backend (or the legacy Redis
// of a migrating proxy at HOST:PORT): the libraries that wake their
// waiters (simple-redis-mutex, node-redisson) wait there while the holder
// releases at HOST:PORT, and half the workers of every 8-worker check
// that takes two clients run there. Exits non-zero with the failure on
// stderr.
const assert = require('node:assert/strict');

const [, , addr, lib, ioredisName, addr2 = addr] = process.argv;
const hostPort = (a) => {
  const i = a.lastIndexOf(':');
  return [a.slice(0, i), Number(a.slice(i + 1))];
};
const [host, port] = hostPort(addr);
const [host2, port2] = hostPort(addr2);
const IORedis = /^ioredis\d$/.test(ioredisName) ? require(ioredisName) : null; // the others bring their own client
const prefix = `${lib}:${ioredisName}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function client() {
  return IORedis && new IORedis(port, host, { maxRetriesPerRequest: 1, enableOfflineQueue: true });
}

// onBoth runs f(c, c2), c2 a client of HOST2:PORT2 (c itself when that is
// HOST:PORT): the semaphores' workers alternate between the two, so that
// through a migrating proxy half of them use the legacy Redis directly.
async function onBoth(c, f) {
  const c2 = addr2 === addr ? c : new IORedis(port2, host2, { maxRetriesPerRequest: 1, enableOfflineQueue: true });
  try {
    return await f(c2);
  } finally {
    if (c2 !== c) c2.disconnect();
  }
}

// counter has workers increment a shared count under the lock; an await
// between read and write lets another holder interleave if exclusion fails.
async function counter(workers, iter, lock) {
  let count = 0;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let j = 0; j < iter; j++) {
        const unlock = await lock(w);
        const n = count;
        await new Promise((r) => setImmediate(r));
        count = n + 1;
        await unlock();
      }
    }),
  );
  assert.equal(count, workers * iter, 'two workers held the lock at once');
  return `counter ${count}`;
}

// wakeLatency measures, rounds times, the time from a release to the
// waiter's grant: hold() takes the lock and returns its release, wait()
// waits for it and returns the waiter's release, asleep() resolves once
// the waiter waits (by default after 20 ms). A lost wake-up fails the
// round. Returns "p50 … p99 …".
async function wakeLatency(rounds, hold, wait, asleep = () => sleep(20)) {
  const ms = [];
  for (let r = 0; r < rounds; r++) {
    const release = await hold();
    const waiting = wait();
    await asleep();
    const t0 = performance.now();
    await release();
    const releaseWaiter = await waiting;
    ms.push(performance.now() - t0);
    await releaseWaiter();
  }
  ms.sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(1);
  assert.ok(ms[ms.length - 1] < 2000, `a waiter got the lock ${ms[ms.length - 1]} ms after a release: its wake-up was lost`);
  return `release to grant p50 ${at(0.5)} ms, p99 ${at(0.99)} ms (${rounds} rounds)`;
}

// permitCounter has workers take `permits` permits of a semaphore of
// `limit` in a loop, and counts here the permits held at once: a worker
// counts its permits once acquire resolved and uncounts them before it
// sends the release, so the count never exceeds what the server granted.
// It must stay within limit, and reach the most that whole acquisitions
// can fill, or the check could not fail.
async function permitCounter(workers, iter, limit, permits, acquire) {
  const ceiling = Math.floor(limit / permits) * permits;
  let held = 0;
  let peak = 0;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let j = 0; j < iter; j++) {
        const release = await acquire(w);
        held += permits;
        peak = Math.max(peak, held);
        assert.ok(held <= limit, `${held} permits held at once; the limit is ${limit}`);
        await sleep(10); // a holder's work: lets the other workers contend, and overlap (a migrating proxy's acquires are slower)
        held -= permits;
        await release();
      }
    }),
  );
  assert.equal(peak, ceiling, `at most ${peak} permits were held at once; want ${ceiling}`);
  return `${workers * iter} acquisitions of ${permits} of ${limit} permits, at most ${peak} held`;
}

async function redlock4(c) {
  const Redlock = require('redlock4');
  const redlock = new Redlock([c], { retryCount: 0 });
  let lock = await redlock.lock(`${prefix}:a`, 5000);
  await assert.rejects(redlock.lock(`${prefix}:a`, 1000), 'a held lock was acquired again');
  lock = await lock.extend(8000);
  const ttl = await c.pttl(`${prefix}:a`);
  assert.ok(ttl > 5000 && ttl <= 8000, `PTTL after extend = ${ttl}`);
  await lock.unlock();
  assert.equal(await c.exists(`${prefix}:a`), 0);

  const multi = await redlock.lock([`${prefix}:m1`, `${prefix}:m2`], 5000);
  await assert.rejects(redlock.lock([`${prefix}:m2`, `${prefix}:m3`], 1000), 'overlapping multi-lock acquired');
  assert.equal(await c.exists(`${prefix}:m3`), 0, 'a failed multi-lock left a key');
  await multi.extend(6000);
  await multi.unlock();
  assert.equal(await c.exists(`${prefix}:m1`, `${prefix}:m2`), 0);

  const retrying = new Redlock([c], { retryCount: -1, retryDelay: 2, retryJitter: 2 });
  return counter(8, 20, async () => {
    const l = await retrying.lock(`${prefix}:counter`, 10000);
    return () => l.unlock();
  });
}

async function redlock5(c) {
  const Redlock = require('redlock5').default;
  const redlock = new Redlock([c], { retryCount: 0 });
  let lock = await redlock.acquire([`${prefix}:a`], 5000);
  await assert.rejects(redlock.acquire([`${prefix}:a`], 1000), 'a held lock was acquired again');
  lock = await lock.extend(8000);
  const ttl = await c.pttl(`${prefix}:a`);
  assert.ok(ttl > 5000 && ttl <= 8000, `PTTL after extend = ${ttl}`);
  await lock.release();
  assert.equal(await c.exists(`${prefix}:a`), 0);

  let multi = await redlock.acquire([`${prefix}:m1`, `${prefix}:m2`], 5000);
  await assert.rejects(redlock.acquire([`${prefix}:m2`, `${prefix}:m3`], 1000), 'overlapping multi-lock acquired');
  assert.equal(await c.exists(`${prefix}:m3`), 0, 'a failed multi-lock left a key');
  multi = await multi.extend(8000);
  for (const k of ['m1', 'm2']) {
    const t = await c.pttl(`${prefix}:${k}`);
    assert.ok(t > 5000 && t <= 8000, `PTTL of ${k} after a multi extend = ${t}`);
  }
  await multi.release();
  assert.equal(await c.exists(`${prefix}:m1`, `${prefix}:m2`), 0);

  // using() extends the lock while the routine runs past the first TTL.
  await redlock.using([`${prefix}:using`], 1000, { automaticExtensionThreshold: 500 }, async (signal) => {
    await sleep(2500);
    assert.equal(signal.aborted, false, `using() lost its lock: ${signal.error}`);
    assert.ok((await c.pttl(`${prefix}:using`)) > 0, 'the lock expired inside using()');
  });
  assert.equal(await c.exists(`${prefix}:using`), 0, 'using() did not release');

  const retrying = new Redlock([c], { retryCount: 100000, retryDelay: 2, retryJitter: 2 });
  return counter(8, 20, async () => {
    const l = await retrying.acquire([`${prefix}:counter`], 10000);
    return () => l.release();
  });
}

async function semaphore(c) {
  const { Mutex } = require('redis-semaphore');
  const m = new Mutex(c, `${prefix}:a`, { lockTimeout: 5000, acquireTimeout: 1000, retryInterval: 5 });
  await m.acquire();
  assert.ok(m.isAcquired);
  const other = new Mutex(c, `${prefix}:a`, { lockTimeout: 5000, acquireAttemptsLimit: 1 });
  assert.equal(await other.tryAcquire(), false, 'a held mutex was acquired again');
  await m.release();
  assert.equal(await other.tryAcquire(), true, 'a released mutex could not be acquired');
  await other.release();

  // The refresh loop (expireIfEqualLua) keeps a short lock alive past its
  // timeout (with wide margins: a loaded machine delays timers).
  const lost = [];
  const kept = new Mutex(c, `${prefix}:refresh`, { lockTimeout: 1000, refreshInterval: 100, onLockLost: (e) => lost.push(e) });
  await kept.acquire();
  await sleep(1500);
  assert.deepEqual(lost, [], 'the refreshed mutex was lost');
  const left = await c.pttl(`mutex:${prefix}:refresh`); // redis-semaphore prefixes its keys
  assert.ok(left > 0 && left <= 1000, `PTTL of a refreshed mutex = ${left}`);
  await kept.release();
  assert.equal(await c.exists(`mutex:${prefix}:refresh`), 0);

  return counter(8, 20, async () => {
    const mu = new Mutex(c, `${prefix}:counter`, { lockTimeout: 10000, acquireTimeout: 60000, retryInterval: 2, refreshInterval: 0 });
    await mu.acquire();
    return () => mu.release();
  });
}

// refreshLoop checks the refresh loop of a holder made by keep(options),
// which takes every permit of the semaphore at rkey but one: it keeps its
// permits (its members, listed by members) alive well past their
// lockTimeout, while the last permit, taken by a holder made by
// one(options) that does not refresh, lapses and goes to the next acquire,
// whose script reclaims it. The margins are wide because a loaded machine
// delays timers; the lapse itself is certain, as the wait is longer than
// lockTimeout.
async function refreshLoop(c, rkey, keep, one, members) {
  const lockTimeout = 1000;
  const lost = [];
  const kept = keep({ lockTimeout, refreshInterval: 100, onLockLost: (e) => lost.push(e) });
  await kept.acquire();
  const since = Date.now();
  const once = { lockTimeout, refreshInterval: 0, acquireAttemptsLimit: 1 };
  const stale = one(once);
  assert.equal(await stale.tryAcquire(), true, 'the last permit could not be taken');
  assert.equal(await one(once).tryAcquire(), false, 'a full semaphore granted a permit');
  await sleep(lockTimeout + 500);
  assert.deepEqual(lost, [], 'the refreshed permits were lost');
  const next = one(once);
  assert.equal(await next.tryAcquire(), true, 'a lapsed permit was not reclaimed');
  const ids = members(kept);
  assert.deepEqual((await c.zrange(rkey, 0, -1)).sort(), [...ids, next.identifier].sort());
  for (const score of await c.zmscore(rkey, ...ids)) {
    assert.ok(Number(score) >= since, `the refresh loop did not move the score: ${score} < ${since}`);
  }
  const ttl = await c.pttl(rkey);
  assert.ok(ttl > 0 && ttl <= lockTimeout, `PTTL of a refreshed semaphore = ${ttl}`);
  await kept.release();
  await next.release();
  await stale.release(); // its member is gone: ZREM removes nothing
  assert.equal(await c.exists(rkey), 0, 'releasing every permit left the key');
}

// semaphoreN drives redis-semaphore's Semaphore (a sorted set of holders
// scored by acquisition time, behind the key semaphore:NAME).
async function semaphoreN(c) {
  const { Semaphore, TimeoutError } = require('redis-semaphore');
  const name = `${prefix}:a`;
  const key = `semaphore:${name}`;
  const opts = { lockTimeout: 5000, acquireTimeout: 1000, retryInterval: 5, refreshInterval: 0 };
  const held = [];
  for (let i = 0; i < 3; i++) {
    const s = new Semaphore(c, name, 3, opts);
    await s.acquire();
    held.push(s);
  }
  assert.equal(await c.zcard(key), 3);
  let ttl = await c.pttl(key);
  assert.ok(ttl > 0 && ttl <= 5000, `PTTL of a semaphore = ${ttl}`);
  const fourth = new Semaphore(c, name, 3, { ...opts, acquireAttemptsLimit: 1 });
  assert.equal(await fourth.tryAcquire(), false, 'a fourth permit of three was granted');
  await assert.rejects(new Semaphore(c, name, 3, { ...opts, acquireTimeout: 100 }).acquire(), TimeoutError);
  await held[0].release();
  assert.equal(await c.zscore(key, held[0].identifier), null, 'release left its member');
  assert.equal(await fourth.tryAcquire(), true, 'a released permit could not be taken');
  held[0] = fourth;

  // Refresh on demand: acquiredExternally with a holder's identifier runs
  // the refresh script, here with a longer lockTimeout; a stranger's fails.
  const ext = new Semaphore(c, name, 3, { identifier: held[1].identifier, acquiredExternally: true, lockTimeout: 8000, refreshInterval: 0 });
  assert.equal(await ext.tryAcquire(), true, "a holder's refresh failed");
  ttl = await c.pttl(key);
  assert.ok(ttl > 5000 && ttl <= 8000, `PTTL after a refresh = ${ttl}`);
  const stranger = new Semaphore(c, name, 3, { identifier: 'not-a-holder', acquiredExternally: true, refreshInterval: 0 });
  assert.equal(await stranger.tryAcquire(), false, "a stranger's refresh succeeded");
  assert.equal(await c.zcard(key), 3);
  for (const s of held) await s.release();
  assert.equal(await c.exists(key), 0, 'releasing every permit left the key');

  await refreshLoop(
    c,
    `semaphore:${prefix}:refresh`,
    (o) => new Semaphore(c, `${prefix}:refresh`, 2, o),
    (o) => new Semaphore(c, `${prefix}:refresh`, 2, o),
    (kept) => [kept.identifier],
  );

  const summary = await onBoth(c, (c2) => permitCounter(8, 20, 3, 1, async (w) => {
    const s = new Semaphore(w % 2 ? c2 : c, `${prefix}:counter`, 3, { lockTimeout: 10000, acquireTimeout: 60000, retryInterval: 2, refreshInterval: 0 });
    await s.acquire();
    return () => s.release();
  }));
  assert.equal(await c.exists(`semaphore:${prefix}:counter`), 0);
  return summary;
}

// multiSemaphore drives redis-semaphore's MultiSemaphore, which takes
// several permits (members ID_0 … ID_{n-1}) at once, and shares its key
// space with Semaphore.
async function multiSemaphore(c) {
  const { MultiSemaphore, Semaphore } = require('redis-semaphore');
  const name = `${prefix}:a`;
  const key = `semaphore:${name}`;
  const opts = { lockTimeout: 5000, acquireTimeout: 1000, retryInterval: 5, refreshInterval: 0 };
  const once = { ...opts, acquireAttemptsLimit: 1 };
  const three = new MultiSemaphore(c, name, 5, 3, opts);
  await three.acquire();
  assert.deepEqual(await c.zrange(key, 0, -1), [0, 1, 2].map((i) => `${three.identifier}_${i}`));
  const again = new MultiSemaphore(c, name, 5, 3, once);
  assert.equal(await again.tryAcquire(), false, '3 + 3 permits of 5 were granted');
  const two = new MultiSemaphore(c, name, 5, 2, once);
  assert.equal(await two.tryAcquire(), true, '3 + 2 permits of 5 were refused');
  const one = new Semaphore(c, name, 5, once);
  assert.equal(await one.tryAcquire(), false, 'a sixth permit of 5 was granted');
  assert.equal(await c.zcard(key), 5);

  const ext = new MultiSemaphore(c, name, 5, 3, { identifier: three.identifier, acquiredExternally: true, lockTimeout: 8000, refreshInterval: 0 });
  assert.equal(await ext.tryAcquire(), true, "a holder's refresh failed");
  let ttl = await c.pttl(key);
  assert.ok(ttl > 5000 && ttl <= 8000, `PTTL after a refresh = ${ttl}`);
  await three.release();
  assert.equal(await c.zcard(key), 2, 'release did not free three permits');
  assert.equal(await again.tryAcquire(), true, 'released permits could not be taken');
  await again.release();
  await two.release();
  assert.equal(await c.exists(key), 0, 'releasing every permit left the key');

  await refreshLoop(
    c,
    `semaphore:${prefix}:refresh`,
    (o) => new MultiSemaphore(c, `${prefix}:refresh`, 3, 2, o),
    (o) => new Semaphore(c, `${prefix}:refresh`, 3, o),
    (kept) => [`${kept.identifier}_0`, `${kept.identifier}_1`],
  );

  const summary = await onBoth(c, (c2) => permitCounter(8, 20, 7, 2, async (w) => {
    const s = new MultiSemaphore(w % 2 ? c2 : c, `${prefix}:counter`, 7, 2, { lockTimeout: 10000, acquireTimeout: 60000, retryInterval: 2, refreshInterval: 0 });
    await s.acquire();
    return () => s.release();
  }));
  assert.equal(await c.exists(`semaphore:${prefix}:counter`), 0);
  return summary;
}

// simpleRedisMutex drives simple-redis-mutex 3.0 on node-redis 5: a
// waiter sleeps until the holder's release script PUBLISHes (its polling
// interval is set far beyond the test, so a lost message fails it), and
// fencing tokens grow.
async function simpleRedisMutex() {
  const { createClient } = require('redis');
  const { lock, tryLock } = require('simple-redis-mutex');
  const c = createClient({ url: `redis://${addr}`, socket: { reconnectStrategy: false } });
  const w = createClient({ url: `redis://${addr2}`, socket: { reconnectStrategy: false } });
  await c.connect();
  await w.connect();
  try {
    const name = `${prefix}:a`;
    const [got, release] = await tryLock(c, name, { timeout: 5000 });
    assert.ok(got, 'tryLock of a free lock failed');
    const [again] = await tryLock(c, name, { timeout: 5000 });
    assert.ok(!again, 'a held lock was acquired again');
    const waiting = lock(w, name, { timeout: 5000, pollingInterval: 60000, failAfter: 20000 });
    await sleep(200); // the waiter tried and is asleep
    const releasedAt = Date.now();
    await release();
    const next = await waiting;
    const woke = Date.now() - releasedAt;
    assert.ok(woke < 2000, `the waiter got the lock ${woke} ms after the release: its wake-up was lost`);
    assert.ok(next.fencingToken > release.fencingToken, `fencing token ${next.fencingToken} after ${release.fencingToken}`);
    await next();
    assert.equal(await c.exists(`@simple-redis-mutex:lock-${name}`), 0);

    const latency = await wakeLatency(30,
      () => lock(c, `${prefix}:wake`, { timeout: 10000 }),
      () => lock(w, `${prefix}:wake`, { timeout: 10000, pollingInterval: 60000, failAfter: 20000 }));
    const summary = await counter(8, 20, async (i) => lock(i % 2 ? w : c, `${prefix}:counter`, { timeout: 10000, pollingInterval: 60000, failAfter: 30000 }));
    return `${summary}, ${latency}`;
  } finally {
    await c.quit().catch(() => {});
    await w.quit().catch(() => {});
  }
}

// nodeRedisson drives node-redisson 1.0 (Redisson's RLock scripts: a hash
// per lock, reentrant, a watchdog extending it, and an unlock script that
// PUBLISHes to the waiters, who sleep up to the lock's TTL otherwise). The
// lease here is 30 s, so a lost wake-up fails the test.
async function nodeRedisson() {
  const { Redisson } = require('node-redisson');
  const one = new Redisson({ redis: { options: { host, port, maxRetriesPerRequest: 1 } } });
  const two = new Redisson({ redis: { options: { host: host2, port: port2, maxRetriesPerRequest: 1 } } });
  const name = `${prefix}:a`;
  // No quit at the end: node-redisson leaves waiters' timeouts armed after
  // their wake-up (up to a lease later), which unsubscribe on its
  // connection; closed, that is an unhandled rejection that kills the
  // process before its result is out. The process exits once it is written.
  const held = one.getLock(name);
  await held.lock(); // the watchdog's lease (30 s), extended while held
  await held.lock(); // reentrant: a count of 2
  await held.unlock();
  assert.equal(await held.isLocked(), true, 'one unlock of two released a reentrant lock');
  const other = two.getLock(name);
  assert.equal(await other.tryLock(0, 30000), false, 'a held lock was acquired by another client');
  const waiting = other.tryLock(20000, 30000);
  await subscribed(two, `redisson_lock__channel:{${name}}`);
  const releasedAt = Date.now();
  await held.unlock();
  assert.equal(await waiting, true, 'the waiter did not get the lock');
  const woke = Date.now() - releasedAt;
  assert.ok(woke < 2000, `the waiter got the lock ${woke} ms after the release: its wake-up was lost`);
  await assert.rejects(held.unlock(), /not locked by current client/, 'a lock released twice');
  await other.unlock();
  assert.equal(await held.isLocked(), false);

  const latency = await wakeLatency(30,
    async () => { const l = one.getLock(`${prefix}:wake`); await l.lock(30000); return () => l.unlock(); },
    async () => { const l = two.getLock(`${prefix}:wake`); assert.ok(await l.tryLock(20000, 30000)); return () => l.unlock(); },
    () => subscribed(two, `redisson_lock__channel:{${prefix}:wake}`));
  // A 4 s lease here: node-redisson subscribes only after a failed try,
  // and one waiter's UNSUBSCRIBE ends the channel for the others on its
  // connection, so some of 8 contending workers miss their wake-up (on
  // Redis too) and sleep out the lock's TTL; 2 s was too short for a
  // holder on a loaded machine (its unlock found the lease gone).
  const summary = await counter(8, 20, async (i) => {
    const l = (i % 2 ? two : one).getLock(`${prefix}:counter`);
    await l.lock(4000);
    return () => l.unlock();
  });
  return `${summary}, ${latency}`;
}

// subscribed resolves once a waiter of the Redisson instance r listens on
// channel: node-redisson subscribes only after its failed try, so a release
// before that (a loaded machine) would lose the wake-up on Redis too. The
// server counting the subscription is not enough: node-redisson adds its
// listener only once the SUBSCRIBE's reply is read, and a message read in
// the same chunk as that reply is emitted to nobody (on Redis too).
async function subscribed(r, channel) {
  const listeners = () => r.commandExecutor.eventEmitter.listenerCount(channel);
  for (const end = Date.now() + 10000; Date.now() < end; await sleep(2)) {
    const [, n] = await r.redis.pubsub('NUMSUB', channel);
    if (Number(n) > 0 && listeners() > 0) return;
  }
  throw new Error(`no waiter subscribed to ${channel} within 10 s`);
}

// polling measures release to grant for a library that polls: node
// redlock 5 with its default retry delay (200 ms, jitter 200 ms).
async function polling(c) {
  const Redlock = require('redlock5').default;
  const holder = new Redlock([c], { retryCount: 0 });
  const waiter = new Redlock([c], { retryCount: 100 });
  return wakeLatency(30,
    async () => { const l = await holder.acquire([`${prefix}:wake`], 30000); return () => l.release(); },
    async () => { const l = await waiter.acquire([`${prefix}:wake`], 30000); return () => l.release(); });
}

// fence runs docs/fencing.md's Node example: each grant's fencing token,
// read with LOCKPROXY FENCE (lockproxy only), grows from grant to grant.
async function fence(c) {
  let last = 0;
  for (let i = 0; i < 3; i++) {
    const key = `${prefix}:orders`;
    const token = `node-${i}`;
    const ok = await c.set(key, token, 'PX', 30000, 'NX');
    const f = ok && await c.call('LOCKPROXY', 'FENCE', key, token);
    if (ok !== 'OK' || !(Number.isSafeInteger(f) && f > last)) {
      throw new Error(`grant ${i}: SET ${ok}, fence ${f} after ${last}`);
    }
    last = f;
    await c.del(key);
  }
  return `fences up to ${last}`;
}

const libraries = {
  redlock4, redlock5, semaphore, 'semaphore-n': semaphoreN, multisemaphore: multiSemaphore,
  'simple-redis-mutex': simpleRedisMutex, 'node-redisson': nodeRedisson, polling, fence,
};

// A library that hangs fails here rather than at go test's timeout.
setTimeout(() => {
  console.error(`FAIL ${lib} on ${ioredisName}: no result after 60s`);
  process.exit(1);
}, 60000).unref();

(async () => {
  const c = client();
  try {
    const summary = await libraries[lib](c);
    c?.disconnect();
    // Exit once the line is out: node-redisson leaves a waiter's timeout
    // armed after its wake-up, which would unsubscribe on a closed
    // connection up to a TTL later and crash.
    process.stdout.write(`OK ${lib} on ${ioredisName}: ${summary}\n`, () => process.exit(0));
  } catch (e) {
    c?.disconnect();
    throw e;
  }
})().catch((e) => {
  console.error(`FAIL ${lib} on ${ioredisName}:`, e);
  process.exit(1);
});
