// idemlab target: express-idempotency 1.0.6 with its default in-memory data adapter, on express 4.
// The middleware and the handler are the README's "Getting started", "Determine a idempotency hit in
// route handler" and "Report error in processing request"; the lab's glue (../node-glue.js) adds the
// text body parser, the sink call, the port and the READY line. See README.md.
'use strict';
const express = require('express');
const idempotency = require('express-idempotency');
const glue = require('../node-glue.js');

// The README shows no body parser. The handler must forward the exact bytes the client sent, so the
// glue's app reads every body as text, whatever its Content-Type (or none).
const app = glue.textApp(express);
// README: "Integrate the middleware in your Express initialization."
app.post('*', idempotency.idempotency());

app.post('/effect', async function (req, res, next) {
  // README: "Check if there was a hit!"
  const idempotencyService = idempotency.getSharedIdempotencyService();
  if (idempotencyService.isHit(req)) {
    return;
  }
  try {
    // The effect: the sink applies it and the glue answers its value.
    await glue.effect(req, res);
  } catch (err) {
    // README: "Oh BOOM! There is a error. Let's notify the middleware."
    idempotencyService.reportError(req);
    next(err);
  }
});

glue.listen(app);
