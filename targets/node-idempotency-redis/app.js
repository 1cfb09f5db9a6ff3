// idemlab target: @node-idempotency/core 1.0.11 with @node-idempotency/storage-adapter-redis, on express 4.
// The family's express plugin (@node-idempotency/express) is not published; the lab's glue (../node-glue.js)
// has the middleware that calls the core as that plugin does, and the plain express handler that calls the
// effect sink (see README.md). This file keeps what is this target's own: the core and its storage adapter.
'use strict';
const express = require('express');
const core = require('@node-idempotency/core');
const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');
const glue = require('../node-glue.js');

// The plugin's buildStorageAdapter: a redis client from its options, connected before use.
const storage = new RedisStorageAdapter({ url: process.env.REDIS_URL });
const idempotency = new core.Idempotency(storage, {});

const app = glue.textApp(express); // every body read as text, before the middleware
app.use(glue.pluginMiddleware(idempotency, core));
app.post('/effect', glue.effectHandler);

storage.connect().then(() => glue.listen(app));
