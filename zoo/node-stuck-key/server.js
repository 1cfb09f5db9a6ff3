// node-stuck-key, a flawed member of the idemlab zoo, with one flaw: when
// the effect fails it marks the key failed-in-progress instead of releasing
// it, and answers every later request with that key 409 (no Retry-After:
// nothing is running that a later retry could wait for).
//
// Everything else is sound: Node's plain http module (through
// ../node-zoo.js), results in an append-only file, fsynced before the
// reply; a duplicate waits for the owner's promise and replays, so no 409
// is ever sent while an owner runs; 422 for another body; the key forwarded
// to the sink; a marker on every keyed reply (Idempotency-Replayed:
// true|false).
'use strict';
const crypto = require('node:crypto');
const zoo = require('../node-zoo.js');

const log = zoo.journal('results.jsonl');
const keys = new Map(); // key -> {fp, value} | {fp, running: promise} | {fp, failed: true}
for (const r of log.records) keys.set(r.key, r);

async function handle(key, body) {
  if (body === null) return [413, 'body over 4096 bytes\n'];
  if (key === undefined) return zoo.effect(body).then((v) => [200, v], (e) => [502, `effect failed: ${e.message}\n`]);
  if (!/^[\x21-\x7e]{1,200}$/.test(key)) return [400, 'malformed Idempotency-Key\n'];
  const fp = crypto.createHash('sha256').update(body).digest('hex');
  for (let k = keys.get(key); k !== undefined; k = keys.get(key)) {
    if (k.fp !== fp) return [422, 'Idempotency-Key reused with another body\n'];
    if (k.value !== undefined) return [200, k.value, 'true'];
    if (k.failed) return [409, 'a request with this key is in progress\n'];
    await k.running;
  }
  let end;
  keys.set(key, {fp, running: new Promise((resolve) => { end = resolve; })});
  try {
    const value = await zoo.effect(body, key);
    log.append({key, fp, value});
    keys.set(key, {fp, value});
    return [200, value, 'false'];
  } catch (e) {
    keys.set(key, {fp, failed: true}); // the flaw: never released
    return [502, `effect failed: ${e.message}\n`];
  } finally {
    end();
  }
}

zoo.serve((req, body) => handle(req.headers['idempotency-key'], body)
  .then(([status, text, replayed]) => [status, text, replayed ? {'Idempotency-Replayed': replayed} : {}]));
