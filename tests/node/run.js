'use strict';
// Drives one node lock library on one ioredis major against the address in
// argv[2]: node run.js HOST:PORT LIBRARY IOREDIS, where LIBRARY is redlock4,
// redlock5 or semaphore and IOREDIS is ioredis5 or ioredis6. Exits non-zero
// with the failure on stderr.
const assert = require('node:assert/strict');

const [, , addr, lib, ioredisName] = process.argv;
const i = addr.lastIndexOf(':');
const host = addr.slice(0, i);
const port = Number(addr.slice(i + 1));
const IORedis = require(ioredisName);
const prefix = `${lib}:${ioredisName}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function client() {
  return new IORedis(port, host, { maxRetriesPerRequest: 1, enableOfflineQueue: true });
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
  return count;
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

  // The refresh loop (expireIfEqualLua) keeps a short lock alive past its timeout.
  const lost = [];
  const kept = new Mutex(c, `${prefix}:refresh`, { lockTimeout: 400, refreshInterval: 100, onLockLost: (e) => lost.push(e) });
  await kept.acquire();
  await sleep(1000);
  assert.deepEqual(lost, [], 'the refreshed mutex was lost');
  const left = await c.pttl(`mutex:${prefix}:refresh`); // redis-semaphore prefixes its keys
  assert.ok(left > 0 && left <= 400, `PTTL of a refreshed mutex = ${left}`);
  await kept.release();
  assert.equal(await c.exists(`mutex:${prefix}:refresh`), 0);

  return counter(8, 20, async () => {
    const mu = new Mutex(c, `${prefix}:counter`, { lockTimeout: 10000, acquireTimeout: 60000, retryInterval: 2, refreshInterval: 0 });
    await mu.acquire();
    return () => mu.release();
  });
}

(async () => {
  const c = client();
  try {
    const n = await { redlock4, redlock5, semaphore }[lib](c);
    console.log(`OK ${lib} on ${ioredisName}: counter ${n}`);
  } finally {
    c.disconnect();
  }
})().catch((e) => {
  console.error(`FAIL ${lib} on ${ioredisName}:`, e);
  process.exit(1);
});
