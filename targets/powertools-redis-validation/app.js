// idemlab target: @aws-lambda-powertools/idempotency 2.35.0 with its cache persistence layer
// (CachePersistenceLayer on @redis/client, the run's redis). The Lambda-style handler (event, context)
// is wrapped with makeIdempotent as the README's "Function wrapper" shows, and called WITH a
// Lambda-like context, which makeIdempotent registers itself (docs, "Lambda timeouts"): the in-progress
// record then expires at the context's deadline. Payload validation (docs, "Payload validation") is
// on: payloadValidationJmesPath selects the request's body. The lab's glue (../powertools-glue.js, on
// ../node-glue.js) connects the store, serves express 4 and turns each request into the event and
// the context; this file keeps what is this variant's own. See README.md.
'use strict';
const pt = require('../powertools-glue.js');

pt.main(require, { lambdaContext: true }, ({ makeIdempotent, IdempotencyConfig }, persistenceStore) => {
  // Docs, "Choosing a payload subset for idempotency": the key is the Idempotency-Key header only;
  // docs, "Payload validation": a retry under the same key must carry the same body.
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'headers."idempotency-key"', payloadValidationJmesPath: 'body' });
  // README, "Function wrapper": the Lambda handler itself made idempotent.
  const handler = makeIdempotent(async (event, _context) => pt.applyEffect(event), { persistenceStore, config });
  return (event, context) => handler(event, context); // context: Lambda-like, LAMBDA_TIMEOUT_MS
});
