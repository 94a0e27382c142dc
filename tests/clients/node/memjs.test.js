// memjs, a binary-protocol client, against the server at $CLIENT_TEST_SERVER
// (host:port), and, when $CLIENT_TEST_SASL_SERVER is set (user:password@host:port, a
// ferrocache started with -S), its SASL PLAIN login. scripts/test-clients starts the
// servers and runs `node --test` once against ferrocache and once against memcached.
// memjs has no CAS and no multi-get call: its multi-get is many GETs in flight at once
// on one connection, matched to their replies by opaque.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const memjs = require('memjs');

const SERVER = process.env.CLIENT_TEST_SERVER;
const SASL_SERVER = process.env.CLIENT_TEST_SASL_SERVER;
const quiet = { log() {} };

function connect(t, server = SERVER) {
  const client = memjs.Client.create(server, { timeout: 5, retries: 0, logger: quiet });
  t.after(() => client.close());
  return client;
}

async function fresh(t) {
  const mc = connect(t);
  await mc.flush();
  return mc;
}

const value = async (mc, key) => {
  const { value: v } = await mc.get(key);
  return v === null ? null : v.toString('latin1');
};

test('set and get', { skip: !SERVER && 'CLIENT_TEST_SERVER not set' }, async (t) => {
  const mc = await fresh(t);
  assert.equal(await mc.set('a', 'hello', {}), true);
  assert.equal(await value(mc, 'a'), 'hello');
  assert.equal(await value(mc, 'missing'), null);
  assert.equal(await mc.set('empty', '', {}), true);
  assert.equal(await value(mc, 'empty'), '');
  // 768,000 bytes, every byte value.
  const big = Buffer.alloc(768000, Buffer.from(Array.from({ length: 256 }, (_, i) => i)));
  assert.equal(await mc.set('big', big, {}), true);
  assert.ok((await mc.get('big')).value.equals(big));
  await assert.rejects(mc.set('big', Buffer.alloc(1024 * 1024 + 1), {}), /too large/i);
  // A failed set drops the old value.
  assert.equal(await value(mc, 'big'), null);
});

test('multi-get: many GETs in flight at once', { skip: !SERVER && 'CLIENT_TEST_SERVER not set' }, async (t) => {
  const mc = await fresh(t);
  const keys = Array.from({ length: 100 }, (_, i) => `k${i}`);
  await Promise.all(keys.map((k) => mc.set(k, `v${k}`, {})));
  const got = await Promise.all([...keys, 'missing'].map((k) => value(mc, k)));
  assert.deepEqual(got, [...keys.map((k) => `v${k}`), null]);
});

test('add, replace, append', { skip: !SERVER && 'CLIENT_TEST_SERVER not set' }, async (t) => {
  const mc = await fresh(t);
  assert.equal(await mc.add('a', '1', {}), true);
  assert.equal(await mc.add('a', '2', {}), false);
  assert.equal(await mc.replace('missing', '2', {}), false);
  assert.equal(await mc.replace('a', '3', {}), true);
  assert.equal(await mc.append('a', '+'), true);
  assert.equal(await value(mc, 'a'), '3+');
  // memjs 1.3.2's prepend() sends opcode 0x0e, APPEND, so it is not tested here.
  // Not stored (status 5): memjs has no case for it and reports an error.
  await assert.rejects(mc.append('missing', '+'), /not stored/i);
  assert.equal(await value(mc, 'missing'), null);
});

test('delete', { skip: !SERVER && 'CLIENT_TEST_SERVER not set' }, async (t) => {
  const mc = await fresh(t);
  await mc.set('a', '1', {});
  assert.equal(await mc.delete('a'), true);
  assert.equal(await mc.delete('a'), false);
  assert.equal(await value(mc, 'a'), null);
});

test('increment and decrement', { skip: !SERVER && 'CLIENT_TEST_SERVER not set' }, async (t) => {
  const mc = await fresh(t);
  // A miss stores the initial value and returns it.
  assert.deepEqual(await mc.increment('n', 5, { initial: 10 }), { success: true, value: 10 });
  assert.deepEqual(await mc.increment('n', 5, {}), { success: true, value: 15 });
  assert.deepEqual(await mc.decrement('n', 3, {}), { success: true, value: 12 });
  assert.deepEqual(await mc.decrement('n', 100, {}), { success: true, value: 0 });
  // Padded in place with spaces, as memcached does.
  assert.equal(await value(mc, 'n'), '0 ');
  await mc.set('s', 'abc', {});
  await assert.rejects(mc.increment('s', 1, {}), /Incr\/Decr on non-numeric value/);
});

test('touch, flush and stats', { skip: !SERVER && 'CLIENT_TEST_SERVER not set' }, async (t) => {
  const mc = await fresh(t);
  await mc.set('a', '1', {});
  assert.equal(await mc.touch('a', 100), true);
  assert.equal(await mc.touch('missing', 100), false);
  assert.equal(await value(mc, 'a'), '1');
  const stats = await new Promise((resolve, reject) =>
    mc.stats((err, server, s) => (err ? reject(err) : resolve(s))));
  assert.ok(Number(stats.curr_items) >= 1); // flush_all does not lower it at once
  assert.equal(stats.threads, '2');
  assert.match(stats.version, /^1\.6\.18/);
  await mc.flush();
  assert.equal(await value(mc, 'a'), null);
});

test('SASL PLAIN', { skip: !SASL_SERVER && 'CLIENT_TEST_SASL_SERVER not set' }, async (t) => {
  const mc = connect(t, SASL_SERVER);
  assert.equal(await mc.set('a', 'secret', {}), true);
  assert.equal(await value(mc, 'a'), 'secret');
  const wrong = connect(t, SASL_SERVER.replace(/:[^:@]*@/, ':wrong@'));
  await assert.rejects(wrong.get('a'));
});
