// Interop with an independent WebRTC stack: aiortc (Python) publishes into a
// room and Chromium decodes it; Chromium publishes and aiortc decodes it.
//
// Needs the venv at .venv with aiortc (scripts/test-browser makes it), or
// AIORTC_PYTHON pointing at a python that has aiortc.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { after, before, test } from 'node:test';
import {
  OUT, ROOT, debugState, joinDemo, launchBrowser, newPage, sleep, slotOf, snapshotAll,
  startServer, uniqueRoom, waitMediaFlowing, waitTiles,
} from '../browser/harness.mjs';

const PYTHON = process.env.AIORTC_PYTHON || path.join(ROOT, '.venv/bin/python');
const PEER = path.join(ROOT, 'tests/interop/aiortc_peer.py');
// AIORTC_COPY_CANDIDATES=1: let aiortc repeat the answer's candidates in every
// m-section (see README: works around aiortc's bundle handling).
const EXTRA = process.env.AIORTC_COPY_CANDIDATES === '1' ? ['--copy-candidates'] : [];
const CODEC = (process.env.AIORTC_CODEC || process.env.CORELAY_VIDEO_CODEC || 'vp8').toLowerCase();

let server;
let browser;

before(async () => {
  assert.ok(fs.existsSync(PYTHON), `${PYTHON} missing: python3 -m venv .venv && .venv/bin/pip install aiortc`);
  server = await startServer({ name: 'interop' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

// Run aiortc_peer.py; returns {events, waitFor(pred), exited, kill()}.
function aiortc(args, label) {
  const logPath = path.join(OUT, `${label}-${process.pid}.log`);
  const log = fs.createWriteStream(logPath);
  const child = spawn(PYTHON, [PEER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const events = [];
  const waiters = [];
  child.stderr.pipe(log);
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    log.write(`${line}\n`);
    let ev;
    try { ev = JSON.parse(line); } catch { return; }
    events.push(ev);
    for (const w of [...waiters]) {
      if (w.pred(ev)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(ev);
      }
    }
  });
  const exited = new Promise((resolve) => child.on('exit', (code) => { log.end(); resolve(code); }));
  return {
    events,
    logPath,
    exited,
    kill: () => child.kill('SIGTERM'),
    waitFor(pred, what, timeout = 20000) {
      const hit = events.find(pred);
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const w = { pred, resolve };
        waiters.push(w);
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1);
          reject(new Error(`aiortc ${label}: timed out waiting for ${what}; events=${JSON.stringify(events.slice(-8)).slice(0, 3000)}\n${fs.readFileSync(logPath, 'utf8').slice(-3000)}`));
        }, timeout);
        exited.then((code) => {
          clearTimeout(timer);
          const idx = waiters.indexOf(w);
          if (idx >= 0) {
            waiters.splice(idx, 1);
            reject(new Error(`aiortc ${label} exited (${code}) before ${what}; events=${JSON.stringify(events.slice(-8)).slice(0, 3000)}\n${fs.readFileSync(logPath, 'utf8').slice(-3000)}`));
          }
        });
        const origResolve = w.resolve;
        w.resolve = (ev) => { clearTimeout(timer); origResolve(ev); };
      });
    },
  };
}

async function dump(pages, tag) {
  await snapshotAll(pages, tag);
  for (const p of pages) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
  console.log(`--- server log:\n${server.tail(80)}`);
}

test(`aiortc publishes ${CODEC} and Chromium decodes it`, async (t) => {
  const room = uniqueRoom('aio-pub');
  const peer = aiortc(['publish', '--base', server.base, '--room', room, '--name', 'aiortc', '--codec', CODEC, '--audio', '--seconds', '40', ...EXTRA], 'aiortc-publish');
  const pages = [];
  try {
    const joined = await peer.waitFor((e) => e.event === 'joined' || e.event === 'error', 'the POST');
    assert.equal(joined.event, 'joined', `aiortc POST failed: ${JSON.stringify(joined)}`);
    await peer.waitFor((e) => e.event === 'connection' && e.state === 'connected', 'aiortc to connect');

    const page = await newPage(browser, 'chromium-viewer');
    pages.push(page);
    await joinDemo(page, server.base, room, 'Viewer', { recvonly: true });
    const tiles = await waitTiles(page, [joined.participant]);
    assert.equal(tiles[0].name, 'aiortc');
    const vmid = await slotOf(page, joined.participant, 'video');
    const flow = await waitMediaFlowing(page, vmid, 'video');
    t.diagnostic(`Chromium decoded ${flow.now} aiortc frames (${flow.stats.codec}, ${flow.stats.frameWidth}x${flow.stats.frameHeight}, ${flow.stats.decoder})`);
    assert.equal(flow.stats.codec?.toLowerCase(), `video/${CODEC}`);
    const amid = await slotOf(page, joined.participant, 'audio');
    await waitMediaFlowing(page, amid, 'audio');
  } catch (err) {
    await dump(pages, 'interop-pub-failure');
    throw err;
  } finally {
    peer.kill();
    await peer.exited;
  }
});

test(`Chromium publishes and aiortc decodes it`, async (t) => {
  const room = uniqueRoom('aio-sub');
  const pages = [];
  let peer;
  try {
    const page = await newPage(browser, 'chromium-publisher');
    pages.push(page);
    const pubId = await joinDemo(page, server.base, room, 'Chromium');
    peer = aiortc(['subscribe', '--base', server.base, '--room', room, '--name', 'aiortc-sub', '--codec', CODEC, '--seconds', '40', ...EXTRA], 'aiortc-subscribe');
    const joined = await peer.waitFor((e) => e.event === 'joined' || e.event === 'error', 'the POST');
    assert.equal(joined.event, 'joined', `aiortc POST failed: ${JSON.stringify(joined)}`);
    // With several recvonly video m-lines aiortc shares one transport between
    // them and reads its remote candidates from the *last* of them; an answer
    // with a=candidate only in the first m-section leaves it with none and
    // ICE never starts (tests/browser/README.md, finding 1).
    await peer.waitFor((e) => e.event === 'connection' && e.state === 'connected',
      'aiortc (3 recvonly video m-lines) to connect: does the answer carry a=candidate in every m-section?');
    const slots = await peer.waitFor((e) => e.event === 'dc' && e.message.type === 'slots'
      && e.message.slots.some((s) => s.kind === 'video' && s.participant === pubId), 'a slot filled by Chromium');
    const mid = slots.message.slots.find((s) => s.kind === 'video' && s.participant === pubId).mid;
    const first = await peer.waitFor((e) => e.event === 'frames' && e.mid === mid && e.count > 0, `decoded frames on slot ${mid}`);
    const later = await peer.waitFor((e) => e.event === 'frames' && e.mid === mid && e.count > first.count + 10, `more frames on slot ${mid}`);
    t.diagnostic(`aiortc decoded ${later.count} frames ${later.width}x${later.height} from Chromium`);
    // The subscriber publishes nothing, so the publisher gets no tile for it.
    await sleep(200);
    assert.deepEqual(await page.evaluate(() => window.corelay.tiles()), []);
  } catch (err) {
    await dump(pages, 'interop-sub-failure');
    throw err;
  } finally {
    peer?.kill();
    await peer?.exited;
  }
});
