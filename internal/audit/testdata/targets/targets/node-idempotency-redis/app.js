// idemlab target: @node-idempotency/core 1.0.11 with @node-idempotency/storage-adapter-redis, on express 4.
// The family's express plugin (@node-idempotency/express) is not published; this middleware calls the core
// as that plugin does (see README.md); the handler is plain express user code that calls the effect sink.
'use strict';
const express = require('express');
const { Idempotency, IdempotencyError, IdempotencyErrorCodes } = require('@node-idempotency/core');
const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');

// The plugin's error-code → status map and its replay and retry headers (from @node-idempotency/shared).
const STATUS = { IDEMPOTENCY_FINGERPRINT_MISSMATCH: 422, IDEMPOTENCY_KEY_LEN_EXEEDED: 400, IDEMPOTENCY_KEY_MISSING: 400, REQUEST_IN_PROGRESS: 409 };
// The plugin's buildStorageAdapter: a redis client from its options, connected before use.
const storage = new RedisStorageAdapter({ url: process.env.REDIS_URL });
const idempotency = new Idempotency(storage, {});

// The plugin's middleware: onRequest before the handler; the first response's send stores it with onResponse.
async function idempotencyMiddleware(req, res, next) {
  const params = { headers: req.headers, body: req.body, path: req.url, method: req.method };
  try {
    const cached = await idempotency.onRequest(params);
    if (!cached) {
      const originalSend = res.send.bind(res);
      res.send = function (body) {
        const additional = { statusCode: res.statusCode };
        if (res.getHeader('content-type')) additional['Content-Type'] = res.getHeader('content-type');
        void idempotency.onResponse(params, { additional, ...(res.statusCode < 400 ? { body } : { error: body }) });
        return originalSend(body);
      };
      return next();
    }
    if (cached.additional?.statusCode) res.status(cached.additional.statusCode);
    if (cached.additional?.['Content-Type']) res.header('Content-Type', cached.additional['Content-Type']);
    res.header('Idempotent-Replayed', 'true');
    if (cached.body) res.send(cached.body);
    else next(cached.error);
  } catch (err) {
    if (err instanceof IdempotencyError) {
      if (err.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS) res.header('Retry-After', '1');
      res.status(STATUS[err.code] || 500);
      next(err);
    }
  }
}

const app = express();
// Every body is read as text, whatever its Content-Type (or none), so the handler forwards the exact bytes
// and the core fingerprints them; express.text's default limit is 100kb.
app.use(express.text({ type: () => true }));
app.use(idempotencyMiddleware);

app.post('/effect', async function (req, res, next) {
  try {
    const reply = await fetch(process.env.EFFECT_URL, { method: 'POST', body: typeof req.body === 'string' ? req.body : '' });
    const value = await reply.text();
    if (reply.status !== 200) throw new Error(`effect sink answered ${reply.status}: ${value}`);
    res.status(200).type('text/plain').send(value);
  } catch (err) {
    next(err);
  }
});

storage.connect().then(() => {
  const server = app.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
});
