// What every Node service of the idemlab zoo repeats and none of them is there to show, written once
// (issue 25): the effect call to the lab's sink, an append-only JSON-lines file in $STATE, and the
// server (bodies of MAX_BODY bytes at most, 127.0.0.1:$PORT, the READY line, exit on SIGTERM). The
// idempotency logic, which the zoo exists to test, stays in each server.js, in its own style. It is
// a file beside the service folders, not a service (the zoo's test lists only the folders holding
// target.json), and uses no npm package; a service requires it as require('../node-zoo.js').
'use strict';
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');

const MAX_BODY = 4096;

// effect POSTs body to the sink at EFFECT_URL, forwarding key in Idempotency-Key unless it is
// undefined, and resolves to the sink's value; any reply but 200, or a failed call, rejects.
function effect(body, key) {
  return new Promise((resolve, reject) => {
    const headers = {'Content-Type': 'text/plain'};
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

// journal opens the JSON-lines file name in $STATE for appending: records holds what it held, one
// parsed line each (a line that does not parse throws), and append(record) writes one line and
// fsyncs it before it returns.
function journal(name) {
  const file = path.join(process.env.STATE, name);
  const records = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [];
  const fd = fs.openSync(file, 'a');
  return {
    records,
    append(record) {
      fs.writeSync(fd, JSON.stringify(record) + '\n');
      fs.fsyncSync(fd);
    },
  };
}

// serve answers every request on 127.0.0.1:$PORT with handle(req, body), body the request's bytes or
// null when they are over MAX_BODY; handle resolves to [status, text, headers], sent as text/plain.
// It prints "READY <port>" once it listens; SIGTERM ends the process.
function serve(handle) {
  const server = http.createServer((req, res) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => { size += c.length; if (size <= MAX_BODY) chunks.push(c); });
    req.on('end', async () => {
      const [status, text, headers] = await handle(req, size > MAX_BODY ? null : Buffer.concat(chunks));
      res.writeHead(status, {'Content-Type': 'text/plain; charset=utf-8', ...headers});
      res.end(text);
    });
  });
  server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`READY ${server.address().port}`));
  process.on('SIGTERM', () => process.exit(0));
  return server;
}

module.exports = {MAX_BODY, effect, journal, serve};
