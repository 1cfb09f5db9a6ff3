// node-stored-failure, a flawed member of the idemlab zoo, with one flaw:
// when the effect fails it stores its own 502 as the key's result, and
// replays that failure to every retry: the effect is never run again.
//
// Everything else is sound: Node's plain http module (through
// ../node-zoo.js), results (failures too) in an append-only file, fsynced
// before the reply; 409 with Retry-After while the owner runs; 422 for
// another body; the key forwarded to the sink; Idempotent-Replayed: true on
// replays only.
'use strict';
const crypto = require('node:crypto');
const zoo = require('../node-zoo.js');

const log = zoo.journal('results.jsonl');
const stored = new Map(); // key -> {fp, status, text}
const running = new Map(); // key -> fp
log.records.forEach((r) => stored.set(r.key, r));

async function handle(req, body) {
  const key = req.headers['idempotency-key'];
  if (body === null) return {status: 413, text: 'body over 4096 bytes\n'};
  if (key !== undefined && !/^[A-Za-z0-9_-]{1,64}$/.test(key)) return {status: 400, text: 'malformed Idempotency-Key\n'};
  const fp = crypto.createHash('sha256').update(body).digest('hex');
  const known = key === undefined ? undefined : stored.get(key);
  if ((known && known.fp !== fp) || (running.has(key) && running.get(key) !== fp)) {
    return {status: 422, text: 'Idempotency-Key reused with another body\n'};
  }
  if (known) return {status: known.status, text: known.text, headers: {'Idempotent-Replayed': 'true'}};
  if (running.has(key)) return {status: 409, text: 'in progress\n', headers: {'Retry-After': '1'}};
  if (key !== undefined) running.set(key, fp);
  let outcome;
  try {
    outcome = {status: 200, text: await zoo.effect(body, key)};
  } catch (e) {
    outcome = {status: 502, text: `effect failed: ${e.message}\n`};
  }
  if (key !== undefined) {
    // The flaw: a failure is recorded as the key's result, like a success.
    log.append({key, fp, ...outcome});
    stored.set(key, {fp, ...outcome});
    running.delete(key);
  }
  return outcome;
}

zoo.serve((req, body) => handle(req, body).then(({status, text, headers}) => [status, text, headers]));
