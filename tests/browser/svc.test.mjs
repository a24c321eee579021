// VP9 and AV1 SVC (issue 51), in real browsers. A Chromium publisher sends
// its 1280x720 fake camera as one scalable encoding (the demo page's
// `?codec=vp9&svc=L3T3_KEY`, then `?codec=av1&svc=L3T3`: three spatial
// layers, 320, 640 and 1280 wide, three temporal layers each). Two
// receive-only Chromium subscribers show it in one large tile:
//   - "fast" on the test's own network, unshaped;
//   - "slow" in a network namespace behind a 300 kbit/s token bucket (tc
//     tbf on the veth's server side).
// The server picks spatial layers out of the one encoding per subscriber.
// In the 5 s after the first 5 (up to 9 s more on this shared host for
// fast's climbs, each a keyframe away), fast decodes 1280-wide frames, and
// slow frames at most 640 wide at 10 fps or more, and neither freezes
// (frames decoded in every second). The room's codec is the publisher's
// (`GET /api/v1/rooms/{room}`), and the subscribers decode that codec.
// SVC_CODEC=vp9|av1 runs one codec; SVC_DEBUG=1 prints fast's SDP extmaps
// (a subscriber must negotiate the dependency descriptor to decode AV1
// thinned to its layers: without it, fast froze at its first climb).
//
// Skips (and says why) without a way to make a network namespace, veth pair
// and tbf qdisc (iproute2, CAP_NET_ADMIN).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  inboundByMid, joinDemo, launchBrowser, newPage, shapedNetns, sleep, slotOf, snapshotAll,
  startServer, uniqueRoom,
} from './harness.mjs';

const TBF = ['rate', '300kbit', 'burst', '3kb', 'latency', '150ms'];
const net = await shapedNetns('svc', 79, TBF);

describe('SVC: one scalable encoding, a spatial layer per subscriber', { skip: net.skip ?? false }, () => {
  let server;
  let browser;
  let shapedBrowser;
  const pages = [];
  let failed = false;

  before(async () => {
    server = await startServer({ name: 'svc', httpHost: net.serverIp, publicIp: net.serverIp });
    const extraArgs = [`--unsafely-treat-insecure-origin-as-secure=${server.base}`];
    browser = await launchBrowser({ extraArgs });
    shapedBrowser = await launchBrowser({ executablePath: net.wrapper, extraArgs });
  });

  after(async () => {
    if (failed) await snapshotAll(pages, 'svc-failure');
    await browser?.close().catch(() => {});
    await shapedBrowser?.close().catch(() => {});
    await server?.stop();
    net.remove?.();
  });

  // The server's estimate for each participant id, as last read.
  const estimates = new Map();
  async function layersOf(id) {
    const st = await (await fetch(`${server.base}/api/v1/stats`)).json();
    for (const r of st.room_detail || []) {
      const p = (r.participants || []).find((x) => x.id === id);
      if (p) {
        estimates.set(id, [...(estimates.get(id) || []), p.estimate_bps]);
        return `estimate ${p.estimate_bps} layers ${JSON.stringify(p.layers)}`;
      }
    }
    return 'not in stats';
  }

  // Retried once, in a new room with new pages: the unshaped subscriber's
  // estimate never reaching the three layers' rate (about 1.5 Mbit/s) on
  // unshaped loopback is this shared host's scheduling delay read as
  // congestion (simulcast.test.mjs's HostJitter), not a server fault.
  class HostJitter extends Error {}

  for (const [codec, mode] of [['vp9', 'L3T3_KEY'], ['av1', 'L3T3']].filter(([c]) => !process.env.SVC_CODEC || c === process.env.SVC_CODEC)) {
    test(`${codec} ${mode}: the unshaped subscriber decodes 1280 wide, the 300 kbit/s one <= 640 at >= 10 fps`, async () => {
      try {
        await run(1);
      } catch (e) {
        if (!(e instanceof HostJitter)) throw e;
        console.log(`first attempt: ${e.message}\nonce more, in a new room with new pages`);
        await run(2);
      }
    });

    async function run(attempt) {
      const opened = [];
      try {
        const room = uniqueRoom(`svc-${codec}`);
        const pub = await newPage(browser, `pub-${codec}`);
        const fast = await newPage(browser, `fast-${codec}`);
        const slow = await newPage(shapedBrowser, `slow-${codec}`);
        pages.push(pub, fast, slow);
        opened.push(pub, fast, slow);
        const pubId = await joinDemo(pub, server.base, room, 'Pub', { query: `video=1280x720&codec=${codec}&svc=${mode}` });
        const sent = await pub.evaluate(async () => {
          const s = window.corelay.session.senders.video;
          let out = null;
          (await s.getStats()).forEach((r) => { if (r.type === 'outbound-rtp') out = r; });
          return { encodings: s.getParameters().encodings, mode: out?.scalabilityMode, encoder: out?.encoderImplementation };
        });
        console.log(`${codec}: publisher sends ${JSON.stringify(sent)}`);
        const info = await (await fetch(`${server.base}/api/v1/rooms/${room}`)).json();
        assert.equal(info.video_codec, codec.toUpperCase(), `the room takes the publisher's codec: ${JSON.stringify(info)}`);
        const fastId = await joinDemo(fast, server.base, room, 'Fast', { recvonly: true });
        const slowId = await joinDemo(slow, server.base, room, 'Slow', { recvonly: true });
        if (process.env.SVC_DEBUG) {
          const sdp = await fast.evaluate(() => window.corelay.pc.remoteDescription.sdp + '\n----\n' + window.corelay.pc.localDescription.sdp);
          console.log(sdp.split(/\r?\n/).filter((l) => /extmap|^m=|allow-mixed|----/.test(l)).join('\n'));
        }
        const fastMid = await slotOf(fast, pubId, 'video');
        const slowMid = await slotOf(slow, pubId, 'video');
        const t0 = Date.now();
        const sample = async () => {
          const [f, s] = await Promise.all([inboundByMid(fast), inboundByMid(slow)]);
          return { at: (Date.now() - t0) / 1000, fast: f[fastMid] || {}, slow: s[slowMid] || {} };
        };
        const fmt = (x) => `${x.at.toFixed(1)} s: fast ${x.fast.frameWidth}x${x.fast.frameHeight} ${x.fast.codec} frames ${x.fast.framesDecoded}, `
          + `slow ${x.slow.frameWidth}x${x.slow.frameHeight} ${x.slow.codec} frames ${x.slow.framesDecoded}`;
        const trace = [];
        // The first 5 s to settle, then up to 9 s more for fast to reach
        // the top layer (each climb waits for a keyframe).
        let x;
        for (;;) {
          await sleep(1000);
          x = await sample();
          const more = await fast.evaluate(async (mid) => {
            let o = null;
            (await window.corelay.pc.getStats()).forEach((r) => {
              if (r.type === 'inbound-rtp' && r.mid === mid) o = r;
            });
            return o && `received ${o.framesReceived} dropped ${o.framesDropped} keyframes ${o.keyFramesDecoded} `
              + `pli ${o.pliCount} nack ${o.nackCount} lost ${o.packetsLost} packets ${o.packetsReceived} decoder ${o.decoderImplementation}`;
          }, fastMid);
          const pubNow = await pub.evaluate(() => {
            const e = window.corelay.session.senders.video.getParameters().encodings[0];
            return `pub told ${window.corelay.session.svcTaken ?? '-'} sends ${e.scalabilityMode}/${e.scaleResolutionDownBy ?? 1}`;
          });
          trace.push(`${fmt(x)}; ${pubNow}; fast ${more}; fast ${await layersOf(fastId)}; slow ${await layersOf(slowId)}`);
          if ((x.at >= 5 && x.fast.frameWidth >= 1280) || x.at > 14) break;
        }
        console.log(`${codec}:\n  ${trace.join('\n  ')}`);
        const fastEstimates = estimates.get(fastId) || [];
        // Three climbs' worth of time at that estimate (a climb is tried
        // for 2 s, then waits for a keyframe).
        if (x.fast.frameWidth < 1280 && attempt === 1 && fastEstimates.filter((e) => e >= 1500000).length < 5) {
          throw new HostJitter(`fast at ${x.fast.frameWidth} wide, its estimate at 1.5 Mbit/s or more for under 5 s: ${JSON.stringify(fastEstimates)}`);
        }
        assert.ok(x.fast.frameWidth >= 1280, `fast decodes the top spatial layer: ${fmt(x)}`);
        // Then 5 s, sampled each second: both decode every second, at
        // those widths; slow at 10 fps or more.
        const window5 = [x];
        for (let i = 0; i < 5; i++) {
          await sleep(1000);
          window5.push(await sample());
        }
        console.log(`${codec}, the next 5 s:\n  ${window5.map(fmt).join('\n  ')}`);
        for (let i = 1; i < window5.length; i++) {
          const [a, b] = [window5[i - 1], window5[i]];
          assert.ok(b.fast.framesDecoded > a.fast.framesDecoded, `fast froze: ${fmt(a)} -> ${fmt(b)}`);
          assert.ok(b.slow.framesDecoded > a.slow.framesDecoded, `slow froze: ${fmt(a)} -> ${fmt(b)}`);
          assert.ok(b.fast.frameWidth >= 1280, `fast left the top layer: ${fmt(b)}`);
          assert.ok(b.slow.frameWidth > 0 && b.slow.frameWidth <= 640, `slow above 640 wide: ${fmt(b)}`);
        }
        const [a, b] = [window5[0], window5.at(-1)];
        const fps = (b.slow.framesDecoded - a.slow.framesDecoded) / (b.at - a.at);
        assert.ok(fps >= 10, `slow decodes ${fps.toFixed(1)} fps, want >= 10`);
        assert.match(b.fast.codec ?? '', new RegExp(codec, 'i'));
        assert.match(b.slow.codec ?? '', new RegExp(codec, 'i'));
        for (const p of [pub, fast, slow]) await p.close().catch(() => {});
      } catch (e) {
        if (!(e instanceof HostJitter)) failed = true;
        else for (const p of opened) await p.close().catch(() => {});
        throw e;
      }
    }
  }
});
