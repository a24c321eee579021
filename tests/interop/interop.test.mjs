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

// aiortc as a WHEP player: one recvonly video + one recvonly audio, bundled,
// no data channel, POSTed to /whep/{room} while Chromium publishes both.
//
// Issue 10: aiortc's bundled offer gave one extension id (2) to abs-send-time
// on video and to ssrc-audio-level on audio; the server echoed both, sent a
// 1-byte audio level at that id, aiortc's RTP header parser failed on every
// packet and the player received nothing. aiortc >= 1.8 numbers them 3 and 2,
// so two players run side by side: aiortc as installed, and one that numbers
// them as aiortc < 1.8 did (--legacy-extmap-ids: both at 2). The answer must
// give each id one meaning across the bundle (docs/api.md), and both players
// must decode video and audio.
test('aiortc as a WHEP viewer receives video and audio (also with one extension id for two extensions)', async (t) => {
  const room = uniqueRoom('aio-whep');
  const pages = [];
  const peers = [];
  try {
    const page = await newPage(browser, 'chromium-whep-source');
    pages.push(page);
    await joinDemo(page, server.base, room, 'Chromium', { query: 'video=320x240' });
    const variants = [['aiortc-whep', []], ['aiortc-whep-legacy-ids', ['--legacy-extmap-ids']]];
    for (const [label, extra] of variants) {
      peers.push(aiortc(['whep', '--base', server.base, '--room', room, '--codec', CODEC, '--seconds', '30', ...extra, ...EXTRA], label));
    }
    await Promise.all(peers.map(async (peer, i) => {
      const label = variants[i][0];
      const joined = await peer.waitFor((e) => e.event === 'joined' || e.event === 'error', 'the WHEP POST');
      assert.equal(joined.event, 'joined', `${label}: WHEP POST failed: ${JSON.stringify(joined)}`);
      assert.match(joined.location, new RegExp(`^/whep/${room}/[^/]+$`), `${label}: WHEP Location`);
      const extmaps = (sdp) => [...sdp.matchAll(/^a=extmap:(\d+)(?:\/\w+)? (\S+)/gm)].map((m) => [m[1], m[2]]);
      if (label.endsWith('legacy-ids')) {
        // The offer does have the clash (else this variant proves nothing).
        const two = extmaps(joined.offer).filter(([id]) => id === '2').map(([, uri]) => uri).sort();
        assert.deepEqual(two, ['http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time', 'urn:ietf:params:rtp-hdrext:ssrc-audio-level'], `${label}: offer`);
      }
      // One meaning per extension id across the bundle, in the answer.
      const meaning = new Map();
      for (const [id, uri] of extmaps(joined.answer)) {
        assert.ok(!meaning.has(id) || meaning.get(id) === uri, `${label}: extension id ${id} is both ${meaning.get(id)} and ${uri} in the answer:\n${joined.answer}`);
        meaning.set(id, uri);
      }
      await peer.waitFor((e) => e.event === 'connection' && e.state === 'connected', `${label} to connect`);
      const video = await peer.waitFor((e) => e.event === 'frames' && e.count > 30, '> 30 decoded video frames');
      const audio = await peer.waitFor((e) => e.event === 'audio' && e.count > 25, '> 25 decoded audio frames (0.5 s)');
      t.diagnostic(`${label} decoded ${video.count} video frames ${video.width}x${video.height} on mid ${video.mid} and ${audio.count} audio frames (${audio.sample_rate} Hz) on mid ${audio.mid}`);
      assert.notEqual(video.mid, audio.mid);
    }));
  } catch (err) {
    await dump(pages, 'interop-whep-failure');
    throw err;
  } finally {
    for (const peer of peers) peer.kill();
    await Promise.all(peers.map((p) => p.exited));
  }
});
