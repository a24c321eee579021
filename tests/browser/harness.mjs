// Shared harness for the browser and interop tests: starts a corelay server
// on free ports, launches Debian's chromium through playwright-core (and
// Debian's firefox-esr through puppeteer-core), and has helpers to read
// getStats() progress out of a page.
//
// Environment:
//   CORELAY_BIN          server binary (default target/debug/corelay)
//   CORELAY_VIDEO_CODEC  passed as --video-codec when set (h264 | vp8)
//   CORELAY_TEST_OUT     where server logs and failure screenshots go
//                        (default $TMPDIR/corelay-browser)
//   CHROMIUM             browser binary (default /usr/lib/chromium/chromium)
//   FIREFOX              Firefox binary (default Debian's firefox-esr)
//   CORELAY_HEADFUL=1    show the browser (needs a display)

import { execFileSync, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const OUT = process.env.CORELAY_TEST_OUT || path.join(os.tmpdir(), 'corelay-browser');
fs.mkdirSync(OUT, { recursive: true });

export const CHROMIUM_ARGS = [
  '--use-fake-device-for-media-stream',
  '--use-fake-ui-for-media-stream',
  '--allow-loopback-in-peer-connection',
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--autoplay-policy=no-user-gesture-required',
  // Keep background tabs running at full speed: several participants share
  // one browser and only one tab is "visible".
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
  '--disable-backgrounding-occluded-windows',
];

export { sleep };

async function freeTcpPort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function freeUdpPort() {
  return new Promise((resolve, reject) => {
    const s = dgram.createSocket('udp4');
    s.on('error', reject);
    s.bind(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function tcpPortFree(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.unref();
    s.on('error', () => resolve(false));
    s.listen(port, '0.0.0.0', () => s.close(() => resolve(true)));
  });
}

// A media port: free for UDP and, since the shard also listens there for
// ICE-TCP, for TCP too; never the HTTP port.
async function freeMediaPort(httpPort) {
  for (let i = 0; i < 50; i++) {
    const port = await freeUdpPort();
    if (port !== httpPort && await tcpPortFree(port)) return port;
  }
  throw new Error('no port free for both UDP and TCP');
}

export function uniqueRoom(prefix) {
  return `${prefix}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

// Start the server; resolves once /healthz answers 200. `defaults: true`
// runs it with the default codec list whatever CORELAY_VIDEO_CODEC(S) say.
// `publicIp`: the address in its ICE candidates (default 127.0.0.1);
// `httpHost`: the address its HTTP listener binds and `base` uses (default
// 127.0.0.1; e.g. a veth address that a browser in another network
// namespace can reach).
export async function startServer({
  name = 'server', extraArgs = [], defaults = false, publicIp = '127.0.0.1', httpHost = '127.0.0.1',
} = {}) {
  const bin = path.resolve(ROOT, process.env.CORELAY_BIN || 'target/debug/corelay');
  if (!fs.existsSync(bin)) throw new Error(`server binary ${bin} not found (set CORELAY_BIN or build with cargo build -p corelay)`);
  const httpPort = await freeTcpPort();
  const udpPort = await freeMediaPort(httpPort);
  const args = [
    '--http', `${httpHost}:${httpPort}`,
    '--udp-port', String(udpPort),
    '--public-ip', publicIp,
    '--shards', '1',
  ];
  if (process.env.CORELAY_VIDEO_CODEC && !defaults) args.push('--video-codec', process.env.CORELAY_VIDEO_CODEC);
  args.push(...extraArgs);
  const logPath = path.join(OUT, `${name}-${process.pid}.log`);
  const log = fs.openSync(logPath, 'w');
  fs.writeSync(log, `$ ${bin} ${args.join(' ')}\n`);
  const child = spawn(bin, args, {
    stdio: ['ignore', log, log],
    // No Prometheus listener (its default address is fixed, 127.0.0.1:6060):
    // servers of parallel runs would collide on it. An env var, not a flag, so
    // that binaries without --metrics ignore it.
    env: { CORELAY_METRICS: 'off', ...process.env, ...(defaults ? { CORELAY_VIDEO_CODECS: undefined } : {}) },
  });
  let exited = null;
  child.on('exit', (code, signal) => { exited = { code, signal }; });
  const base = `http://${httpHost}:${httpPort}`;
  const deadline = Date.now() + 20000;
  for (;;) {
    if (exited) throw new Error(`server exited early (${JSON.stringify(exited)}); log:\n${tail(logPath)}`);
    try {
      const res = await fetch(`${base}/healthz`);
      if (res.ok) break;
    } catch { /* not up yet */ }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`server did not answer /healthz within 20 s; log:\n${tail(logPath)}`);
    }
    await sleep(100);
  }
  return {
    base,
    httpPort,
    udpPort,
    logPath,
    child,
    log: () => fs.readFileSync(logPath, 'utf8'),
    tail: (n) => tail(logPath, n),
    async stop() {
      if (exited) return exited;
      child.kill('SIGTERM');
      const t0 = Date.now();
      while (!exited && Date.now() - t0 < 3000) await sleep(50);
      if (!exited) child.kill('SIGKILL');
      fs.closeSync(log);
      return exited;
    },
    async room(room) {
      const res = await fetch(`${base}/api/v1/rooms/${encodeURIComponent(room)}`);
      if (res.status === 404) return null;
      return res.json();
    },
  };
}

export function tail(file, n = 60) {
  try {
    return fs.readFileSync(file, 'utf8').split('\n').slice(-n).join('\n');
  } catch {
    return '';
  }
}

// `executablePath`: another way to start Chromium (e.g. a wrapper script that
// runs it in another network namespace; Playwright talks to it over pipes);
// `extraArgs`: more command-line switches.
export async function launchBrowser({ executablePath = process.env.CHROMIUM || '/usr/lib/chromium/chromium', extraArgs = [] } = {}) {
  const args = [...CHROMIUM_ARGS, ...extraArgs];
  if (process.env.CORELAY_HEADFUL === '1') args.splice(args.indexOf('--headless'), 1);
  return chromium.launch({ executablePath, args, headless: process.env.CORELAY_HEADFUL !== '1' });
}

// Debian's firefox-esr, driven by puppeteer-core over WebDriver BiDi (never a
// downloaded browser). Fake camera and microphone without a prompt, and ICE
// on 127.0.0.1 (Firefox leaves loopback out of its candidates by default).
export const FIREFOX = process.env.FIREFOX
  || ['/usr/lib/firefox-esr/firefox-esr', '/usr/bin/firefox-esr'].find((p) => fs.existsSync(p))
  || '/usr/lib/firefox-esr/firefox-esr';

export const FIREFOX_PREFS = {
  'media.navigator.streams.fake': true,
  'media.navigator.permission.disabled': true,
  'media.peerconnection.ice.loopback': true,
  'permissions.default.camera': 1,
  'permissions.default.microphone': 1,
};

// Why Firefox tests cannot run here, or null when they can.
export async function firefoxUnavailable() {
  if (!fs.existsSync(FIREFOX)) {
    return `no Firefox at ${FIREFOX} (scripts/test-browser installs Debian's firefox-esr with apt; set FIREFOX to use another)`;
  }
  try {
    await import('puppeteer-core');
  } catch (err) {
    return `puppeteer-core is not installed (npm ci): ${err.message}`;
  }
  return null;
}

export async function launchFirefox() {
  const { default: puppeteer } = await import('puppeteer-core');
  return puppeteer.launch({
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: process.env.CORELAY_HEADFUL !== '1',
    defaultViewport: { width: 1280, height: 760 },
    extraPrefsFirefox: FIREFOX_PREFS,
  });
}

// A Firefox tab with the same conveniences as newPage (label, errors, logs).
// page.evaluate(fn, arg) works as in playwright, so waitInPage, slotOf,
// inboundByMid, waitMediaFlowing and debugState take either kind of page.
// (CORELAY_LIVE_ASSETS does not apply: Firefox gets the embedded assets.)
export async function newFirefoxPage(browser, label) {
  const page = await browser.newPage();
  page.setDefaultTimeout(10000);
  return collectLogs(page, label);
}

// Labels a page (Playwright or puppeteer: both have 'pageerror' and
// 'console' with msg.type()/msg.text()) and collects its console lines into
// page.logs and its errors into page.errors.
function collectLogs(page, label) {
  page.label = label;
  page.errors = [];
  page.logs = [];
  page.on('pageerror', (err) => page.errors.push(String(err)));
  page.on('console', (msg) => {
    const line = `[${label}] ${msg.type()}: ${msg.text()}`;
    page.logs.push(line);
    if (msg.type() === 'error') page.errors.push(line);
  });
  return page;
}

// A new page in its own context (own cookies/storage), with console errors
// collected into page.errors.
export async function newPage(browser, label) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 760 } });
  await context.grantPermissions(['camera', 'microphone']);
  if (process.env.CORELAY_LIVE_ASSETS === '1') await routeLiveAssets(context);
  context.setDefaultTimeout(10000);
  const page = await context.newPage();
  return collectLogs(page, label);
}

// CORELAY_LIVE_ASSETS=1: serve the pages from crates/server/assets in the
// working tree instead of the copies embedded in the binary (iterate on the
// page without rebuilding the server).
async function routeLiveAssets(context) {
  const dir = path.join(ROOT, 'crates/server/assets');
  const types = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.html': 'text/html; charset=utf-8' };
  await context.route(/^http:\/\/[^/]+:\d+\/(assets\/[^?]+|watch\/[^?/]+|\?.*|)$/, (route) => {
    const u = new URL(route.request().url());
    let file;
    if (u.pathname.startsWith('/assets/')) file = u.pathname.slice('/assets/'.length);
    else if (u.pathname.startsWith('/watch/')) file = 'watch.html';
    else file = 'index.html';
    const full = path.join(dir, path.basename(file));
    if (!fs.existsSync(full)) return route.continue();
    return route.fulfill({ status: 200, contentType: types[path.extname(full)], body: fs.readFileSync(full) });
  });
}

// Poll fn (run in the page) until it returns a truthy value.
export async function waitInPage(page, fn, arg, { timeout = 15000, interval = 200, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await page.evaluate(fn, arg);
      if (last) return last;
    } catch (err) {
      last = String(err);
    }
    if (Date.now() > deadline) {
      const dbg = await debugState(page).catch((e) => String(e));
      throw new Error(`[${page.label}] timed out after ${timeout} ms waiting for ${what}; last=${JSON.stringify(last)}\nstate=${dbg}`);
    }
    await sleep(interval);
  }
}

export async function debugState(page) {
  return page.evaluate(() => {
    const c = window.corelay || window.raw || {};
    return JSON.stringify({
      state: c.state,
      error: c.error,
      connection: c.pc?.connectionState,
      ice: c.pc?.iceConnectionState,
      dc: c.dc?.readyState,
      participantId: c.participantId,
      roster: c.roster,
      slots: c.slots,
      tiles: typeof c.tiles === 'function' ? c.tiles() : undefined,
      events: (c.events || []).slice(-5),
    });
  });
}

// Per-mid inbound-rtp counters in a page whose RTCPeerConnection is at
// window.corelay.pc (or the expression given).
export async function inboundByMid(page, pcExpr = 'window.corelay.pc') {
  return page.evaluate(async (expr) => {
    // eslint-disable-next-line no-eval
    const pc = (0, eval)(expr);
    const out = {};
    const report = await pc.getStats();
    report.forEach((r) => {
      if (r.type !== 'inbound-rtp') return;
      out[r.mid] = {
        kind: r.kind,
        ssrc: r.ssrc,
        packetsReceived: r.packetsReceived,
        bytesReceived: r.bytesReceived,
        framesDecoded: r.framesDecoded,
        frameWidth: r.frameWidth,
        frameHeight: r.frameHeight,
        totalSamplesReceived: r.totalSamplesReceived,
        concealedSamples: r.concealedSamples,
        audioLevel: r.audioLevel,
        decoder: r.decoderImplementation,
        codec: r.codecId ? report.get(r.codecId)?.mimeType : undefined,
      };
    });
    return out;
  }, pcExpr);
}

// Wait until the inbound stream on `mid` shows progress: for video
// framesDecoded > 0 and rising, for audio totalSamplesReceived rising.
export async function waitMediaFlowing(page, mid, kind, { timeout = 20000, pcExpr } = {}) {
  const field = kind === 'video' ? 'framesDecoded' : 'totalSamplesReceived';
  const deadline = Date.now() + timeout;
  let prev = null;
  let last = null;
  for (;;) {
    const stats = await inboundByMid(page, pcExpr);
    last = stats[mid];
    const v = last?.[field] ?? 0;
    if (prev !== null && v > 0 && v > prev) return { first: prev, now: v, stats: last };
    if (v > 0) prev = v;
    if (Date.now() > deadline) {
      throw new Error(`[${page.label}] ${kind} on mid ${mid} not flowing (${field}: ${prev} -> ${v}); inbound=${JSON.stringify(stats)}\nstate=${await debugState(page).catch(String)}`);
    }
    await sleep(700);
  }
}

// Save a screenshot of every page (for failed runs), best effort.
export async function snapshotAll(pages, tag) {
  for (const p of pages) {
    if (!p || p.isClosed()) continue;
    try {
      await p.screenshot({ path: path.join(OUT, `${tag}-${p.label}.png`) });
    } catch { /* ignore */ }
  }
}

// Join `room` through the demo page's UI. Resolves with the participant id
// once the data channel is open and the welcome event arrived.
export async function joinDemo(page, base, room, name, { recvonly = false, query = '' } = {}) {
  await page.goto(`${base}/${query ? `?${query}` : ''}`);
  await page.fill('#room', room);
  await page.fill('#name', name);
  if (recvonly) await page.check('#recvonly');
  await page.click('#join');
  await waitInPage(page, () => {
    const c = window.corelay;
    if (c.state === 'error' || c.state === 'failed') return `error: ${c.error}`;
    return c.pc?.connectionState === 'connected' && c.dc?.readyState === 'open'
      && c.events.some((e) => e.type === 'welcome') && c.participantId;
  }, null, { what: `${name} to join ${room}` }).then((r) => {
    if (String(r).startsWith('error:')) throw new Error(`[${page.label}] join failed: ${r}\nanswer/offer in page state`);
  });
  return page.evaluate(() => window.corelay.participantId);
}

// Join `room` the way a link does: the demo page with ?room=&name=&join=1
// (no clicks, so it works for any browser's page). Resolves with the
// participant id; throws with the page's error (e.g. `400 codec_mismatch: …`)
// when the server refused the offer.
export async function joinDemoByUrl(page, base, room, name, { query = {} } = {}) {
  const q = new URLSearchParams({ ...query, room, name, join: '1' });
  await page.goto(`${base}/?${q}`);
  const r = await waitInPage(page, () => {
    const c = window.corelay;
    if (c.state === 'error' || c.state === 'failed') return `error: ${c.error}`;
    return c.pc?.connectionState === 'connected' && c.dc?.readyState === 'open'
      && c.events.some((e) => e.type === 'welcome') && c.participantId;
  }, null, { what: `${name} to join ${room}` });
  if (String(r).startsWith('error:')) throw new Error(`[${page.label}] join failed: ${r}`);
  return r;
}

// Wait until the inbound stream on `mid` has decoded more than `min` frames
// (getStats inbound-rtp framesDecoded). Resolves with that stream's stats.
export async function waitFramesDecoded(page, mid, min, { timeout = 20000 } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const stats = await inboundByMid(page);
    const s = stats[mid];
    if ((s?.framesDecoded ?? 0) > min) return s;
    if (Date.now() > deadline) {
      throw new Error(`[${page.label}] video on mid ${mid}: framesDecoded ${s?.framesDecoded} after ${timeout} ms, want > ${min}; inbound=${JSON.stringify(stats)}\nstate=${await debugState(page).catch(String)}`);
    }
    await sleep(500);
  }
}

// The receive slot (mid) currently filled by `participant` with `kind`.
export async function slotOf(page, participant, kind, { timeout = 15000 } = {}) {
  return waitInPage(page, ([p, k]) => {
    const s = window.corelay.slots.find((x) => x.participant === p && x.kind === k);
    return s ? s.mid : null;
  }, [participant, kind], { timeout, what: `a ${kind} slot filled by ${participant}` });
}

// Wait until the grid shows exactly the given participants (by id).
export async function waitTiles(page, participants, { timeout = 15000 } = {}) {
  const want = [...participants].sort();
  return waitInPage(page, (w) => {
    const have = window.corelay.tiles().map((t) => t.participant).sort();
    return JSON.stringify(have) === JSON.stringify(w) ? window.corelay.tiles() : null;
  }, want, { timeout, what: `tiles for ${JSON.stringify(want)}` });
}

// A network namespace joined to this one by a veth pair whose egress here
// (toward the namespace) is a `tc tbf` token bucket: a shaped downlink for
// a browser launched through `wrapper` (Chromium run with `ip netns exec`).
// `tag` names it (with the pid; interface names stay under 16 characters),
// `net` is its /24's third octet. Returns {serverIp, wrapper, remove()} or,
// when this host cannot (no iproute2, no CAP_NET_ADMIN), {skip: why}.
export async function shapedNetns(tag, net, tbf) {
  const run = (cmd, ...args) => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const quiet = (fn) => { try { fn(); } catch { /* gone already */ } };
  const ns = `corelay-${tag}-${process.pid}`;
  const here = `${tag}${process.pid}s`.slice(0, 15);
  const there = `${tag}${process.pid}c`.slice(0, 15);
  const serverIp = `10.${net}.0.1`;
  for (const old of fs.existsSync('/run/netns') ? fs.readdirSync('/run/netns') : []) {
    const m = new RegExp(`^corelay-${tag}-(\\d+)$`).exec(old);
    if (m && !fs.existsSync(`/proc/${m[1]}`)) quiet(() => run('ip', 'netns', 'del', old));
  }
  try {
    run('ip', 'netns', 'add', ns);
  } catch (e) {
    return { skip: `cannot create a network namespace: ${String(e.stderr || e.message).trim().split('\n')[0]}` };
  }
  const remove = () => {
    quiet(() => run('ip', 'link', 'del', here));
    quiet(() => run('ip', 'netns', 'del', ns));
  };
  try {
    run('ip', 'netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
    run('ip', 'link', 'add', here, 'type', 'veth', 'peer', 'name', there, 'netns', ns);
    run('ip', 'addr', 'add', `${serverIp}/24`, 'dev', here);
    run('ip', 'link', 'set', here, 'up');
    run('ip', 'netns', 'exec', ns, 'ip', 'addr', 'add', `10.${net}.0.2/24`, 'dev', there);
    run('ip', 'netns', 'exec', ns, 'ip', 'link', 'set', there, 'up');
    run('tc', 'qdisc', 'add', 'dev', here, 'root', 'tbf', ...tbf);
  } catch (e) {
    remove();
    return { skip: `cannot make a veth pair with a tbf qdisc: ${String(e.stderr || e.message).trim().split('\n')[0]}` };
  }
  for (let i = 0; i < 50 && !/LOWER_UP/.test(run('ip', 'link', 'show', here)); i++) await sleep(50);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `corelay-${tag}-`));
  const wrapper = path.join(dir, 'chromium-in-netns');
  const chromium = process.env.CHROMIUM || '/usr/lib/chromium/chromium';
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${ns} ${chromium} "$@"\n`, { mode: 0o755 });
  return {
    serverIp,
    wrapper,
    remove() {
      remove();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
