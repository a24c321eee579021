// Firefox ESR and Chromium in one room, on the demo page, against a server
// with default settings (--video-codecs vp8,h264,vp9,av1).
//
// Issue 10: "Firefox is refused by a default server … `400 codec_mismatch: an
// video m-line offers no H264`, also on corelay's own demo page". Debian's
// firefox-esr has no OpenH264 and offers VP8/VP9/AV1 only; a default server
// must put such a room on VP8, whoever joins first, and both browsers must
// decode each other. Firefox loads the demo page unmodified, the way a link
// does (/?room=…&name=…&join=1), through puppeteer-core over WebDriver BiDi.
// Issue 51: Firefox joins a room whose Chromium publisher sends VP9 with
// SVC (L3T3_KEY), and both decode VP9.
//
// Skips (and says why) only when there is no firefox-esr or no puppeteer-core;
// scripts/test-browser installs both.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  FIREFOX, debugState, firefoxUnavailable, joinDemo, joinDemoByUrl,
  launchBrowser, launchFirefox, newFirefoxPage, newPage, slotOf, snapshotAll,
  startServer, uniqueRoom, waitFramesDecoded, waitMediaFlowing, waitTiles,
} from './harness.mjs';

const unavailable = await firefoxUnavailable();

describe('Firefox ESR and Chromium on the demo page (default server)', { skip: unavailable ?? false }, () => {
  let server;
  let chromium;
  let firefox;
  const pages = [];     // open pages
  const allPages = [];  // every page, for the script-error check
  let failed = false;
  const track = (...ps) => { pages.push(...ps); allPages.push(...ps); };

  before(async () => {
    // Default settings on purpose: no --video-codec(s), whatever the
    // environment says.
    server = await startServer({ name: 'firefox', defaults: true });
    [chromium, firefox] = await Promise.all([launchBrowser(), launchFirefox()]);
  });

  after(async () => {
    if (failed) {
      await snapshotAll(pages, 'firefox-failure');
      for (const p of pages) {
        if (p.isClosed()) continue;
        console.log(`--- ${p.label} state: ${await debugState(p).catch(String)}`);
        const sdp = await p.evaluate(() => ({ offer: window.corelay.offer, answer: window.corelay.answer })).catch(String);
        console.log(`--- ${p.label} offer:\n${sdp?.offer}\n--- ${p.label} answer:\n${sdp?.answer}`);
        console.log(p.logs.slice(-20).join('\n'));
      }
      console.log(`--- server log (${server?.logPath}):\n${server?.tail(80)}`);
    }
    await Promise.all([chromium?.close(), firefox?.close()]);
    await server?.stop();
  });

  const step = (name, fn) => test(name, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      failed = true;
      throw err;
    }
  });

  // Each page decodes the other's video (> 30 frames, VP8) and receives its
  // audio (totalSamplesReceived rising); the room's codec is VP8.
  async function seeAndHearEachOther(t, room, fox, chrome, codec = 'VP8') {
    for (const [me, other] of [[fox, chrome], [chrome, fox]]) {
      const tiles = await waitTiles(me.page, [other.id]);
      assert.equal(tiles[0].name, other.name, `${me.page.label}: the tile is labelled from the roster`);
      const vmid = await slotOf(me.page, other.id, 'video');
      const video = await waitFramesDecoded(me.page, vmid, 30);
      assert.equal(video.codec, `video/${codec}`, `${me.page.label} decodes ${codec}`);
      const amid = await slotOf(me.page, other.id, 'audio');
      const audio = await waitMediaFlowing(me.page, amid, 'audio');
      t.diagnostic(`${me.page.label} decoded ${video.framesDecoded} frames ${video.frameWidth}x${video.frameHeight} (${video.codec}) from ${other.page.label}; audio samples ${audio.first} -> ${audio.now} (${audio.stats.codec})`);
    }
    const info = await server.room(room);
    assert.equal(info.video_codec, codec, `GET /api/v1/rooms/${room}: ${JSON.stringify(info)}`);
    assert.deepEqual(info.participants.map((p) => p.id).sort(), [fox.id, chrome.id].sort());
  }

  step('Firefox ESR joins a default server from the demo page: no "400 codec_mismatch: an video m-line offers no H264" (issue 10)', async (t) => {
    const room = uniqueRoom('firefox');
    const page = await newFirefoxPage(firefox, 'firefox');
    track(page);
    t.diagnostic(`${FIREFOX}: ${await firefox.version()}`);
    // Firefox opens the room: the room's codec is whatever it can do.
    const id = await joinDemoByUrl(page, server.base, room, 'Fox');
    const offer = await page.evaluate(() => window.corelay.offer);
    const offered = [...new Set([...offer.matchAll(/^a=rtpmap:\d+ ([\w-]+)\/90000/gm)].map((m) => m[1]))]
      .filter((c) => !['rtx', 'red', 'ulpfec'].includes(c));
    t.diagnostic(`Firefox offers video ${offered.join(', ')}`);
    assert.ok(offered.includes('VP8'), 'Firefox offers VP8');
    const info = await server.room(room);
    assert.equal(info.video_codec, 'VP8', JSON.stringify(info));
    assert.deepEqual(info.participants.map((p) => p.id), [id]);
    page.room = room;
    page.participant = id;
  });

  step('Chromium joins the room Firefox opened: each decodes the other\'s video (> 30 frames) and audio, room codec VP8', async (t) => {
    const fpage = pages.find((p) => p.label === 'firefox');
    const cpage = await newPage(chromium, 'chromium');
    track(cpage);
    const room = fpage.room;
    const cid = await joinDemo(cpage, server.base, room, 'Chrome');
    await seeAndHearEachOther(t, room,
      { page: fpage, id: fpage.participant, name: 'Fox' },
      { page: cpage, id: cid, name: 'Chrome' });
  });

  step('Chromium opens a room and Firefox joins it (the first publisher offers H264 too): both decode each other, room codec VP8', async (t) => {
    // Close the first room's tabs: fewer encoders on a small machine.
    for (const p of pages.splice(0)) await p.close();
    const room = uniqueRoom('firefox2');
    const cpage = await newPage(chromium, 'chromium2');
    const fpage = await newFirefoxPage(firefox, 'firefox2');
    track(cpage, fpage);
    const cid = await joinDemoByUrl(cpage, server.base, room, 'Chrome');
    assert.match(await cpage.evaluate(() => window.corelay.offer), /^a=rtpmap:\d+ H264\/90000/m, 'Chromium offers H264 too');
    assert.equal((await server.room(room)).video_codec, 'VP8');
    const fid = await joinDemoByUrl(fpage, server.base, room, 'Fox');
    await seeAndHearEachOther(t, room,
      { page: fpage, id: fid, name: 'Fox' },
      { page: cpage, id: cid, name: 'Chrome' });
  });

  step('Chromium publishes VP9 with SVC (?codec=vp9&svc=L3T3_KEY) and Firefox joins its room: both decode VP9 (issue 51)', async (t) => {
    for (const p of pages.splice(0)) await p.close();
    const room = uniqueRoom('firefox-vp9');
    const cpage = await newPage(chromium, 'chromium-vp9');
    const fpage = await newFirefoxPage(firefox, 'firefox-vp9');
    track(cpage, fpage);
    const cid = await joinDemoByUrl(cpage, server.base, room, 'Chrome', { query: { codec: 'vp9', svc: 'L3T3_KEY' } });
    assert.equal((await server.room(room)).video_codec, 'VP9');
    const fid = await joinDemoByUrl(fpage, server.base, room, 'Fox');
    await seeAndHearEachOther(t, room,
      { page: fpage, id: fid, name: 'Fox' },
      { page: cpage, id: cid, name: 'Chrome' }, 'VP9');
  });

  step('no script errors on the Firefox and Chromium pages', async () => {
    for (const p of allPages) assert.deepEqual(p.errors, [], `${p.label} errors`);
  });
});
