// idemlab target: @aws-lambda-powertools/idempotency 2.35.0 with its cache persistence layer
// (CachePersistenceLayer on @redis/client, the run's redis), the function wrapped with makeIdempotent
// as the README's "Function wrapper" shows and called WITHOUT a Lambda context. The lab's glue
// (../powertools-glue.js, on ../node-glue.js) connects the store, serves express 4 and turns each
// request into the event the function receives; this file keeps what is this variant's own: the
// config, the function wrapped and how it is called. See README.md.
'use strict';
const pt = require('../powertools-glue.js');

pt.main(require, { lambdaContext: false }, ({ makeIdempotent, IdempotencyConfig }, persistenceStore) => {
  // Docs, "Choosing a payload subset for idempotency": the key is the Idempotency-Key header only.
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'headers."idempotency-key"' });
  // The function made idempotent: the effect, which takes the event alone.
  const handler = makeIdempotent(pt.applyEffect, { persistenceStore, config });
  return (event) => handler(event); // no second argument: no Lambda context
});
