// idemlab target: express-idempotency 1.0.6 with express-idempotency-redis-adapter 1.0.8 on the run's
// redis, on express 4. The adapter is the redis adapter's README "Getting started"; the middleware and
// the handler are express-idempotency's README ("Getting started", "Determine a idempotency hit in
// route handler", "Report error in processing request"), as in ../express-idempotency; the lab's glue
// (../node-glue.js) adds the text body parser, the sink call, the port and the READY line. See README.md.
'use strict';
const express = require('express');
const idempotency = require('express-idempotency');
const RedisAdapter = require('express-idempotency-redis-adapter').default;
const glue = require('../node-glue.js');

// Redis adapter README: "New Redis Adapter that will be used by the idempotency middleware".
const adapter = new RedisAdapter({
  connectionConfig: { url: process.env.REDIS_URL },
});

// The README shows no body parser. The handler must forward the exact bytes the client sent, so the
// glue's app reads every body as text, whatever its Content-Type (or none).
const app = glue.textApp(express);
// Redis adapter README: "Add the idempotency middleware by specifying the use of the redis adapter".
app.post('*', idempotency.idempotency({ dataAdapter: adapter }));

app.post('/effect', async function (req, res, next) {
  // express-idempotency README: "Check if there was a hit!"
  const idempotencyService = idempotency.getSharedIdempotencyService();
  if (idempotencyService.isHit(req)) {
    return;
  }
  try {
    // The effect: the sink applies it and the glue answers its value.
    await glue.effect(req, res);
  } catch (err) {
    // express-idempotency README: "Oh BOOM! There is a error. Let's notify the middleware."
    idempotencyService.reportError(req);
    next(err);
  }
});

// Redis adapter README: adapter.connect(), its error thrown. The harness listens (and says READY)
// once the client is connected.
adapter.connect().then(() => glue.listen(app), (error) => {
  throw error;
});
