// Drives the Consul double with the official npm `consul` client (2.x): registers a
// service with a TTL check, follows it with the client's blocking-query watch, passes
// the check, lets it expire, deregisters; then the KV store (get, raw, set with cas,
// a blocking watch on a key, delete). Exits non-zero on the first answer that is
// not what the client (and Consul's docs) expect. Usage: node consul.js HOST:PORT
'use strict';
const Consul = require('consul');

const [host, port] = process.argv[2].split(':');
const consul = new Consul({ host, port: Number(port) });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function check(cond, what, got) {
  if (!cond) {
    console.error(`consul double MISMATCH: ${what}${got === undefined ? '' : `: got ${JSON.stringify(got)}`}`);
    process.exit(1);
  }
  console.log(`ok - ${what}`);
}

async function until(pred, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) {
      console.log(`ok - ${what}`);
      return;
    }
    await sleep(20);
  }
  check(false, what);
}

(async () => {
  const leader = await consul.status.leader();
  check(typeof leader === 'string' && leader.length > 0, 'status.leader answers a string', leader);

  await consul.agent.service.register({
    name: 'npm-web', id: 'npm-web-1', address: '10.9.0.1', port: 8091, tags: ['services'],
    meta: { weight: '2' }, check: { ttl: '2s', deregistercriticalserviceafter: '30s' },
  });
  const services = await consul.agent.service.list();
  check(services['npm-web-1'] && services['npm-web-1'].Service === 'npm-web', 'agent.service.list has the service', services);
  const checks = await consul.agent.check.list();
  check(checks['service:npm-web-1'] && checks['service:npm-web-1'].Status === 'critical',
    'the TTL check gets ID service:<id> and starts critical', checks);

  let list = await consul.health.service({ service: 'npm-web', passing: true });
  check(Array.isArray(list) && list.length === 0, 'health.service?passing hides a critical instance', list);
  list = await consul.health.service({ service: 'npm-web' });
  check(list.length === 1, 'health.service without passing shows it', list);

  // The client's watch runs blocking queries (index + wait) in a loop.
  const changes = [];
  const watch = consul.watch({
    method: consul.health.service,
    options: { service: 'npm-web', passing: true, wait: '5s' },
    backoffFactor: 50,
  });
  watch.on('change', (data, res) => changes.push({ data, index: BigInt(res.headers['x-consul-index']) }));
  watch.on('error', (err) => check(false, 'the watch runs without errors', String(err)));
  await until(() => changes.length >= 1, 3000, 'the watch delivers the current (empty) list');

  const t0 = Date.now();
  await consul.agent.check.pass({ id: 'service:npm-web-1', note: 'up' });
  await until(() => changes.some((c) => c.data.length === 1), 2000, 'the blocking query wakes when the check passes');
  check(Date.now() - t0 < 1500, 'the wake-up is prompt (not a wait timeout)', Date.now() - t0);
  const seen = changes.find((c) => c.data.length === 1);
  check(seen.index > changes[0].index, 'X-Consul-Index grew', [String(changes[0].index), String(seen.index)]);
  const e = seen.data[0];
  check(e.Service.ID === 'npm-web-1' && e.Service.Service === 'npm-web' && e.Service.Address === '10.9.0.1'
    && e.Service.Port === 8091, 'the entry carries the service as registered', e.Service);
  check(Array.isArray(e.Service.Tags) && e.Service.Tags.includes('services'), 'tags are an array', e.Service.Tags);
  check(e.Service.Meta && e.Service.Meta.weight === '2', 'meta is kept', e.Service.Meta);
  check(typeof e.Node.Address === 'string' && typeof e.Node.Node === 'string' && typeof e.Node.Datacenter === 'string',
    'the node is described', e.Node);
  const ids = e.Checks.map((c) => c.CheckID);
  check(ids.includes('serfHealth') && ids.includes('service:npm-web-1')
    && e.Checks.every((c) => c.Status === 'passing'), 'checks: serfHealth and the passing service check', e.Checks);

  // Heart-beats keep it passing past its TTL...
  for (let i = 0; i < 6; i++) {
    await sleep(500);
    await consul.agent.check.pass('service:npm-web-1');
  }
  list = await consul.health.service({ service: 'npm-web', passing: true });
  check(list.length === 1, 'still passing after 3 s of heart-beats (TTL 2 s)', list);

  // ...and without them it expires; the watch sees it go.
  const before = changes.length;
  await until(() => changes.length > before && changes[changes.length - 1].data.length === 0, 4500,
    'without heart-beats the TTL check expires and the watch sees an empty list');
  const after = await consul.agent.check.list();
  check(after['service:npm-web-1'].Status === 'critical', 'the expired check is critical', after['service:npm-web-1']);

  let status = 0;
  try {
    await consul.agent.check.pass('service:no-such-check');
  } catch (err) {
    status = err.response ? err.response.statusCode : -1;
  }
  check(status === 404, 'passing an unknown check is a 404', status);

  await consul.agent.service.deregister('npm-web-1');
  list = await consul.health.service({ service: 'npm-web' });
  check(list.length === 0, 'deregister removes the service', list);
  watch.end();

  // The KV store, as Seata's ConsulConfiguration and meshline's config centre use it.
  const key = 'seata.properties';
  check((await consul.kv.get(key)) === undefined, 'kv.get of a missing key is a 404 (undefined)');
  check((await consul.kv.set(key, 'service.vgroupMapping.g=a\n')) === true, 'kv.set answers true');
  const got = await consul.kv.get(key);
  check(got && got.Key === key && got.Value === 'service.vgroupMapping.g=a\n' && got.Flags === 0
    && got.ModifyIndex >= got.CreateIndex, 'kv.get decodes the stored (base64) value', got);
  const raw = await consul.kv.get({ key, raw: true });
  check(Buffer.isBuffer(raw) && raw.toString() === 'service.vgroupMapping.g=a\n', 'kv.get raw gives the bytes', String(raw));
  // A refused write answers `false`, which the client hands back as a falsy result.
  check(!(await consul.kv.set({ key, value: 'x', cas: 0 })), 'cas=0 refuses an existing key');
  check(!(await consul.kv.set({ key, value: 'y', cas: got.ModifyIndex + 1000 })), 'a stale cas is refused');
  check((await consul.kv.get(key)).Value === 'service.vgroupMapping.g=a\n', 'refused writes left the value alone');
  check((await consul.kv.set({ key, value: 'service.vgroupMapping.g=b\n', cas: got.ModifyIndex })) === true,
    'cas=ModifyIndex writes');
  const kvChanges = [];
  const kvWatch = consul.watch({ method: consul.kv.get, options: { key, wait: '5s' }, backoffFactor: 50 });
  kvWatch.on('change', (data, res) => kvChanges.push({ data, index: BigInt(res.headers['x-consul-index']) }));
  kvWatch.on('error', (err) => check(false, 'the kv watch runs without errors', String(err)));
  await until(() => kvChanges.length >= 1, 3000, 'the kv watch delivers the current value');
  // A write to another key does not wake a blocking read of this one with a new value.
  await consul.kv.set('other-key', 'z');
  const t1 = Date.now();
  await consul.kv.set(key, 'service.vgroupMapping.g=c\n');
  await until(() => kvChanges.some((c) => c.data && c.data.Value === 'service.vgroupMapping.g=c\n'), 2000,
    'the kv blocking query wakes on a write');
  check(Date.now() - t1 < 1500, 'the kv wake-up is prompt (not a wait timeout)', Date.now() - t1);
  const last = kvChanges[kvChanges.length - 1];
  check(last.index > kvChanges[0].index && last.index === BigInt(last.data.ModifyIndex),
    'X-Consul-Index of a key is its ModifyIndex', [String(kvChanges[0].index), String(last.index)]);
  kvWatch.end();
  check((await consul.kv.del(key)) === true, 'kv.del answers true');
  check((await consul.kv.get(key)) === undefined, 'kv.del removes the key');
  console.log('consul double: all checks passed');
})().catch((err) => {
  console.error('consul double check failed:', err);
  process.exit(1);
});
