// End-to-end encryption passes through the server (issue 53, item 4): two
// demo pages with ?e2ee=secret encrypt every frame they send (the page's
// RTCRtpScriptTransform: AES-GCM, a frame's first bytes in the clear) and
// decode each other's video and audio; a third page without the passphrase
// joins the same room and survives. Simulcast still switches layers (the
// server reads keyframes from the clear bytes). The server forwards frames it cannot
// read: AES-GCM authenticates every byte of a frame (the clear header as
// associated data), so one frame changed on the way would fail to open.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  joinDemo, launchBrowser, newPage, sleep, slotOf, snapshotAll, startServer,
  uniqueRoom, waitInPage, waitMediaFlowing,
} from './harness.mjs';

let server;
let browser;
const pages = [];

before(async () => {
  server = await startServer({ name: 'e2ee' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

// Frames the page's transforms encrypted, decrypted and could not open.
const counts = (page) => page.evaluate(() => window.corelay.e2ee);

// Audio energy received from `participant` (the fake microphones beep:
// decrypted audio has energy; a frame that failed to open is dropped).
const audioEnergy = (page, participant) => page.evaluate(async (p) => {
  const s = window.corelay.session;
  const slot = s.slots.find((x) => x.kind === 'audio' && x.participant === p);
  let e = 0;
  (await s.pc.getStats()).forEach((r) => { if (r.type === 'inbound-rtp' && r.mid === slot?.mid) e = r.totalAudioEnergy ?? 0; });
  return e;
}, participant);

test('two pages with ?e2ee=secret decode each other through the server; a page without it survives', async (t) => {
  const room = uniqueRoom('e2ee');
  try {
    const a = await newPage(browser, 'alice');
    const b = await newPage(browser, 'bob');
    pages.push(a, b);
    const ids = {};
    ids.alice = await joinDemo(a, server.base, room, 'Alice', { query: 'e2ee=secret' });
    ids.bob = await joinDemo(b, server.base, room, 'Bob', { query: 'e2ee=secret' });
    assert.match(await a.textContent('#status'), /end-to-end encrypted/);

    for (const [page, other] of [[a, ids.bob], [b, ids.alice]]) {
      const vmid = await slotOf(page, other, 'video');
      const flow = await waitMediaFlowing(page, vmid, 'video');
      t.diagnostic(`${page.label} decodes ${other}'s encrypted video: ${flow.now} frames, ${flow.stats.codec} ${flow.stats.frameWidth}x${flow.stats.frameHeight}`);
      assert.match(flow.stats.codec ?? '', /VP8/i, 'E2EE video is VP8');
      const deadline = Date.now() + 15000;
      while (!(await audioEnergy(page, other) > 0)) {
        assert.ok(Date.now() < deadline, `${page.label}: energy in ${other}'s decrypted audio within 15 s`);
        await sleep(200);
      }
    }
    // Simulcast under E2EE: the server finds keyframes (and their size) in
    // the clear header bytes, so it switches Alice's slot of Bob up from
    // the lowest layer as her estimate grows.
    const vmid = await slotOf(a, ids.bob, 'video');
    const t0 = Date.now();
    const width = await waitInPage(a, async (mid) => {
      let w = 0;
      (await window.corelay.pc.getStats()).forEach((r) => { if (r.type === 'inbound-rtp' && r.mid === mid) w = r.frameWidth ?? 0; });
      return w >= 320 ? w : null;
    }, vmid, { timeout: 30000, what: 'alice to get a higher layer of bob\'s encrypted video' });
    t.diagnostic(`alice's slot of bob switched up to ${width} px wide ${Date.now() - t0} ms later`);
    await sleep(1000);
    for (const page of [a, b]) {
      const c = await counts(page);
      t.diagnostic(`${page.label}: ${JSON.stringify(c)}`);
      assert.ok(c.encrypted > 100, `${page.label} encrypts what it sends: ${JSON.stringify(c)}`);
      assert.ok(c.decrypted > 100, `${page.label} opens what it receives: ${JSON.stringify(c)}`);
      assert.equal(c.failed, 0, `${page.label}: every frame the server forwarded opens (unchanged on the way)`);
    }

    // Carol has no passphrase: she joins, gets frames she cannot read, and
    // stays connected; Alice and Bob go on decoding each other.
    const c = await newPage(browser, 'carol');
    pages.push(c);
    ids.carol = await joinDemo(c, server.base, room, 'Carol');
    assert.equal(await c.evaluate(() => window.corelay.e2ee), null);
    const cmid = await slotOf(c, ids.alice, 'video');
    const before = { a: await counts(a), bobAudio: await audioEnergy(a, ids.bob) };
    await sleep(8000);
    const carol = await c.evaluate(async (mid) => {
      let r = null;
      (await window.corelay.pc.getStats()).forEach((x) => { if (x.type === 'inbound-rtp' && x.mid === mid) r = x; });
      return { state: window.corelay.pc.connectionState, packets: r?.packetsReceived ?? 0, frames: r?.framesDecoded ?? 0 };
    }, cmid);
    t.diagnostic(`carol, without the passphrase, after 8 s: ${JSON.stringify(carol)}`);
    assert.equal(carol.state, 'connected', 'carol survives');
    assert.ok(carol.packets > 30, 'carol receives alice\'s (encrypted) video');
    const after = await counts(a);
    assert.ok(after.decrypted > before.a.decrypted + 100, 'alice still opens bob\'s frames');
    assert.ok(after.failed > 0, 'carol\'s unencrypted frames do not open at alice: dropped, not shown');
    assert.ok(await audioEnergy(a, ids.bob) > before.bobAudio, 'alice still hears bob');
    const info = await server.room(room);
    assert.equal(info.participants.length, 3);
    for (const p of pages) assert.deepEqual(p.errors, [], `${p.label} errors`);
  } catch (err) {
    await snapshotAll(pages, 'e2ee');
    throw err;
  }
});
