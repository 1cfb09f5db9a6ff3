// node-explicit, a sound member of the idemlab zoo: Node's plain http
// module, no npm package. Every reply to a keyed request says whether it is
// fresh or replayed (Idempotency-Replayed: false|true). A duplicate that
// arrives while the key's owner runs gets 409 with Retry-After, as the
// IETF draft allows. Results live in an append-only file, fsynced before
// the reply; at most 64 keys (429 beyond). The key is forwarded to the sink.
'use strict';
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const MAX_BODY = 4096;
const CAPACITY = 64;
const KEY = /^[\x21-\x7e]{1,255}$/; // an sf-string's visible ASCII, no space

const file = path.join(process.env.STATE, 'results.jsonl');
const results = new Map(); // key -> {fp, value}
const running = new Map(); // key -> fp of the owner's body
if (fs.existsSync(file)) {
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (line) { const r = JSON.parse(line); results.set(r.key, r); }
  }
}
const fd = fs.openSync(file, 'a');

function effect(body, key) {
  return new Promise((resolve, reject) => {
    const headers = {'Content-Type': 'text/plain', 'Content-Length': body.length};
    if (key !== undefined) headers['Idempotency-Key'] = key;
    const req = http.request(process.env.EFFECT_URL, {method: 'POST', headers}, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => res.statusCode === 200 ? resolve(text) : reject(new Error(`sink answered ${res.statusCode}`)));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

function send(res, status, text, headers = {}) {
  res.writeHead(status, {'Content-Type': 'text/plain; charset=utf-8', ...headers});
  res.end(text);
}

async function handle(req, res, body) {
  const key = req.headers['idempotency-key'];
  if (req.method !== 'POST') return send(res, 405, 'POST only\n', {Allow: 'POST'});
  if (body === null) return send(res, 413, `body over ${MAX_BODY} bytes\n`);
  if (key === undefined) {
    return effect(body).then((v) => send(res, 200, v), (e) => send(res, 502, `effect failed: ${e.message}\n`));
  }
  if (!KEY.test(key)) return send(res, 400, 'malformed Idempotency-Key\n');
  const fp = crypto.createHash('sha256').update(body).digest('hex');
  const known = results.get(key);
  const owner = running.get(key);
  if ((known && known.fp !== fp) || (owner !== undefined && owner !== fp)) {
    return send(res, 422, 'Idempotency-Key reused with another body\n');
  }
  if (known) return send(res, 200, known.value, {'Idempotency-Replayed': 'true'});
  if (owner !== undefined) return send(res, 409, 'a request with this key is in progress\n', {'Retry-After': '1'});
  if (results.size + running.size >= CAPACITY) return send(res, 429, 'too many keys\n');
  running.set(key, fp);
  let value;
  try {
    value = await effect(body, key);
    fs.writeSync(fd, JSON.stringify({key, fp, value}) + '\n');
    fs.fsyncSync(fd);
    results.set(key, {key, fp, value});
  } catch (e) {
    return send(res, 502, `effect failed: ${e.message}\n`);
  } finally {
    running.delete(key); // a failure releases the key: a retry runs again
  }
  send(res, 200, value, {'Idempotency-Replayed': 'false'});
}

const server = http.createServer((req, res) => {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => { size += c.length; if (size <= MAX_BODY) chunks.push(c); });
  req.on('end', () => handle(req, res, size > MAX_BODY ? null : Buffer.concat(chunks)));
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
