// node-unforwarded, a flawed member of the idemlab zoo, with one flaw: it
// claims a durable store but does not forward the key to the sink. Where
// the effect was applied and its reply never came back (a crash after the
// effect, a 500 after the effect), the retry finds no result and the sink,
// given no key, applies the effect a second time.
//
// Everything else is sound: Node's plain http module (through
// ../node-zoo.js), results in an append-only file, fsynced before the
// reply; a duplicate waits for the owner's promise and replays; 422 for
// another body; a failure releases the key; Idempotent-Replayed: true|false
// on every keyed reply.
'use strict';
const crypto = require('node:crypto');
const zoo = require('../node-zoo.js');

const log = zoo.journal('results.jsonl');
const results = new Map(); // key -> {fp, value}
const owners = new Map(); // key -> {fp, done: a promise settled when the owner ends}
for (const r of log.records) results.set(r.key, r);

async function handle(key, body) {
  if (body === null) return [413, 'body over 4096 bytes\n'];
  if (key === undefined) return zoo.effect(body).then((v) => [200, v], (e) => [502, `effect failed: ${e.message}\n`]);
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(key)) return [400, 'malformed Idempotency-Key\n'];
  const fp = crypto.createHash('sha256').update(body).digest('hex');
  const deadline = Date.now() + 4000;
  for (;;) {
    const known = results.get(key);
    const owner = owners.get(key);
    if ((known && known.fp !== fp) || (owner && owner.fp !== fp)) return [422, 'Idempotency-Key reused with another body\n'];
    if (known) return [200, known.value, 'true'];
    if (!owner) break;
    const timeout = new Promise((resolve) => setTimeout(resolve, deadline - Date.now(), 'late'));
    if (await Promise.race([owner.done, timeout]) === 'late') return [409, 'in progress\n', undefined, '1'];
  }
  let end;
  owners.set(key, {fp, done: new Promise((resolve) => { end = resolve; })});
  try {
    const value = await zoo.effect(body); // the flaw: no Idempotency-Key on the sink call
    log.append({key, fp, value});
    results.set(key, {key, fp, value});
    return [200, value, 'false'];
  } catch (e) {
    return [502, `effect failed: ${e.message}\n`];
  } finally {
    owners.delete(key);
    end();
  }
}

zoo.serve(async (req, body) => {
  const [status, text, replayed, retryAfter] = await handle(req.headers['idempotency-key'], body);
  const headers = {};
  if (replayed) headers['Idempotent-Replayed'] = replayed;
  if (retryAfter) headers['Retry-After'] = retryAfter;
  return [status, text, headers];
});
