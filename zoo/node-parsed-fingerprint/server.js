// node-parsed-fingerprint, a flawed member of the idemlab zoo, with one
// flaw: it fingerprints the body as parsed by its Content-Type (text, JSON
// or a form), the way an app hashes req.body after its body parsers ran.
// A request without a Content-Type is not parsed, has no document to
// compare, and the check is skipped: another body sent that way under a
// used key gets the first body's result.
//
// Everything else is sound: Node's plain http module (through
// ../node-zoo.js), results in an append-only file, fsynced before the
// reply; 409 with Retry-After while the owner runs; 422 for another parsed
// body; the key forwarded to the sink; Idempotent-Replayed: true on replays
// only.
'use strict';
const crypto = require('node:crypto');
const zoo = require('../node-zoo.js');

const log = zoo.journal('results.jsonl');
const results = new Map(); // key -> {fp, value}
const running = new Map(); // key -> fp
for (const r of log.records) results.set(r.key, r);

// parse returns the request's document, or undefined where no parser applies.
function parse(type, body) {
  const mime = (type || '').split(';')[0].trim().toLowerCase();
  if (mime.startsWith('text/')) return body.toString('utf8');
  if (mime === 'application/json') { try { return JSON.parse(body); } catch { return null; } }
  if (mime === 'application/x-www-form-urlencoded') return [...new URLSearchParams(body.toString())].sort();
  return undefined;
}

async function handle(req, body) {
  const key = req.headers['idempotency-key'];
  if (body === null) return [413, 'body over 4096 bytes\n'];
  if (key !== undefined && !/^[A-Za-z0-9_-]{1,64}$/.test(key)) return [400, 'malformed Idempotency-Key\n'];
  const doc = parse(req.headers['content-type'], body);
  const fp = doc === undefined ? undefined : crypto.createHash('sha256').update(JSON.stringify(doc)).digest('hex');
  if (key !== undefined) {
    const known = results.get(key);
    const owner = running.get(key);
    // The flaw: without a document there is nothing to compare, so any body passes.
    if (fp !== undefined && ((known && known.fp !== fp) || (owner !== undefined && owner !== fp))) {
      return [422, 'Idempotency-Key reused with another body\n'];
    }
    if (known) return [200, known.value, {'Idempotent-Replayed': 'true'}];
    if (running.has(key)) return [409, 'in progress\n', {'Retry-After': '1'}];
    running.set(key, fp);
  }
  try {
    const value = await zoo.effect(body, key);
    if (key !== undefined) {
      log.append({key, fp, value});
      results.set(key, {key, fp, value});
    }
    return [200, value];
  } catch (e) {
    return [502, `effect failed: ${e.message}\n`];
  } finally {
    running.delete(key);
  }
}

zoo.serve(handle);
