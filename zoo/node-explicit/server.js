// node-explicit, a sound member of the idemlab zoo: Node's plain http
// module (through ../node-zoo.js), no npm package. Every reply to a keyed
// request says whether it is fresh or replayed (Idempotency-Replayed:
// false|true). A duplicate that arrives while the key's owner runs gets 409
// with Retry-After, as the IETF draft allows. Results live in an append-only
// file, fsynced before the reply; at most 64 keys (429 beyond). The key is
// forwarded to the sink.
'use strict';
const crypto = require('node:crypto');
const zoo = require('../node-zoo.js');

const CAPACITY = 64;
const KEY = /^[\x21-\x7e]{1,255}$/; // an sf-string's visible ASCII, no space

const log = zoo.journal('results.jsonl');
const results = new Map(); // key -> {fp, value}
const running = new Map(); // key -> fp of the owner's body
for (const r of log.records) results.set(r.key, r);

async function handle(req, body) {
  const key = req.headers['idempotency-key'];
  if (req.method !== 'POST') return [405, 'POST only\n', {Allow: 'POST'}];
  if (body === null) return [413, `body over ${zoo.MAX_BODY} bytes\n`];
  if (key === undefined) {
    return zoo.effect(body).then((v) => [200, v], (e) => [502, `effect failed: ${e.message}\n`]);
  }
  if (!KEY.test(key)) return [400, 'malformed Idempotency-Key\n'];
  const fp = crypto.createHash('sha256').update(body).digest('hex');
  const known = results.get(key);
  const owner = running.get(key);
  if ((known && known.fp !== fp) || (owner !== undefined && owner !== fp)) {
    return [422, 'Idempotency-Key reused with another body\n'];
  }
  if (known) return [200, known.value, {'Idempotency-Replayed': 'true'}];
  if (owner !== undefined) return [409, 'a request with this key is in progress\n', {'Retry-After': '1'}];
  if (results.size + running.size >= CAPACITY) return [429, 'too many keys\n'];
  running.set(key, fp);
  let value;
  try {
    value = await zoo.effect(body, key);
    log.append({key, fp, value});
    results.set(key, {key, fp, value});
  } catch (e) {
    return [502, `effect failed: ${e.message}\n`];
  } finally {
    running.delete(key); // a failure releases the key: a retry runs again
  }
  return [200, value, {'Idempotency-Replayed': 'false'}];
}

zoo.serve(handle);
