// simple-whip-client (Debian's simple-whip-client, GStreamer 1.22 webrtcbin +
// libnice + OpenSSL DTLS) publishes over WHIP; Chromium's /watch/{room}
// viewer (WHEP) decodes it; the client's DELETE on exit removes it.
//
// Issue 10, real-client matrix: with GStreamer "DTLS fails:
// dtls1_read_bytes: sslv3 alert handshake failure" (the server's DTLS took
// only ECDSA client certificates, and GStreamer's dtlsenc presents an RSA
// one). ICE connected and the server logged `joined`, then OpenSSL on the
// client side got alert 40 from the server. This test must see DTLS come up,
// media decoded and the DELETE, so that failure cannot come back unnoticed.
//
// Both codecs on one server with default settings (--video-codecs vp8,h264):
// a room takes the first of those its first video publisher offers, and
// simple-whip-client offers only the codec of its pipeline, so the H.264
// client opens an H.264 room and the VP8 client a VP8 one.
//
// What it takes to run GStreamer's WebRTC stack in the test's namespace
// (helpers in realclient.mjs): a stub libgupnp-igd (libsoup 2/3 clash at
// start-up) and a veth pair (libnice leaves loopback out of its candidates),
// with the server's candidate on the veth (--public-ip 10.77.0.1).
//
// Skips, saying why, when there is no simple-whip-client (scripts/test-browser
// installs it with apt), when gcc cannot build the stub, or when the veth
// pair cannot be made (no CAP_NET_ADMIN).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import {
  debugState, launchBrowser, newPage, sleep, slotOf, snapshotAll, startServer,
  uniqueRoom, waitFramesDecoded, waitMediaFlowing, waitTiles,
} from '../browser/harness.mjs';
import { VETH, buildIgdStub, setupVeth, whipClient, whipClientUnavailable } from './realclient.mjs';

let unavailable = whipClientUnavailable();
let stubDir;
let removeVeth = async () => {};
if (!unavailable) {
  try {
    stubDir = buildIgdStub();
    removeVeth = await setupVeth();
  } catch (err) {
    unavailable = err.message;
    if (stubDir) fs.rmSync(stubDir, { recursive: true, force: true });
  }
}

describe('simple-whip-client (GStreamer webrtcbin) publishes over WHIP', { skip: unavailable ?? false }, () => {
  let server;
  let browser;

  before(async () => {
    // Default codecs on purpose (whatever CORELAY_VIDEO_CODEC says): each
    // client's pipeline picks its room's codec.
    server = await startServer({ name: 'whip-client', defaults: true, publicIp: VETH.server });
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    await removeVeth();
    if (stubDir) fs.rmSync(stubDir, { recursive: true, force: true });
  });

  // Poll GET /api/v1/rooms/{room} until pred(room or null) is truthy.
  async function waitRoom(room, pred, what, timeout = 10000) {
    const deadline = Date.now() + timeout;
    let last;
    for (;;) {
      last = await server.room(room);
      const v = pred(last);
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`GET /api/v1/rooms/${room}: no ${what} within ${timeout} ms; last=${JSON.stringify(last)}`);
      await sleep(100);
    }
  }

  // The third: video alone, which simple-whip-client offers with
  // bundle-policy=none (one m-line, no a=group:BUNDLE); the server said
  // "400 bad_offer: … Session attribute a=group missing".
  for (const [codec, mime, roomCodec, audio] of [
    ['h264', 'video/h264', 'H264', true], ['vp8', 'video/vp8', 'VP8', true], ['h264', 'video/h264', 'H264', false]]) {
    const what = audio ? roomCodec : `${roomCodec} video only (no BUNDLE group)`;
    test(`${what}: simple-whip-client publishes, /watch decodes > 30 frames, DELETE removes it`, async (t) => {
      const room = uniqueRoom(`gst-${codec}`);
      const pages = [];
      const label = `whip-client-${codec}${audio ? '' : '-video'}`;
      const client = whipClient({ url: `${server.base}/whip/${room}`, codec, stubDir, label, audio });
      try {
        const [, resource] = await client.waitLog(/\[WHIP\] Resource URL: (\S+)/, '201 Created with a Location (Resource URL)');
        assert.match(resource, new RegExp(`/whip/${room}/[^/]+$`), 'WHIP Location');
        const pub = await waitRoom(room, (r) => r?.participants.find((p) => p.tracks.some((x) => x.kind === 'video')),
          'participant with a video track');
        assert.deepEqual(pub.tracks.map((x) => x.kind).sort(), audio ? ['audio', 'video'] : ['video']);

        // ICE over the veth, then DTLS with GStreamer's RSA client certificate.
        const dtls = await client.waitLog(/\[WHIP\] (?:\[ERR\] \S+ )?(DTLS connected|DTLS failed|ICE failed)/, 'DTLS connected');
        if (dtls[1] !== 'DTLS connected') {
          const ssl = /ssl error: .*/.exec(client.log());
          throw new Error(`simple-whip-client: ${dtls[1]}${ssl ? ` (${ssl[0]})` : ''}; `
            + 'with "sslv3 alert handshake failure" the server refused the RSA client certificate (issue 10)');
        }

        const viewer = await newPage(browser, `viewer-${codec}`);
        pages.push(viewer);
        const res = await viewer.goto(`${server.base}/watch/${encodeURIComponent(room)}`);
        assert.equal(res.status(), 200);
        await waitTiles(viewer, [pub.id]);
        const vmid = await slotOf(viewer, pub.id, 'video');
        const stats = await waitFramesDecoded(viewer, vmid, 30, { timeout: 20000 });
        t.diagnostic(`viewer decoded ${stats.framesDecoded} ${stats.codec} frames ${stats.frameWidth}x${stats.frameHeight} from simple-whip-client`);
        assert.equal(stats.codec?.toLowerCase(), mime);
        assert.equal(stats.frameWidth, 320);
        if (audio) {
          const amid = await slotOf(viewer, pub.id, 'audio');
          await waitMediaFlowing(viewer, amid, 'audio');
        }
        assert.equal((await server.room(room)).video_codec, roomCodec);

        // SIGINT: simple-whip-client DELETEs its resource (204) and exits.
        await client.stop();
        assert.match(client.log(), /Disconnecting from server[\s\S]*\[204\]/, 'the client\'s DELETE answered 204');
        await waitRoom(room, (r) => !r?.participants.some((p) => p.id === pub.id), `removal of ${pub.id}`, 3000);
        assert.match(server.log(), new RegExp(`left.*participant=${pub.id}`), 'removed by DELETE (left), not by a timeout');
        assert.deepEqual(viewer.errors, [], 'viewer page errors');
      } catch (err) {
        await snapshotAll(pages, `${label}-failure`);
        for (const p of pages) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
        console.log(`--- simple-whip-client log (${client.logPath}):\n${client.log().split('\n').filter((l) => !/^a=(candidate|ssrc|rtcp-fb|extmap)/.test(l)).slice(-40).join('\n')}`);
        console.log(`--- server log (${server.logPath}):\n${server.tail(40)}`);
        throw err;
      } finally {
        await client.stop();
        for (const p of pages) await p.context().close().catch(() => {});
      }
    });
  }
});
