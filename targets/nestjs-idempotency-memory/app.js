// idemlab target: @node-idempotency/nestjs 1.0.4 with its memory storage adapter, in a minimal NestJS
// 10 app on express, wired as its README's "usage" shows: NodeIdempotencyModule.forRootAsync({storage:
// {adapter: memory}}) imported by the app module, and @Idempotent() on the handler. Plain JavaScript:
// each decorator is applied as the TypeScript compiler applies it (Reflect.decorate), so the app runs
// with no build step. The handler performs the effect through the lab's sink. See README.md.
'use strict';
require('reflect-metadata');
const { NestFactory } = require('@nestjs/core');
const { Module, Controller, Post, HttpCode, Body } = require('@nestjs/common');
const { NodeIdempotencyModule, Idempotent, StorageAdapterEnum } = require('@node-idempotency/nestjs');

// decorateMethod applies method (and parameter) decorators as TypeScript's emitted __decorate does.
function decorateMethod(cls, name, decorators) {
  const desc = Object.getOwnPropertyDescriptor(cls.prototype, name);
  Object.defineProperty(cls.prototype, name, Reflect.decorate(decorators, cls.prototype, name, desc) || desc);
}

// The controller: POST /effect, made idempotent by the README's @Idempotent() decorator. The handler
// POSTs the body to the lab's sink and returns the sink's value; a non-200 sink reply throws, and
// NestJS's default exception filter answers 500. A success is answered 201, NestJS's default for a
// POST, set with @HttpCode(201) as the README's example sets it.
class EffectController {
  async effect(body) {
    const reply = await fetch(process.env.EFFECT_URL, { method: 'POST', body: typeof body === 'string' ? body : '' });
    const value = await reply.text();
    if (reply.status !== 200) throw new Error(`effect sink answered ${reply.status}: ${value}`);
    return value;
  }
}
// @Idempotent() @Post('effect') @HttpCode(201) effect(@Body() body)
decorateMethod(EffectController, 'effect', [Idempotent(), Post('effect'), HttpCode(201), (target, key) => Body()(target, key, 0)]);
// @Controller()
const Effects = Reflect.decorate([Controller()], EffectController);

// README, "Register the module": the memory adapter, no further idempotency options.
class AppModule {}
const App = Reflect.decorate([Module({
  imports: [NodeIdempotencyModule.forRootAsync({ storage: { adapter: StorageAdapterEnum.memory } })],
  controllers: [Effects],
})], AppModule);

async function main() {
  const app = await NestFactory.create(App, { logger: ['error', 'warn'] });
  // NestJS parses JSON and urlencoded bodies only; the lab sends text/plain (or no Content-Type). The
  // harness reads every body as text (body-parser's 100kb limit), so @Body() is the exact string the
  // client sent and the library fingerprints that string.
  app.useBodyParser('text', { type: () => true });
  await app.listen(Number(process.env.PORT), '127.0.0.1');
  console.log(`READY ${app.getHttpServer().address().port}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
