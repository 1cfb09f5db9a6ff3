// node-unforwarded, a flawed member of the idemlab zoo, with one flaw: it
// claims a durable store but does not forward the key to the sink. Where
// the effect was applied and its reply never came back (a crash after the
// effect, a 500 after the effect), the retry finds no result and the sink,
// given no key, applies the effect a second time.
//
// Everything else is sound: Node's plain http module, results in an
// append-only file, fsynced before the reply; a duplicate waits for the
// owner's promise and replays; 422 for another body; a failure releases the
// key; Idempotent-Replayed: true|false on every keyed reply.
'use strict';
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const file = path.join(process.env.STATE, 'results.jsonl');
const results = new Map(); // key -> {fp, value}
const owners = new Map(); // key -> {fp, done: a promise settled when the owner ends}
for (const line of fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n') : []) {
  if (line) { const r = JSON.parse(line); results.set(r.key, r); }
}
const fd = fs.openSync(file, 'a');

function effect(body) { // the flaw: no Idempotency-Key on the sink call
  return new Promise((resolve, reject) => {
    const req = http.request(process.env.EFFECT_URL, {method: 'POST', headers: {'Content-Type': 'text/plain'}}, (res) => {
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
    const value = await effect(body);
    fs.writeSync(fd, JSON.stringify({key, fp, value}) + '\n');
    fs.fsyncSync(fd);
    results.set(key, {key, fp, value});
    return [200, value, 'false'];
  } catch (e) {
    return [502, `effect failed: ${e.message}\n`];
  } finally {
    owners.delete(key);
    end();
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => { size += c.length; if (size <= 4096) chunks.push(c); });
  req.on('end', async () => {
    const [status, text, replayed, retryAfter] = await handle(req.headers['idempotency-key'], size > 4096 ? null : Buffer.concat(chunks));
    const headers = {'Content-Type': 'text/plain; charset=utf-8'};
    if (replayed) headers['Idempotent-Replayed'] = replayed;
    if (retryAfter) headers['Retry-After'] = retryAfter;
    res.writeHead(status, headers);
    res.end(text);
  });
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
