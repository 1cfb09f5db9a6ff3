// idemlab's glue for the three powertools-redis-* targets: what their harnesses add around
// @aws-lambda-powertools/idempotency and what they set up alike, written once (issue 25). Each
// app.js keeps what differs between them: its IdempotencyConfig, the function it wraps with
// makeIdempotent and how that is called (with a Lambda-like context or without). Like node-glue.js,
// which it uses, it is a file beside the target folders, not a target (the runner lists only the
// folders of targets/), and a target's folder digest does not cover it. It requires no npm package
// itself: it loads the harness's packages through the harness's own require, so they resolve in the
// harness's node_modules. A harness requires it as require('../powertools-glue.js'). Not the
// library's code: the lab's.
'use strict';
const { randomUUID } = require('node:crypto');
const glue = require('./node-glue.js');

// applyEffect is the effect: it POSTs the event's body to the lab's sink and returns the sink's value,
// which the library stores as the key's result. A non-200 sink reply throws.
async function applyEffect(event) {
  const reply = await fetch(process.env.EFFECT_URL, { method: 'POST', body: event.body });
  const value = await reply.text();
  if (reply.status !== 200) throw new Error(`effect sink answered ${reply.status}: ${value}`);
  return value;
}

// lambdaContext is a Lambda-like context for one request: its deadline is timeoutMs after the
// request arrived, as a function's timeout counts from its invocation. The handler is not stopped at
// the deadline (nothing here enforces it): only the library reads it.
function lambdaContext(timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  return {
    functionName: 'idemlab-target',
    awsRequestId: randomUUID(),
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
  };
}

// statusOf is the harness's HTTP answer to the library's errors (the library, written for Lambda,
// defines none).
function statusOf(err) {
  switch (err && err.name) {
    case 'IdempotencyAlreadyInProgressError': return 409;
    case 'IdempotencyValidationError': return 422;
    default: return 500;
  }
}

// main starts a harness. harnessRequire is the harness's require. With lambdaContext, main first
// reads LAMBDA_TIMEOUT_MS (a positive number of ms). It connects the run's redis and puts the
// library's cache persistence layer on it, then asks the harness for its call:
// idempotent(library, persistenceStore), library the exports of @aws-lambda-powertools/idempotency,
// returns call(event, context), context a fresh Lambda-like context per request with lambdaContext,
// else undefined. It serves POST /effect on 127.0.0.1:$PORT (the READY line once it listens): each
// request becomes an API-Gateway-like event, and the call's value is answered 200 text/plain, its
// error statusOf's status with "name: message". A failure to start is printed on stderr, and the
// process exits 1.
function main(harnessRequire, { lambdaContext: withContext }, idempotent) {
  start(harnessRequire, withContext, idempotent).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}

async function start(harnessRequire, withContext, idempotent) {
  const timeoutMs = Number(process.env.LAMBDA_TIMEOUT_MS);
  if (withContext && !(timeoutMs > 0)) throw new Error(`LAMBDA_TIMEOUT_MS=${process.env.LAMBDA_TIMEOUT_MS}: want a positive number of ms`);
  const express = harnessRequire('express');
  const library = harnessRequire('@aws-lambda-powertools/idempotency');
  const { CachePersistenceLayer } = harnessRequire('@aws-lambda-powertools/idempotency/cache');
  const { createClient } = harnessRequire('@redis/client');
  // Docs, "CachePersistenceLayer" / "Using Redis Client": a client created and connected first.
  const client = await createClient({ url: process.env.REDIS_URL }).connect();
  const persistenceStore = new CachePersistenceLayer({ client });
  const call = idempotent(library, persistenceStore);

  const app = glue.textApp(express); // every body read as text (express.text's 100kb limit)
  app.post('/effect', async (req, res) => {
    // An API-Gateway-like event: node lowercases header names.
    const event = { httpMethod: req.method, path: req.path, headers: req.headers, body: typeof req.body === 'string' ? req.body : '' };
    try {
      const value = await call(event, withContext ? lambdaContext(timeoutMs) : undefined);
      res.status(200).type('text/plain').send(value);
    } catch (err) {
      res.status(statusOf(err)).type('text/plain').send(`${err.name}: ${err.message}\n`);
    }
  });
  glue.listen(app);
}

module.exports = { applyEffect, main };
