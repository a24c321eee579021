// Simulcast and the downlink estimate (issue 11), in real browsers. A
// Chromium publisher sends its 1280x720 fake camera as three simulcast
// encodings (the demo page's q/h/f: 320, 640 and 1280 wide). Two receive-only
// Chromium subscribers each show it in one large tile (so their `view` asks
// for the top layer):
//   - "fast" on the test's own network, unshaped;
//   - "slow" in its own network namespace behind a veth pair whose
//     server-side egress is a 300 kbit/s token bucket (tc tbf).
// Within ~12 s of their slots being filled, "fast" must decode the 1280-wide
// layer and "slow" one at most 640 wide, both still decoding over the last
// 5 s (the first 8 s are for the estimates to settle and fast's climbs,
// each tried for 2 s first); /api/v1/stats must show slow's estimate under 600 kbit/s and its slot
// targeting a layer below the top; the layers the subscribers take must be
// active at the publisher (dynacast may only pause the unused ones). One
// failure is retried once (see HostJitter): fast off the top layer after
// its estimate fell, or never reached the top layer's rate, on this shared
// host.
//
// Second test: a publisher that stops sending the layer a subscriber's slot
// forwards (and any above it) on its own, as a browser does with its top
// layers when its uplink or CPU cannot carry them: the slot moves to a
// layer still flowing instead of freezing.
//
// The server listens (HTTP) and advertises its candidate (--public-ip) on
// the veth's server-side address, which the unshaped pages reach locally.
// The namespaced Chromium runs through a wrapper script (`ip netns exec NS
// chromium "$@"`) given to Playwright as its executable: Playwright talks to
// it over pipes, which survive the exec.
//
// Skips (and says why) without tc or a way to make a network namespace,
// veth pair and tbf qdisc (iproute2, CAP_NET_ADMIN).

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  inboundByMid, joinDemo, launchBrowser, newPage, sleep, slotOf, snapshotAll, startServer,
  uniqueRoom,
} from './harness.mjs';

// Names carry the pid: nothing collides with another run, nor with the
// whip-client test's veth (cv0/cv1, 10.77.0.0/24) or the ICE-TCP test's nft
// table (corelay_icetcp_PID). Interface names stay under 16 characters.
const NS = `corelay-sim-${process.pid}`;
const VETH = {
  server: `sim${process.pid}s`, // stays here; its egress is shaped
  client: `sim${process.pid}c`, // moved into NS
  serverIp: '10.78.0.1',
  clientIp: '10.78.0.2',
  prefix: 24,
};
// The shaped downlink: 300 kbit/s, a bucket of two full-size packets (a
// larger burst lets a BWE probe through at line rate, which no real link of
// that speed does), 150 ms of queue. Even this bucket passes a probe of
// five 240-byte padding packets at line rate: slow's estimate reads up to
// 1.4 Mbit/s for a while. What keeps slow off h (about 350 kbit/s) is the
// server's climb trial: it pads slow's link up to what h would take, and
// the estimate comes down before the climb (issue 12's flake: without it
// slow was climbed onto h in most runs and froze in about one in eight).
const TBF = ['rate', '300kbit', 'burst', '3kb', 'latency', '150ms'];
const CHROMIUM = process.env.CHROMIUM || '/usr/lib/chromium/chromium';

// The demo page's encodings (app.js SIMULCAST_ENCODINGS): rid -> the layer id
// /api/v1/stats uses (the rid's position in the offer).
const RIDS = ['q', 'h', 'f'];
const TOP = RIDS.length - 1;

const run = (cmd, ...args) => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const ip = (...args) => run('ip', ...args);
const tc = (...args) => run('tc', ...args);
const quiet = (fn) => { try { fn(); } catch { /* gone already */ } };
const errText = (e) => String(e.stderr || e.message).trim().split('\n')[0];

// Why this cannot run here, or null: try the whole setup once on a probe
// namespace (netns, veth, tbf) and remove it again.
function unavailable() {
  for (const [cmd, args] of [['tc', ['-V']], ['ip', ['-V']]]) {
    try { run(cmd, ...args); } catch (e) { return `no ${cmd} (iproute2): ${errText(e)}`; }
  }
  const probe = `corelay-simprobe-${process.pid}`;
  try {
    ip('netns', 'add', probe);
  } catch (e) {
    return `cannot create a network namespace (ip netns add): ${errText(e)}`;
  }
  try {
    ip('netns', 'exec', probe, 'ip', 'link', 'add', 'pa', 'type', 'veth', 'peer', 'name', 'pb');
    ip('netns', 'exec', probe, 'tc', 'qdisc', 'add', 'dev', 'pa', 'root', 'tbf', ...TBF);
    return null;
  } catch (e) {
    return `cannot make a veth pair with a tbf qdisc: ${errText(e)}`;
  } finally {
    quiet(() => ip('netns', 'del', probe));
  }
}

const skip = unavailable();

describe('simulcast: layers follow each subscriber\'s downlink', { skip: skip ?? false }, () => {
  let server;
  let browser;
  let shapedBrowser;
  let wrapperDir;
  const pages = [];
  let failed = false;

  before(async () => {
    // Namespaces left by runs that were killed before their after() (their
    // pid is gone): /run/netns is shared with the host.
    for (const ns of fs.existsSync('/run/netns') ? fs.readdirSync('/run/netns') : []) {
      const m = /^corelay-sim(?:probe)?-(\d+)$/.exec(ns);
      if (m && !fs.existsSync(`/proc/${m[1]}`)) quiet(() => ip('netns', 'del', ns));
    }
    // The namespace, the veth pair across it, and the shaped egress.
    ip('netns', 'add', NS);
    ip('netns', 'exec', NS, 'ip', 'link', 'set', 'lo', 'up');
    ip('link', 'add', VETH.server, 'type', 'veth', 'peer', 'name', VETH.client, 'netns', NS);
    ip('addr', 'add', `${VETH.serverIp}/${VETH.prefix}`, 'dev', VETH.server);
    ip('link', 'set', VETH.server, 'up');
    ip('netns', 'exec', NS, 'ip', 'addr', 'add', `${VETH.clientIp}/${VETH.prefix}`, 'dev', VETH.client);
    ip('netns', 'exec', NS, 'ip', 'link', 'set', VETH.client, 'up');
    tc('qdisc', 'add', 'dev', VETH.server, 'root', 'tbf', ...TBF);
    for (let i = 0; i < 50 && !/LOWER_UP/.test(ip('link', 'show', VETH.server)); i++) await sleep(50);

    wrapperDir = fs.mkdtempSync(path.join(os.tmpdir(), 'corelay-sim-'));
    const wrapper = path.join(wrapperDir, 'chromium-in-netns');
    fs.writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${NS} ${CHROMIUM} "$@"\n`, { mode: 0o755 });

    server = await startServer({ name: 'simulcast', httpHost: VETH.serverIp, publicIp: VETH.serverIp });
    // getUserMedia needs a secure context: http://127.0.0.1 is one, the
    // veth address is not unless the browser is told so.
    const extraArgs = [`--unsafely-treat-insecure-origin-as-secure=${server.base}`];
    browser = await launchBrowser({ extraArgs });
    shapedBrowser = await launchBrowser({ executablePath: wrapper, extraArgs });
  });

  after(async () => {
    if (failed) await snapshotAll(pages, 'simulcast-failure');
    await browser?.close().catch(() => {});
    await shapedBrowser?.close().catch(() => {});
    await server?.stop();
    quiet(() => tc('qdisc', 'del', 'dev', VETH.server, 'root'));
    quiet(() => ip('link', 'del', VETH.server)); // takes its peer along
    quiet(() => ip('netns', 'del', NS));
    if (wrapperDir) fs.rmSync(wrapperDir, { recursive: true, force: true });
  });

  async function stats() {
    const res = await fetch(`${server.base}/api/v1/stats`);
    return res.json();
  }

  function participantStats(st, id) {
    for (const r of st.room_detail || []) {
      const p = (r.participants || []).find((x) => x.id === id);
      if (p) return p;
    }
    return null;
  }

  // The publisher's simulcast encodings: active flag (sender parameters) and
  // what is being sent (outbound-rtp per rid).
  async function publisherLayers(page) {
    return page.evaluate(async () => {
      const sender = window.corelay.session.senders.video;
      const params = sender.getParameters();
      const out = {};
      for (const e of params.encodings) out[e.rid] = { active: e.active };
      (await sender.getStats()).forEach((r) => {
        if (r.type !== 'outbound-rtp' || !r.rid || !out[r.rid]) return;
        Object.assign(out[r.rid], {
          width: r.frameWidth,
          height: r.frameHeight,
          framesEncoded: r.framesEncoded,
          bytesSent: r.bytesSent,
          limitation: r.qualityLimitationReason,
        });
      });
      return out;
    });
  }

  async function tileSize(page, mid) {
    return page.evaluate((m) => {
      const v = document.querySelector(`.tile[data-mid="${CSS.escape(m)}"] video`);
      return v ? `${v.clientWidth}x${v.clientHeight}` : null;
    }, mid);
  }

  // Record, in the page, each width change of the frames a tile's video
  // presents (requestVideoFrameCallback): [Date.now(), width, height, frames].
  async function recordFrames(page, mid) {
    await page.evaluate((m) => {
      const v = document.querySelector(`.tile[data-mid="${CSS.escape(m)}"] video`);
      const rec = { changes: [], frames: 0 };
      window.simFrames = rec;
      const cb = (_now, md) => {
        rec.frames++;
        const lastW = rec.changes.at(-1)?.[1];
        if (md.width !== lastW) rec.changes.push([Date.now(), md.width, md.height, rec.frames]);
        v.requestVideoFrameCallback(cb);
      };
      v.requestVideoFrameCallback(cb);
    }, mid);
  }

  // Poll /api/v1/stats every 250 ms in the background; keep the samples where
  // a slot's layer or target changed (with the estimate then).
  function pollLayers(ids) {
    const changes = [];
    const last = {};
    let stop = false;
    const done = (async () => {
      while (!stop) {
        try {
          const st = await stats();
          for (const [label, id] of Object.entries(ids)) {
            const p = participantStats(st, id);
            const l = p?.layers?.[0];
            const key = l ? `${l.layer}/${l.target}` : 'none';
            if (last[label] !== key) {
              last[label] = key;
              changes.push([Date.now(), label, `layer ${l?.layer} target ${l?.target} switches ${l?.switches} estimate ${p?.estimate_bps}`]);
            }
          }
        } catch { /* server gone */ }
        await sleep(250);
      }
    })();
    return { changes, async stop() { stop = true; await done; } };
  }

  // In the publisher's page: the `layers` events it gets, and each second,
  // per rid, the payload bitrate it sent (kbit/s; of which retransmissions,
  // and the encoder's target), the frames and keyframes it encoded in that
  // second, and the width.
  async function recordPublisher(page) {
    await page.evaluate(() => {
      window.simLayers = [];
      window.corelay.session.addEventListener('layers', (e) => window.simLayers.push([Date.now(), e.detail.active]));
      window.simPub = [];
      let prev = {};
      setInterval(async () => {
        const now = {};
        (await window.corelay.session.senders.video.getStats()).forEach((r) => {
          if (r.type === 'outbound-rtp' && r.rid) now[r.rid] = r;
        });
        const row = {};
        for (const [rid, r] of Object.entries(now)) {
          const p = prev[rid];
          if (!p) continue;
          const dt = (r.timestamp - p.timestamp) / 1000;
          const kbps = (field) => Math.round((((r[field] ?? 0) - (p[field] ?? 0)) * 8) / dt / 1000);
          row[rid] = `${kbps('bytesSent')}k (rtx ${kbps('retransmittedBytesSent')}k, target ${Math.round((r.targetBitrate ?? 0) / 1000)}k) `
            + `${r.framesEncoded - p.framesEncoded}f ${r.keyFramesEncoded - p.keyFramesEncoded}kf ${r.frameWidth ?? '-'}w`;
        }
        prev = now;
        window.simPub.push([Date.now(), row]);
      }, 1000);
    });
  }

  // The one failure of the first test that is retried, once: the unshaped
  // subscriber off the top layer because the server's estimate for it fell
  // below the top layer's rate (1.5 Mbit/s, the demo page's f), everything
  // about the shaped one as required. On unshaped loopback that fall is
  // the delay-based estimator seeing this host's scheduling delay (three
  // Chromiums and the server on two cores; it failed one CI run on
  // 2026-12-04: fast's estimate cut from 1.95 Mbit/s to 0.85 of what was
  // getting through, as GCC does on overuse), not a link. Nor is an
  // estimate that climbs but stays below the top layer's rate for the whole
  // judgement: on unshaped loopback the first probes lift it past 1.5
  // Mbit/s within a second (to 1.8 to 6 Mbit/s in three runs here), and one
  // CI run on 2026-12-06 saw it crawl from 0.67 to 0.97 Mbit/s in 12 s,
  // the probes' delay read as overuse. Either is retried once; a server that
  // never probes, or caps the estimate, fails the retry too. Anything on the
  // slow side fails at once.
  class HostJitter extends Error {}
  const TOP_BPS = 1500000;

  test('unshaped subscriber gets the 1280-wide layer, the 300 kbit/s one a lower layer, neither freezes', async () => {
    try {
      await unshapedAndShaped(1);
    } catch (e) {
      if (!(e instanceof HostJitter)) throw e;
      console.log(`first attempt: ${e.message}\nonce more, in a new room with new pages`);
      await unshapedAndShaped(2);
    }
  });

  async function unshapedAndShaped(attempt) {
    let poller;
    let pub;
    let fast;
    let slow;
    let t0 = Date.now();
    const rel = (t) => ((t - t0) / 1000).toFixed(2);
    const elapsed = () => rel(Date.now());
    const inPage = (page, fn) => (page ? page.evaluate(fn).catch(() => null) : null);

    // Everything recorded, in time order: the server's layer choices, the
    // publisher's `layers` events and rates, the widths each tile presents.
    async function printTimeline() {
      await poller?.stop();
      const [layersEvents, pubRates, fastFrames, slowFrames] = await Promise.all([
        inPage(pub, () => window.simLayers), inPage(pub, () => window.simPub),
        inPage(fast, () => window.simFrames), inPage(slow, () => window.simFrames),
      ]);
      const lines = [
        ...(poller?.changes || []).map(([t, who, what]) => [t, `server ${who}: ${what}`]),
        ...(layersEvents || []).map(([t, active]) => [t, `publisher gets layers ${JSON.stringify(active)}`]),
        ...(pubRates || []).map(([t, row]) => [t, `publisher sent ${JSON.stringify(row)}`]),
        ...(fastFrames?.changes || []).map(([t, w, h, n]) => [t, `fast presents ${w}x${h} (frame ${n})`]),
        ...(slowFrames?.changes || []).map(([t, w, h, n]) => [t, `slow presents ${w}x${h} (frame ${n})`]),
      ].sort((a, b) => a[0] - b[0]).map(([t, what]) => `${rel(t)} s: ${what}`);
      console.log(`timeline (s after the slots filled; the server's figures are its /api/v1/stats, which it refreshes each second):\n  ${lines.join('\n  ')}`);
      return { layersEvents: layersEvents || [], slowFrames };
    }

    try {
      const room = uniqueRoom('simulcast');
      pub = await newPage(browser, 'pub');
      fast = await newPage(browser, 'fast');
      slow = await newPage(shapedBrowser, 'slow');
      pages.push(pub, fast, slow);

      const pubId = await joinDemo(pub, server.base, room, 'Pub', { query: 'video=1280x720' });
      await recordPublisher(pub);
      const offer = await pub.evaluate(() => window.corelay.offer);
      assert.match(offer, /a=simulcast:send q;h;f/, 'the publisher offers simulcast q;h;f');
      const fastId = await joinDemo(fast, server.base, room, 'Fast', { recvonly: true });
      const slowId = await joinDemo(slow, server.base, room, 'Slow', { recvonly: true });
      poller = pollLayers({ fast: fastId, slow: slowId });

      const fastMid = await slotOf(fast, pubId, 'video');
      const slowMid = await slotOf(slow, pubId, 'video');
      t0 = Date.now();
      await recordFrames(fast, fastMid);
      await recordFrames(slow, slowMid);
      console.log(`slots filled: fast mid ${fastMid} tile ${await tileSize(fast, fastMid)}, slow mid ${slowMid} tile ${await tileSize(slow, slowMid)}`);

      // Within ~12 s (14 s: the machine is shared): fast decodes >= 1280
      // wide, slow <= 640 wide. Not judged in the first 8 s: slow's
      // estimate starts at --bwe-start-kbps (above its link's rate when that
      // is set high), and fast's two climbs are each tried for 2 s before
      // they are made, so it reaches the top layer 4 to 5 s in (it was 0 to
      // 2 s before the trials; judged from 5 s then, its estimate had as
      // long to settle after its last climb as it has from 8 s now). The 5 s
      // after that must be clean.
      const sample = async () => {
        const [f, s] = await Promise.all([inboundByMid(fast), inboundByMid(slow)]);
        return { fast: f[fastMid] || {}, slow: s[slowMid] || {} };
      };
      const good = (x) => x.fast.frameWidth >= 1280 && x.slow.frameWidth > 0 && x.slow.frameWidth <= 640;
      const fmt = (x) => `fast ${x.fast.frameWidth}x${x.fast.frameHeight} frames ${x.fast.framesDecoded}, `
        + `slow ${x.slow.frameWidth}x${x.slow.frameHeight} frames ${x.slow.framesDecoded}`;
      // The server's estimate for fast at each sample, and the retry's
      // condition (see HostJitter): on the first attempt, a failure that is
      // fast's alone after its estimate fell by a fifth or more to below
      // the top layer's rate, or while it never reached that rate.
      const fastEstimates = [];
      const slowOk = (x) => x.slow.frameWidth > 0 && x.slow.frameWidth <= 640;
      const jitterOnly = (x, what) => {
        if (attempt !== 1 || !slowOk(x)) return;
        const fell = fastEstimates.findIndex((e, i) => e < TOP_BPS
          && fastEstimates.slice(0, i).some((before) => e <= before * 0.8));
        if (fell >= 0) {
          throw new HostJitter(`${what}: ${fmt(x)}, after fast's estimate fell to `
            + `${fastEstimates[fell]} bps (estimates ${JSON.stringify(fastEstimates)})`);
        }
        if (fastEstimates.length > 0 && fastEstimates.every((e) => e < TOP_BPS)) {
          throw new HostJitter(`${what}: ${fmt(x)}, fast's estimate never reached `
            + `${TOP_BPS} bps (estimates ${JSON.stringify(fastEstimates)})`);
        }
      };
      const line = (x, st) => {
        const f = participantStats(st, fastId);
        const s = participantStats(st, slowId);
        if (Number.isFinite(f?.estimate_bps)) fastEstimates.push(f.estimate_bps);
        return `${elapsed()} s: ${fmt(x)}; estimate fast ${f?.estimate_bps} slow ${s?.estimate_bps}; `
          + `layers fast ${JSON.stringify(f?.layers)} slow ${JSON.stringify(s?.layers)}`;
      };
      const trace = [];
      let now;
      for (;;) {
        now = await sample();
        trace.push(line(now, await stats()));
        if ((good(now) && Date.now() - t0 >= 8000) || Date.now() - t0 > 14000) break;
        await sleep(1000);
      }
      console.log(`after the slots filled (inbound-rtp, /api/v1/stats):\n  ${trace.join('\n  ')}`);
      if (!good(now)) jitterOnly(now, 'fast not 1280 wide within 14 s');
      assert.ok(good(now), `within 14 s of the slots being filled: fast >= 1280 wide, slow <= 640 wide; last: ${fmt(now)}`);

      // Then 5 s more: both keep decoding, at those widths.
      const start = now;
      const tStart = Date.now();
      const window5 = [];
      const slowEstimates = [];
      const slowClimbEstimates = [];
      let st;
      let end;
      for (let i = 0; i < 5; i++) {
        await sleep(1000);
        end = await sample();
        st = await stats();
        window5.push(line(end, st));
        slowEstimates.push(participantStats(st, slowId)?.estimate_bps);
        slowClimbEstimates.push(participantStats(st, slowId)?.climb_estimate_bps);
      }
      const tEnd = Date.now();
      console.log(`the next 5 s (${rel(tStart)}-${rel(tEnd)} s):\n  ${window5.join('\n  ')}`);
      const pFast = participantStats(st, fastId);
      const pSlow = participantStats(st, slowId);
      const pubLayers = await publisherLayers(pub);
      const { layersEvents, slowFrames } = await printTimeline();
      // Widths slow presented from tStart to tEnd: the one shown at tStart
      // and any change after.
      const slowWidths = [
        slowFrames.changes.filter(([t]) => t <= tStart).at(-1),
        ...slowFrames.changes.filter(([t]) => t > tStart && t <= tEnd),
      ].filter(Boolean).map((c) => c[1]);
      const c = st.total;
      console.log(`framesDecoded over those 5 s: fast +${end.fast.framesDecoded - start.fast.framesDecoded}, slow +${end.slow.framesDecoded - start.slow.framesDecoded}; `
        + `widths slow presented: ${JSON.stringify(slowWidths)}`);
      console.log(`estimates: fast ${pFast?.estimate_bps} bps, slow ${pSlow?.estimate_bps} bps; layers: fast ${JSON.stringify(pFast?.layers)}, slow ${JSON.stringify(pSlow?.layers)}`);
      console.log(`publisher encodings: ${JSON.stringify(pubLayers)}`);
      console.log(`server counters: layer_switches ${c.layer_switches} layer_pauses ${c.layer_pauses} dynacast_notices ${c.dynacast_notices} `
        + `keyframe_requests_sent ${c.keyframe_requests_sent}; slow: nacks_received ${pSlow?.nacks_received} egress_loss ${pSlow?.egress_loss} rtt_ms ${pSlow?.rtt_ms}`);

      assert.ok(end.fast.framesDecoded - start.fast.framesDecoded >= 25, `fast keeps decoding (>= 5 fps over 5 s): ${fmt(start)} -> ${fmt(end)}`);
      assert.ok(end.slow.framesDecoded - start.slow.framesDecoded >= 10, `slow keeps decoding (>= 2 fps over 5 s): ${fmt(start)} -> ${fmt(end)}`);
      if (!good(end)) jitterOnly(end, 'fast no longer 1280 wide');
      assert.ok(good(end), `still fast >= 1280 wide, slow <= 640 wide: ${fmt(end)}`);
      assert.ok(slowWidths.length > 0 && Math.max(...slowWidths) <= 640, `slow presents nothing wider than 640 in those 5 s: ${JSON.stringify(slowWidths)}`);

      // The server's view: what slow's climbs count on fits its link, and
      // its slot aims below the top layer; fast's slot forwards the top.
      // (The median over the window, of `climb_estimate_bps`, the lowest
      // estimate of the last 2 s: str0m's own, `estimate_bps`, reads up to
      // 1.5 Mbit/s for a second or two when a probe passes the bucket's
      // burst, more often now that slow stays on q and no longer overloads
      // its link; the median of that failed 1 run in 10 here.)
      assert.ok(pSlow && Number.isFinite(pSlow.estimate_bps), `slow has an estimate: ${JSON.stringify(pSlow)}`);
      const median = [...slowClimbEstimates].sort((a, b) => a - b)[Math.floor(slowClimbEstimates.length / 2)];
      assert.ok(median < 600000, `slow's climb estimate < 600 kbit/s behind a 300 kbit/s link (median of ${JSON.stringify(slowClimbEstimates)}; str0m's estimates ${JSON.stringify(slowEstimates)})`);
      const slowSlot = pSlow.layers.find((l) => l.mid === slowMid);
      const fastSlot = pFast.layers.find((l) => l.mid === fastMid);
      // A target of null is a pause (an estimate below the lowest layer).
      assert.ok(slowSlot && (slowSlot.target ?? -1) < TOP, `slow's slot ${slowMid} targets a layer below ${TOP}: ${JSON.stringify(pSlow.layers)}`);
      if (fastSlot?.layer !== TOP) jitterOnly(end, `fast's slot forwards layer ${fastSlot?.layer}`);
      assert.ok(fastSlot && fastSlot.layer === TOP, `fast's slot ${fastMid} forwards layer ${TOP}: ${JSON.stringify(pFast.layers)}`);

      // Dynacast may pause only what nobody takes: the layers the two slots
      // forward are active at the publisher, and the last `layers` event (if
      // any) names them.
      const taken = [...new Set([fastSlot.layer, slowSlot.layer].filter((l) => l !== null))].map((l) => RIDS[l]);
      for (const rid of taken) {
        assert.equal(pubLayers[rid]?.active, true, `encoding ${rid} (taken) is active at the publisher: ${JSON.stringify(pubLayers)}`);
      }
      const last = layersEvents.at(-1)?.[1];
      if (last) {
        for (const rid of taken) assert.ok(last.includes(rid), `the last layers event names ${rid}: ${JSON.stringify(last)}`);
      }
    } catch (e) {
      if (!(e instanceof HostJitter)) failed = true;
      await printTimeline().catch((x) => console.log(`no timeline: ${x}`));
      for (const p of pages) if (p.errors.length) console.log(`${p.label} errors:\n  ${p.errors.slice(-10).join('\n  ')}`);
      const st = await stats().catch((x) => String(x));
      console.log(`server log tail:\n${server.tail(30)}\n/api/v1/stats room_detail: ${JSON.stringify(st?.room_detail)}`);
      throw e;
    } finally {
      if (attempt === 1) {
        await poller?.stop();
        for (const p of [pub, fast, slow]) await p?.context().close().catch(() => {});
      }
    }
  }

  // A browser turns its top layers off on its own when its uplink or CPU no
  // longer carries them. Played here by turning off, in the publisher's
  // page, the encoding the subscriber's slot forwards and any above it
  // (what the SFU sees is the same: those rids' packets stop) while an
  // unshaped subscriber shows it: its slot must move to a layer still
  // flowing within about a second, not freeze.
  test('a subscriber on a layer the publisher stops keeps decoding on a lower one', async () => {
    const room = uniqueRoom('simulcast-stop');
    const pub = await newPage(browser, 'pub-stop');
    const sub = await newPage(browser, 'sub-stop');
    pages.push(pub, sub);
    try {
      const pubId = await joinDemo(pub, server.base, room, 'Pub', { query: 'video=1280x720' });
      const subId = await joinDemo(sub, server.base, room, 'Sub', { recvonly: true });
      const mid = await slotOf(sub, pubId, 'video');
      const inbound = async () => (await inboundByMid(sub))[mid] || {};
      // The layer the server forwards into the slot and the one it aims
      // at (/api/v1/stats).
      const slotNow = async () => participantStats(await stats(), subId)?.layers?.find((l) => l.mid === mid) ?? {};
      // Up to 15 s for the slot to settle above q (on the top layer on an
      // idle machine; a busy one's encoder may not get that far).
      let s = await slotNow();
      for (let i = 0; i < 60 && !(s.layer >= 1 && s.target === s.layer); i++) {
        await sleep(250);
        s = await slotNow();
      }
      const layer = s.layer;
      assert.ok(layer >= 1 && s.target === layer, `the slot settles above q within 15 s: ${JSON.stringify(s)}`);
      const x = await inbound();
      await recordFrames(sub, mid);
      const stoppedAt = Date.now();
      const off = RIDS.slice(layer);
      // From now on the encoder cannot send them, whatever the SFU's
      // `layers` messages ask for.
      await pub.evaluate(async (rids) => {
        const session = window.corelay.session;
        const apply = session.applyLayers.bind(session);
        session.applyLayers = (active) => apply(active.filter((r) => !rids.includes(r)));
        const sender = session.senders.video;
        const params = sender.getParameters();
        for (const e of params.encodings) if (rids.includes(e.rid)) e.active = false;
        await sender.setParameters(params);
      }, off);
      // Sampled every 250 ms for 4 s: how long the decoder went without a
      // new frame, and the layer the slot ends on.
      const samples = [];
      let last = x.framesDecoded;
      let lastAt = stoppedAt;
      let longest = 0;
      let now = layer;
      while (Date.now() - stoppedAt < 4000) {
        await sleep(250);
        const y = await inbound();
        const sl = await slotNow();
        now = sl.layer ?? null;
        const t = Date.now();
        if (y.framesDecoded !== last) {
          last = y.framesDecoded;
          lastAt = t;
        }
        longest = Math.max(longest, t - lastAt);
        samples.push(`${t - stoppedAt} ms: layer ${now} target ${sl.target}, ${y.frameWidth}x${y.frameHeight} frames ${y.framesDecoded}`);
      }
      const changes = await sub.evaluate(() => window.simFrames.changes);
      console.log(`publisher encodings: ${JSON.stringify(await publisherLayers(pub))}`);
      console.log(`on layer ${layer} (${x.frameWidth}x${x.frameHeight}); ${JSON.stringify(off)} stopped at the publisher:\n  ${samples.join('\n  ')}\n`
        + `widths presented: ${JSON.stringify(changes.map(([t, w]) => [t - stoppedAt, w]))}; longest without a new frame ${longest} ms`);
      assert.ok(now !== null && now < layer, `ends on a layer below ${layer}, still flowing: layer ${now}`);
      assert.ok(longest < 2000, `no new frame for ${longest} ms`);
    } catch (e) {
      failed = true;
      const st = await stats().catch((err) => String(err));
      console.log(`server log tail:\n${server.tail(30)}\n/api/v1/stats room_detail: ${JSON.stringify(st?.room_detail)}`);
      throw e;
    }
  });
});
