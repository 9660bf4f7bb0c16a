'use strict';
// Drives real rate limiters against the Redis-speaking address in argv[2]:
// node ratelimit.js HOST:PORT PREFIX LIMITER..., where each LIMITER is
// rlf-ioredis or rlf-node-redis (rate-limiter-flexible's RateLimiterRedis
// on ioredis 5 or node-redis 5) or express (express-rate-limit with
// rate-limit-redis's store, driven through an express app served on a
// loopback port). The limiters run at once, each on its key PREFIX+LIMITER:
// WORKERS workers, each on a connection of its own, make ATTEMPTS attempts
// each against a limit of LIMIT in one window of WINDOW_S seconds (long
// enough that the run never reaches its end). Prints one JSON object, per
// limiter {"admitted": n, "counts": [the count the limiter reported for
// each admitted attempt], "refused": n, "errors": [messages]}; the go test
// (tests/ratelimit_test.go) judges it. Exits non-zero only when the driver
// itself breaks.
const http = require('node:http');
// Every module is loaded before the first connection is made: a require
// runs synchronously, and on a loaded machine loading express while
// node-redis connects kept its socket's 'connect' from being handled
// within node-redis's 5 s connect timeout.
const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const IORedis = require('ioredis5');
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');

const [, , addr, prefix, ...limiters] = process.argv;
const WORKERS = 8;
const ATTEMPTS = 4;
const LIMIT = 10;
const WINDOW_S = 120;
// The clients' connect timeout: generous, for a machine whose two cores
// the whole suite shares (node-redis's default of 5 s once ran out there).
const CONNECT_MS = 30000;
const i = addr.lastIndexOf(':');
const [host, port] = [addr.slice(0, i), Number(addr.slice(i + 1))];

// An attempt resolves to {admitted: true, count}, {admitted: false} or
// {error}; a worker makes its attempts one after another.
async function run(attempts) {
  const result = { admitted: 0, counts: [], refused: 0, errors: [] };
  await Promise.all(
    attempts.map(async (attempt) => {
      for (let j = 0; j < ATTEMPTS; j++) {
        const r = await attempt();
        if (r.error) result.errors.push(r.error);
        else if (r.admitted) {
          result.admitted++;
          result.counts.push(r.count);
        } else result.refused++;
      }
    }),
  );
  result.counts.sort((a, b) => a - b);
  return result;
}

// rlf drives rate-limiter-flexible: each worker has its own client and
// RateLimiterRedis, as processes of one service would.
async function rlf(key, useNodeRedis) {
  const clients = [];
  const attempts = [];
  for (let w = 0; w < WORKERS; w++) {
    let client;
    if (useNodeRedis) {
      client = createClient({ socket: { host, port, reconnectStrategy: false, connectTimeout: CONNECT_MS } });
      client.on('error', () => {}); // each failed command rejects on its own
      await client.connect();
    } else {
      client = new IORedis(port, host, { maxRetriesPerRequest: 1, connectTimeout: CONNECT_MS });
    }
    clients.push(client);
    const rl = new RateLimiterRedis({
      storeClient: client,
      useRedisPackage: useNodeRedis,
      points: LIMIT,
      duration: WINDOW_S,
      keyPrefix: 'rlf',
    });
    attempts.push(async () => {
      try {
        const res = await rl.consume(key);
        return { admitted: true, count: res.consumedPoints };
      } catch (e) {
        if (e instanceof RateLimiterRes) return { admitted: false };
        return { error: String(e && e.message) };
      }
    });
  }
  try {
    return await run(attempts);
  } finally {
    for (const c of clients) (useNodeRedis ? c.destroy() : c.disconnect());
  }
}

// expressApp serves an app limited by express-rate-limit with a
// rate-limit-redis store (one ioredis client per app, as a service has),
// and the workers request it over HTTP, each on a connection of its own.
async function expressApp(key) {
  const app = express();
  const client = new IORedis(port, host, { maxRetriesPerRequest: 1, connectTimeout: CONNECT_MS });
  app.use(
    rateLimit({
      windowMs: WINDOW_S * 1000,
      limit: LIMIT,
      keyGenerator: () => key,
      validate: false,
      store: new RedisStore({ sendCommand: (...args) => client.call(...args), prefix: 'erl:' }),
    }),
  );
  app.get('/', (req, res) => res.json({ used: req.rateLimit.used }));
  app.use((err, req, res, next) => res.status(500).json({ error: String(err && err.message) }));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${server.address().port}/`;
  const attempts = Array.from({ length: WORKERS }, () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    return () =>
      new Promise((resolve) => {
        http
          .get(url, { agent }, (res) => {
            let body = '';
            res.on('data', (d) => (body += d));
            res.on('end', () => {
              if (res.statusCode === 200) resolve({ admitted: true, count: JSON.parse(body).used });
              else if (res.statusCode === 429) resolve({ admitted: false });
              else resolve({ error: `HTTP ${res.statusCode} ${body}` });
            });
          })
          .on('error', (e) => resolve({ error: String(e.message) }));
      });
  });
  try {
    return await run(attempts);
  } finally {
    server.closeAllConnections();
    server.close();
    client.disconnect();
  }
}

const drivers = {
  'rlf-ioredis': (key) => rlf(key, false),
  'rlf-node-redis': (key) => rlf(key, true),
  express: expressApp,
};
async function main() {
  const out = {};
  await Promise.all(
    limiters.map(async (l) => {
      if (!drivers[l]) throw new Error(`unknown limiter ${l}`);
      out[l] = await drivers[l](prefix + l);
    }),
  );
  return out;
}
main().then(
  (r) => {
    console.log(JSON.stringify(r));
    process.exit(0);
  },
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
