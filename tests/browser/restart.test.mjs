// ICE restart by WHIP PATCH (issue 50.2, RFC 9725 §4.3.3) from a real
// browser: a Chromium WHIP publisher (its own JS, no demo assets) calls
// pc.restartIce(), sends its new ufrag, password and candidates as an
// application/trickle-ice-sdpfrag PATCH with If-Match: *, gets 200 with the
// server's new credentials and candidates and a new ETag, and sets them as
// its remote description (the POST's answer with only ICE changed). Its
// selected candidate pair is then one of the new ICE generation (the
// server answered checks with the new credentials), and a /watch viewer
// keeps decoding it throughout. A stale If-Match is 412 and a restart
// without one 428, both leaving the call alone. Then the /watch page
// restarts its own WHEP session the way it does when its connection is
// down (CorelaySession.restartIce: a fragment PATCH) and keeps decoding.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  launchBrowser, newPage, sleep, slotOf, snapshotAll, startServer, uniqueRoom, waitFramesDecoded,
  waitInPage,
} from './harness.mjs';

let server;
let browser;
const pages = [];

before(async () => {
  server = await startServer({ name: 'restart' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

// Frames the viewer decoded on `mid` so far.
async function decoded(page, mid) {
  return page.evaluate(async (m) => {
    const stats = [...(await window.corelay.pc.getStats()).values()];
    const tr = window.corelay.pc.getTransceivers().find((t) => t.mid === m);
    const id = tr?.receiver.track.id;
    const s = stats.find((x) => x.type === 'inbound-rtp' && x.kind === 'video' && (x.trackIdentifier === id || x.mid === m));
    return s?.framesDecoded ?? 0;
  }, mid);
}

test('a browser WHIP publisher restarts ICE by PATCH and stays decoded', async () => {
  const room = uniqueRoom('restart');
  try {
    const pub = await newPage(browser, 'whip-publisher');
    pages.push(pub);
    await pub.goto(`${server.base}/healthz`);
    const joined = await pub.evaluate(async (r) => {
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
      const out = { status: resp.status, location: resp.headers.get('Location'), etag: resp.headers.get('ETag'), pid: resp.headers.get('Participant-Id'), answer: await resp.text() };
      if (resp.status === 201) await pc.setRemoteDescription({ type: 'answer', sdp: out.answer });
      window.whip = out;
      return out;
    }, room);
    assert.equal(joined.status, 201, joined.answer);
    await waitInPage(pub, () => window.pc.connectionState === 'connected', null, { what: 'the WHIP publisher to connect' });

    const viewer = await newPage(browser, 'viewer');
    pages.push(viewer);
    await viewer.goto(`${server.base}/watch/${room}`);
    const mid = await slotOf(viewer, joined.pid, 'video');
    await waitFramesDecoded(viewer, mid, 20);

    const res = await pub.evaluate(async () => {
      const pc = window.pc;
      const { location, answer } = window.whip;
      const ice = (sdp, what) => new RegExp(`a=${what}:(.*)`).exec(sdp)[1].trim();
      pc.restartIce();
      await pc.setLocalDescription(await pc.createOffer());
      await new Promise((ok) => {
        if (pc.iceGatheringState === 'complete') ok();
        pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok();
        setTimeout(ok, 5000);
      });
      const offer = pc.localDescription.sdp;
      const mids = offer.split(/\r?\n/).filter((l) => l.startsWith('a=mid:')).map((l) => l.slice(6));
      const cands = offer.split(/\r?\n/).filter((l) => l.startsWith('a=candidate:'));
      const frag = `a=ice-options:trickle\r\na=group:BUNDLE ${mids.join(' ')}\r\nm=video 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:${mids[0]}\r\n`
        + `a=ice-ufrag:${ice(offer, 'ice-ufrag')}\r\na=ice-pwd:${ice(offer, 'ice-pwd')}\r\n`
        + cands.map((c) => `${c}\r\n`).join('') + 'a=end-of-candidates\r\n';
      const patch = (headers) => fetch(location, { method: 'PATCH', headers: { 'Content-Type': 'application/trickle-ice-sdpfrag', ...headers }, body: frag });
      const out = { clientUfrag: ice(offer, 'ice-ufrag'), oldServerUfrag: ice(answer, 'ice-ufrag') };
      out.noIfMatch = (await patch({})).status;
      out.stale = (await patch({ 'If-Match': '"p0.99"' })).status;
      const r = await patch({ 'If-Match': '*' });
      out.status = r.status;
      out.type = r.headers.get('Content-Type');
      out.etag = r.headers.get('ETag');
      out.body = await r.text();
      if (r.status !== 200) return out;
      out.serverUfrag = ice(out.body, 'ice-ufrag');
      const newCands = out.body.split(/\r?\n/).filter((l) => l.startsWith('a=candidate:'));
      // The POST's answer with only ICE changed (RFC 9725 §4.3.3).
      const remote = answer
        .replace(/a=ice-ufrag:.*\r?\n/g, `a=ice-ufrag:${out.serverUfrag}\r\n`)
        .replace(/a=ice-pwd:.*\r?\n/g, `a=ice-pwd:${ice(out.body, 'ice-pwd')}\r\n`)
        .replace(/a=candidate:.*\r?\n/g, '')
        .replace(/a=end-of-candidates\r?\n/g, newCands.map((c) => `${c}\r\n`).join('') + 'a=end-of-candidates\r\n');
      await pc.setRemoteDescription({ type: 'answer', sdp: remote });
      return out;
    });
    assert.equal(res.noIfMatch, 428, 'an ICE restart without If-Match');
    assert.equal(res.stale, 412, 'an ICE restart with a stale If-Match');
    assert.equal(res.status, 200, `ICE restart PATCH: ${res.body}`);
    assert.equal(res.type, 'application/trickle-ice-sdpfrag');
    assert.ok(res.etag && res.etag !== joined.etag, `a new ETag: ${res.etag} after ${joined.etag}`);
    assert.notEqual(res.serverUfrag, res.oldServerUfrag, 'new server credentials');

    // The selected pair becomes one of the new generation: the server
    // answered Chromium's checks with the new credentials.
    await waitInPage(pub, async (ufrag) => {
      const stats = [...(await window.pc.getStats()).values()];
      const transport = stats.find((s) => s.type === 'transport' && s.selectedCandidatePairId);
      const pair = stats.find((s) => s.id === transport?.selectedCandidatePairId);
      const local = stats.find((s) => s.id === pair?.localCandidateId);
      return window.pc.connectionState === 'connected' && local?.usernameFragment === ufrag;
    }, res.clientUfrag, { timeout: 15000, what: 'a selected pair of the new ICE generation' });

    // The viewer keeps decoding, past the old generation's consent timeout.
    for (let i = 0; i < 4; i++) {
      const before = await decoded(viewer, mid);
      await sleep(3000);
      const now = await decoded(viewer, mid);
      assert.ok(now > before + 20, `the viewer stopped decoding after the restart (${before} -> ${now})`);
    }
    assert.equal(await pub.evaluate(() => window.pc.connectionState), 'connected');

    // The /watch page's own restart (what it does when its connection is
    // down): a WHEP session, so a fragment PATCH with If-Match *.
    const viewerRestart = await viewer.evaluate(async () => {
      const s = window.corelay.session;
      const etag = s.etag;
      await s.restartIce('test');
      const ufrag = /a=ice-ufrag:(.*)/.exec(s.pc.localDescription.sdp)[1].trim();
      return { etag, after: s.etag, restarts: s.restarts, ufrag, state: s.pc.signalingState };
    });
    assert.equal(viewerRestart.restarts, 1, JSON.stringify(viewerRestart));
    assert.equal(viewerRestart.state, 'stable', JSON.stringify(viewerRestart));
    assert.notEqual(viewerRestart.after, viewerRestart.etag, 'the viewer has the new ETag');
    await waitInPage(viewer, async (ufrag) => {
      const stats = [...(await window.corelay.pc.getStats()).values()];
      const transport = stats.find((s) => s.type === 'transport' && s.selectedCandidatePairId);
      const pair = stats.find((s) => s.id === transport?.selectedCandidatePairId);
      const local = stats.find((s) => s.id === pair?.localCandidateId);
      return window.corelay.pc.connectionState === 'connected' && local?.usernameFragment === ufrag;
    }, viewerRestart.ufrag, { timeout: 15000, what: 'the viewer on its new ICE generation' });
    const before = await decoded(viewer, mid);
    await sleep(3000);
    assert.ok(await decoded(viewer, mid) > before + 20, 'the viewer decodes after its own restart');
  } catch (e) {
    await snapshotAll(pages, 'restart-failure');
    throw e;
  }
});
