// node-stuck-key, a flawed member of the idemlab zoo, with one flaw: when
// the effect fails it marks the key failed-in-progress instead of releasing
// it, and answers every later request with that key 409 (no Retry-After:
// nothing is running that a later retry could wait for).
//
// Everything else is sound: Node's plain http module, results in an
// append-only file, fsynced before the reply; a duplicate waits for the
// owner's promise and replays, so no 409 is ever sent while an owner runs;
// 422 for another body; the key forwarded to the sink; a marker on every
// keyed reply (Idempotency-Replayed: true|false).
'use strict';
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const file = path.join(process.env.STATE, 'results.jsonl');
const keys = new Map(); // key -> {fp, value} | {fp, running: promise} | {fp, failed: true}
for (const line of fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n') : []) {
  if (line) { const r = JSON.parse(line); keys.set(r.key, r); }
}
const fd = fs.openSync(file, 'a');

function effect(body, key) {
  return new Promise((resolve, reject) => {
    const headers = {'Content-Type': 'text/plain'};
    if (key !== undefined) headers['Idempotency-Key'] = key;
    const req = http.request(process.env.EFFECT_URL, {method: 'POST', headers}, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => res.statusCode === 200 ? resolve(text) : reject(new Error(`sink answered ${res.statusCode}`)));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function handle(key, body) {
  if (body === null) return [413, 'body over 4096 bytes\n'];
  if (key === undefined) return effect(body).then((v) => [200, v], (e) => [502, `effect failed: ${e.message}\n`]);
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
    const value = await effect(body, key);
    fs.writeSync(fd, JSON.stringify({key, fp, value}) + '\n');
    fs.fsyncSync(fd);
    keys.set(key, {fp, value});
    return [200, value, 'false'];
  } catch (e) {
    keys.set(key, {fp, failed: true}); // the flaw: never released
    return [502, `effect failed: ${e.message}\n`];
  } finally {
    end();
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => { size += c.length; if (size <= 4096) chunks.push(c); });
  req.on('end', async () => {
    const [status, text, replayed] = await handle(req.headers['idempotency-key'], size > 4096 ? null : Buffer.concat(chunks));
    const headers = {'Content-Type': 'text/plain; charset=utf-8'};
    if (replayed) headers['Idempotency-Replayed'] = replayed;
    res.writeHead(status, headers);
    res.end(text);
  });
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
