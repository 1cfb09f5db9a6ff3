// idemlab's glue for the Node.js targets: what every JS harness under targets/ adds around its
// library, written once (issue 25). It is a file beside the target folders, not a target: the runner
// lists only the folders of targets/. It requires no npm package (a harness passes in its own express
// and its library's exports), so it needs no node_modules of its own. A harness requires it as
// require('../node-glue.js'); see docs/targets.md. Not the library's code: the lab's.
'use strict';

// textApp returns an express app that reads every body as text, whatever its Content-Type (or none),
// so the handler forwards the exact bytes the client sent and the library sees that string;
// express.text's default limit is 100kb.
function textApp(express) {
  const app = express();
  app.use(express.text({ type: () => true }));
  return app;
}

// effect performs the request's effect: it POSTs the body to EFFECT_URL (the lab's sink applies it and
// answers its value) and answers 200 with that value as text/plain. A non-200 sink reply, or a failed
// fetch, throws.
async function effect(req, res) {
  const reply = await fetch(process.env.EFFECT_URL, { method: 'POST', body: typeof req.body === 'string' ? req.body : '' });
  const value = await reply.text();
  if (reply.status !== 200) throw new Error(`effect sink answered ${reply.status}: ${value}`);
  res.status(200).type('text/plain').send(value);
}

// effectHandler is the plain express handler: the effect, its error to next (express's default error
// handler answers 500).
async function effectHandler(req, res, next) {
  try {
    await effect(req, res);
  } catch (err) {
    next(err);
  }
}

// listen serves app on 127.0.0.1:$PORT and prints "READY <port>" once it listens.
function listen(app) {
  const server = app.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
  return server;
}

// The plugin's error-code → status map and its replay and retry headers (from @node-idempotency/shared).
const STATUS = { IDEMPOTENCY_FINGERPRINT_MISSMATCH: 422, IDEMPOTENCY_KEY_LEN_EXEEDED: 400, IDEMPOTENCY_KEY_MISSING: 400, REQUEST_IN_PROGRESS: 409 };

// The @node-idempotency family's express plugin (@node-idempotency/express) is not published;
// pluginMiddleware calls the core as that plugin's middleware does (see
// targets/node-idempotency-memory/README.md). idempotency is the harness's core instance, core the
// exports of its @node-idempotency/core (for IdempotencyError and IdempotencyErrorCodes).
function pluginMiddleware(idempotency, { IdempotencyError, IdempotencyErrorCodes }) {
  // The plugin's middleware: onRequest before the handler; the first response's send stores it with onResponse.
  return async function idempotencyMiddleware(req, res, next) {
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
  };
}

module.exports = { textApp, effect, effectHandler, listen, pluginMiddleware };
