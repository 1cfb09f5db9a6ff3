// node-stored-failure, a flawed member of the idemlab zoo, with one flaw:
// when the effect fails it stores its own 502 as the key's result, and
// replays that failure to every retry: the effect is never run again.
//
// Everything else is sound: Node's plain http module, results (failures
// too) in an append-only file, fsynced before the reply; 409 with
// Retry-After while the owner runs; 422 for another body; the key forwarded
// to the sink; Idempotent-Replayed: true on replays only.
'use strict';
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const file = path.join(process.env.STATE, 'results.jsonl');
const stored = new Map(); // key -> {fp, status, text}
const running = new Map(); // key -> fp
if (fs.existsSync(file)) {
  fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map(JSON.parse).forEach((r) => stored.set(r.key, r));
}
const fd = fs.openSync(file, 'a');

function effect(body, key) {
  return new Promise((resolve, reject) => {
    const headers = {'Content-Type': 'text/plain'};
    if (key !== undefined) headers['Idempotency-Key'] = key;
    const req = http.request(process.env.EFFECT_URL, {method: 'POST', headers}, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        res.statusCode === 200 ? resolve(text) : reject(new Error(`sink answered ${res.statusCode}`));
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

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
    outcome = {status: 200, text: await effect(body, key)};
  } catch (e) {
    outcome = {status: 502, text: `effect failed: ${e.message}\n`};
  }
  if (key !== undefined) {
    // The flaw: a failure is recorded as the key's result, like a success.
    fs.writeSync(fd, JSON.stringify({key, fp, ...outcome}) + '\n');
    fs.fsyncSync(fd);
    stored.set(key, {fp, ...outcome});
    running.delete(key);
  }
  return outcome;
}

const server = http.createServer((req, res) => {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => { size += c.length; if (size <= 4096) chunks.push(c); });
  req.on('end', async () => {
    const body = size > 4096 ? null : Buffer.concat(chunks);
    const {status, text, headers} = await handle(req, body);
    res.writeHead(status, {'Content-Type': 'text/plain; charset=utf-8', ...headers});
    res.end(text);
  });
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
