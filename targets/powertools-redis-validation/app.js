// idemlab target: @aws-lambda-powertools/idempotency 2.35.0 with its cache persistence layer
// (CachePersistenceLayer on @redis/client, the run's redis). The Lambda-style handler (event, context)
// is wrapped with makeIdempotent as the README's "Function wrapper" shows, and called WITH a
// Lambda-like context, which makeIdempotent registers itself (docs, "Lambda timeouts"): the in-progress
// record then expires at the context's deadline. Payload validation (docs, "Payload validation") is
// on: payloadValidationJmesPath selects the request's body. An HTTP server (express 4, through the
// lab's glue ../node-glue.js) turns each request into the event and the context. See README.md.
'use strict';
const { randomUUID } = require('node:crypto');
const express = require('express');
const { makeIdempotent, IdempotencyConfig } = require('@aws-lambda-powertools/idempotency');
const { CachePersistenceLayer } = require('@aws-lambda-powertools/idempotency/cache');
const { createClient } = require('@redis/client');
const glue = require('../node-glue.js');

// The effect: it POSTs the event's body to the lab's sink and returns the sink's value, which the
// library stores as the key's result. A non-200 sink reply throws.
async function applyEffect(event) {
  const reply = await fetch(process.env.EFFECT_URL, { method: 'POST', body: event.body });
  const value = await reply.text();
  if (reply.status !== 200) throw new Error(`effect sink answered ${reply.status}: ${value}`);
  return value;
}

// A Lambda-like context for one request: its deadline is LAMBDA_TIMEOUT_MS after the request
// arrived, as a function's timeout counts from its invocation. The handler is not stopped at the
// deadline (nothing here enforces it): only the library reads it.
function lambdaContext(timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  return {
    functionName: 'idemlab-target',
    awsRequestId: randomUUID(),
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
  };
}

// The harness's HTTP answer to the library's errors (the library, written for Lambda, defines none).
function statusOf(err) {
  switch (err && err.name) {
    case 'IdempotencyAlreadyInProgressError': return 409;
    case 'IdempotencyValidationError': return 422;
    default: return 500;
  }
}

async function main() {
  const timeoutMs = Number(process.env.LAMBDA_TIMEOUT_MS);
  if (!(timeoutMs > 0)) throw new Error(`LAMBDA_TIMEOUT_MS=${process.env.LAMBDA_TIMEOUT_MS}: want a positive number of ms`);
  // Docs, "CachePersistenceLayer" / "Using Redis Client": a client created and connected first.
  const client = await createClient({ url: process.env.REDIS_URL }).connect();
  const persistenceStore = new CachePersistenceLayer({ client });
  // Docs, "Choosing a payload subset for idempotency": the key is the Idempotency-Key header only;
  // docs, "Payload validation": a retry under the same key must carry the same body.
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'headers."idempotency-key"', payloadValidationJmesPath: 'body' });
  // README, "Function wrapper": the Lambda handler itself made idempotent.
  const handler = makeIdempotent(async (event, _context) => applyEffect(event), { persistenceStore, config });

  const app = glue.textApp(express); // every body read as text (express.text's 100kb limit)
  app.post('/effect', async (req, res) => {
    // An API-Gateway-like event: node lowercases header names.
    const event = { httpMethod: req.method, path: req.path, headers: req.headers, body: typeof req.body === 'string' ? req.body : '' };
    try {
      const value = await handler(event, lambdaContext(timeoutMs));
      res.status(200).type('text/plain').send(value);
    } catch (err) {
      res.status(statusOf(err)).type('text/plain').send(`${err.name}: ${err.message}\n`);
    }
  });
  glue.listen(app);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
