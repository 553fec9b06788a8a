// Drives the Eureka double with the npm `eureka-js-client` (4.x): registers (204),
// heart-beats (200), fetches the full registry then deltas, is re-registered after the
// server forgot it (404 on heartbeat), deregisters (200). Exits non-zero on the first
// answer that is not what the client (and Eureka's docs) expect.
// Usage: node eureka.js HOST:PORT
'use strict';
const { Eureka } = require('eureka-js-client');
const http = require('http');

const [host, port] = process.argv[2].split(':');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const quiet = { debug() {}, info() {}, warn() {}, error() {}, level() {} };

function check(cond, what, got) {
  if (!cond) {
    console.error(`eureka double MISMATCH: ${what}${got === undefined ? '' : `: got ${JSON.stringify(got)}`}`);
    process.exit(1);
  }
  console.log(`ok - ${what}`);
}

async function until(pred, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) {
      console.log(`ok - ${what}`);
      return;
    }
    await sleep(50);
  }
  check(false, what);
}

function raw(method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port: Number(port), method, path,
      headers: { Accept: 'application/json', 'Content-Type': 'application/json' } }, (res) => {
      let data = '';
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: data }));
    });
    req.on('error', reject);
    if (body) req.write(JSON.stringify(body));
    req.end();
  });
}

function instance(id, ip, p) {
  return {
    app: 'npmapp', instanceId: id, hostName: ip, ipAddr: ip, status: 'UP',
    port: { $: p, '@enabled': 'true' }, vipAddress: 'npmapp',
    dataCenterInfo: { '@class': 'com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo', name: 'MyOwn' },
    leaseInfo: { renewalIntervalInSecs: 1, durationInSecs: 30 },
    metadata: { weight: '1' },
  };
}

function client() {
  return new Eureka({
    instance: instance('npm-1', '10.9.0.2', 8092),
    eureka: {
      host, port: Number(port), servicePath: '/eureka/apps/',
      heartbeatInterval: 300, registryFetchInterval: 200, maxRetries: 0,
    },
    shouldUseDelta: true,
    logger: quiet,
  });
}

(async () => {
  const c = client();
  const startErr = await new Promise((resolve) => c.start(resolve));
  check(!startErr, 'start: register (expects 204) and full fetch succeed', startErr && String(startErr));
  const mine = c.getInstancesByAppId('NPMAPP');
  check(mine.length === 1 && mine[0].instanceId === 'npm-1' && mine[0].status === 'UP',
    'the full registry holds our instance, app upper-cased', mine);
  check(mine[0].port.$ === 8092 && mine[0].ipAddr === '10.9.0.2', 'port.$ and ipAddr are kept', mine[0]);

  // Heart-beats: the lease's last renewal moves.
  const r1 = JSON.parse((await raw('GET', '/eureka/apps/NPMAPP/npm-1')).body).instance.leaseInfo.lastRenewalTimestamp;
  await sleep(800);
  const r2 = JSON.parse((await raw('GET', '/eureka/apps/NPMAPP/npm-1')).body).instance.leaseInfo.lastRenewalTimestamp;
  check(r2 > r1, 'heart-beats (PUT, expects 200) renew the lease', [r1, r2]);

  // A second instance appears through the delta endpoint (shouldUseDelta).
  const other = await raw('POST', '/eureka/apps/NPMAPP', { instance: instance('npm-2', '10.9.0.3', 8093) });
  check(other.status === 204, 'a raw POST registration answers 204', other.status);
  await until(() => c.getInstancesByAppId('NPMAPP').length === 2, 3000,
    'the delta (actionType ADDED) brings the second instance');
  const delta = JSON.parse((await raw('GET', '/eureka/apps/delta')).body).applications;
  check(delta.application.some((a) => a.instance.some((i) => i.actionType === 'ADDED')),
    'the delta marks changes with actionType', delta);
  check(delta.apps__hashcode === 'UP_2_', 'apps__hashcode counts statuses', delta.apps__hashcode);

  // The server forgets us: the next heartbeat is a 404 and the client registers again.
  const del = await raw('DELETE', '/eureka/apps/NPMAPP/npm-1');
  check(del.status === 200, 'DELETE of a known instance answers 200', del.status);
  await until(async () => (await raw('GET', '/eureka/apps/NPMAPP/npm-1')).status === 200, 3000,
    'after a 404 heartbeat the client re-registers');

  const stopErr = await new Promise((resolve) => c.stop(resolve));
  check(!stopErr, 'stop: deregister (expects 200) succeeds', stopErr && String(stopErr));
  const gone = await raw('GET', '/eureka/apps/NPMAPP/npm-1');
  check(gone.status === 404, 'after deregistration the instance is gone', gone.status);
  const hb = await raw('PUT', '/eureka/apps/NPMAPP/npm-1');
  check(hb.status === 404, 'a heartbeat for an unknown instance is a 404', hb.status);
  await raw('DELETE', '/eureka/apps/NPMAPP/npm-2');
  console.log('eureka double: all checks passed');
  process.exit(0);
})().catch((err) => {
  console.error('eureka double check failed:', err);
  process.exit(1);
});
