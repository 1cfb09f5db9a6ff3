// idemlab target: express-idempotency 1.0.6 with its default in-memory data adapter, on express 4.
// The middleware and the handler are the README's "Getting started", "Determine a idempotency hit in
// route handler" and "Report error in processing request"; the harness adds the sink call, the port
// and the READY line. See README.md.
'use strict';
const express = require('express');
const idempotency = require('express-idempotency');

const app = express();
// The README shows no body parser. The handler must forward the exact bytes the client sent, so every
// body is read as text, whatever its Content-Type (or none); express.text's default limit is 100kb.
app.use(express.text({ type: () => true }));
// README: "Integrate the middleware in your Express initialization."
app.post('*', idempotency.idempotency());

app.post('/effect', async function (req, res, next) {
  // README: "Check if there was a hit!"
  const idempotencyService = idempotency.getSharedIdempotencyService();
  if (idempotencyService.isHit(req)) {
    return;
  }
  try {
    // The effect: the sink applies it and answers its value.
    const reply = await fetch(process.env.EFFECT_URL, {
      method: 'POST',
      body: typeof req.body === 'string' ? req.body : '',
    });
    const value = await reply.text();
    if (reply.status !== 200) {
      throw new Error(`effect sink answered ${reply.status}: ${value}`);
    }
    res.status(200).type('text/plain').send(value);
  } catch (err) {
    // README: "Oh BOOM! There is a error. Let's notify the middleware."
    idempotencyService.reportError(req);
    next(err);
  }
});

const server = app.listen(Number(process.env.PORT), '127.0.0.1', () => {
  console.log(`READY ${server.address().port}`);
});
