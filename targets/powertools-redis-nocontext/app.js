// idemlab target: @aws-lambda-powertools/idempotency 2.35.0 with its cache persistence layer
// (CachePersistenceLayer on @redis/client, the run's redis), the function wrapped with makeIdempotent
// as the README's "Function wrapper" shows and called WITHOUT a Lambda context. An HTTP server (express
// 4, through the lab's glue ../node-glue.js) turns each request into the event the function receives.
// See README.md.
'use strict';
const express = require('express');
const { makeIdempotent, IdempotencyConfig } = require('@aws-lambda-powertools/idempotency');
const { CachePersistenceLayer } = require('@aws-lambda-powertools/idempotency/cache');
const { createClient } = require('@redis/client');
const glue = require('../node-glue.js');

// The function made idempotent: the effect. It POSTs the event's body to the lab's sink and returns
// the sink's value, which the library stores as the key's result. A non-200 sink reply throws.
async function applyEffect(event) {
  const reply = await fetch(process.env.EFFECT_URL, { method: 'POST', body: event.body });
  const value = await reply.text();
  if (reply.status !== 200) throw new Error(`effect sink answered ${reply.status}: ${value}`);
  return value;
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
  // Docs, "CachePersistenceLayer" / "Using Redis Client": a client created and connected first.
  const client = await createClient({ url: process.env.REDIS_URL }).connect();
  const persistenceStore = new CachePersistenceLayer({ client });
  // Docs, "Choosing a payload subset for idempotency": the key is the Idempotency-Key header only.
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'headers."idempotency-key"' });
  const handler = makeIdempotent(applyEffect, { persistenceStore, config });

  const app = glue.textApp(express); // every body read as text (express.text's 100kb limit)
  app.post('/effect', async (req, res) => {
    // An API-Gateway-like event: node lowercases header names.
    const event = { httpMethod: req.method, path: req.path, headers: req.headers, body: typeof req.body === 'string' ? req.body : '' };
    try {
      const value = await handler(event); // no second argument: no Lambda context
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
