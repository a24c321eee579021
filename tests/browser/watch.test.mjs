// The WHEP viewer at /watch/{room} decodes the room's video.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  debugState, joinDemo, launchBrowser, newPage, slotOf, snapshotAll, startServer,
  uniqueRoom, waitInPage, waitMediaFlowing, waitTiles,
} from './harness.mjs';

let server;
let browser;
const pages = [];

before(async () => {
  server = await startServer({ name: 'watch' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test('a viewer on /watch/{room} decodes the room\'s video', async (t) => {
  const room = uniqueRoom('watch');
  try {
    const pub = await newPage(browser, 'publisher');
    pages.push(pub);
    const pubId = await joinDemo(pub, server.base, room, 'Publisher');

    const viewer = await newPage(browser, 'viewer');
    pages.push(viewer);
    const res = await viewer.goto(`${server.base}/watch/${room}`);
    assert.equal(res.status(), 200);
    await waitInPage(viewer, () => window.corelay.pc?.connectionState === 'connected'
      && window.corelay.events.some((e) => e.type === 'welcome'), null, { what: 'the viewer to connect' });
    const loc = await viewer.evaluate(() => window.corelay.location);
    assert.match(loc, new RegExp(`/whep/${room}/[^/]+$`), 'WHEP Location');

    const tiles = await waitTiles(viewer, [pubId]);
    assert.equal(tiles[0].name, 'Publisher');
    const vmid = await slotOf(viewer, pubId, 'video');
    const flow = await waitMediaFlowing(viewer, vmid, 'video');
    t.diagnostic(`viewer decoded ${flow.now} frames via ${flow.stats.decoder} (${flow.stats.codec})`);
    const amid = await slotOf(viewer, pubId, 'audio');
    await waitMediaFlowing(viewer, amid, 'audio');

    // The viewer is receive-only: the publisher's roster counts it
    // (`viewers`) without listing it, and the publisher gets no tile for it.
    const viewerId = await viewer.evaluate(() => window.corelay.participantId);
    await waitInPage(pub, () => window.corelay.session.viewers === 1, null, { what: 'the roster to count 1 viewer' });
    assert.equal(await pub.evaluate((id) => window.corelay.roster.some((p) => p.id === id), viewerId), false, 'the viewer is not listed');
    assert.deepEqual(await pub.evaluate(() => window.corelay.tiles()), []);

    // DELETE on the WHEP Location removes the viewer.
    const del = await viewer.evaluate(async () => (await fetch(window.corelay.location, { method: 'DELETE' })).status);
    assert.equal(del, 204);
    await waitInPage(pub, () => window.corelay.session.viewers === 0, null, { what: 'the roster to count 0 viewers' });

    for (const p of pages) assert.deepEqual(p.errors, [], `${p.label} errors`);
  } catch (err) {
    await snapshotAll(pages, 'watch-failure');
    for (const p of pages) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
    console.log(`--- server log:\n${server.tail(80)}`);
    throw err;
  }
});

// A browser as a WHIP publisher (sendonly video + audio, no data channel, the
// way WHIP clients do it) and a browser on /watch/{room} decoding it.
test('a WHIP publisher (no data channel) is decoded by the /watch viewer', async (t) => {
  const room = uniqueRoom('whip');
  const local = [];
  try {
    const pub = await newPage(browser, 'whip');
    local.push(pub);
    await pub.route(`${server.base}/whip-test`, (route) => route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><link rel="icon" href="data:,"><p>whip</p>' }));
    await pub.goto(`${server.base}/whip-test`);
    const res = await pub.evaluate(async (r) => {
      const stream = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240 }, audio: true });
      const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
      window.pc = pc;
      for (const track of [...stream.getVideoTracks(), ...stream.getAudioTracks()]) pc.addTransceiver(track, { direction: 'sendonly' });
      await pc.setLocalDescription(await pc.createOffer());
      await new Promise((ok) => {
        if (pc.iceGatheringState === 'complete') ok();
        pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok();
        setTimeout(ok, 5000);
      });
      const resp = await fetch(`/whip/${r}`, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
      const out = { status: resp.status, location: resp.headers.get('Location'), pid: resp.headers.get('Participant-Id'), answer: await resp.text() };
      if (resp.status !== 201) return out;
      await pc.setRemoteDescription({ type: 'answer', sdp: out.answer });
      // A trickle PATCH (ICE-lite server: accepted and ignored).
      const frag = 'a=ice-ufrag:' + /a=ice-ufrag:(.*)/.exec(pc.localDescription.sdp)[1].trim() + '\r\n'
        + 'a=ice-pwd:' + /a=ice-pwd:(.*)/.exec(pc.localDescription.sdp)[1].trim() + '\r\n'
        + 'm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=candidate:1 1 udp 2122260223 127.0.0.1 9 typ host\r\n';
      const tr = await fetch(out.location, { method: 'PATCH', headers: { 'Content-Type': 'application/trickle-ice-sdpfrag' }, body: frag });
      out.trickle = tr.status;
      return out;
    }, room);
    assert.equal(res.status, 201, `WHIP POST: ${res.answer}`);
    assert.match(res.location, new RegExp(`^/whip/${room}/[^/]+$`));
    assert.equal(res.trickle, 204, 'trickle PATCH');
    const whipId = res.pid;
    await waitInPage(pub, () => window.pc.connectionState === 'connected', null, { what: 'the WHIP publisher to connect' });

    const viewer = await newPage(browser, 'viewer2');
    local.push(viewer);
    await viewer.goto(`${server.base}/watch/${room}`);
    await waitTiles(viewer, [whipId]);
    const vmid = await slotOf(viewer, whipId, 'video');
    const flow = await waitMediaFlowing(viewer, vmid, 'video');
    assert.equal(flow.stats.frameWidth, 320);
    const amid = await slotOf(viewer, whipId, 'audio');
    await waitMediaFlowing(viewer, amid, 'audio');
    t.diagnostic(`viewer decoded ${flow.now} frames from the WHIP publisher`);

    const del = await pub.evaluate(async (loc) => (await fetch(loc, { method: 'DELETE' })).status, res.location);
    assert.equal(del, 204);
    await waitTiles(viewer, [], { timeout: 5000 });
    for (const p of local) assert.deepEqual(p.errors, [], `${p.label} errors`);
  } catch (err) {
    await snapshotAll(local, 'whip-failure');
    for (const p of local) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
    console.log(`--- server log:\n${server.tail(60)}`);
    throw err;
  }
});
