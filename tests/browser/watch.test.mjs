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

    // The viewer is a participant without tracks: it shows up in the
    // publisher's roster, and the publisher gets no tile for it.
    const viewerId = await viewer.evaluate(() => window.corelay.participantId);
    await waitInPage(pub, (id) => window.corelay.roster.some((p) => p.id === id), viewerId, { what: 'viewer in roster' });
    assert.deepEqual(await pub.evaluate(() => window.corelay.tiles()), []);

    // DELETE on the WHEP Location removes the viewer.
    const del = await viewer.evaluate(async () => (await fetch(window.corelay.location, { method: 'DELETE' })).status);
    assert.equal(del, 204);
    await waitInPage(pub, (id) => !window.corelay.roster.some((p) => p.id === id), viewerId, { what: 'viewer gone from roster' });

    for (const p of pages) assert.deepEqual(p.errors, [], `${p.label} errors`);
  } catch (err) {
    await snapshotAll(pages, 'watch-failure');
    for (const p of pages) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
    console.log(`--- server log:\n${server.tail(80)}`);
    throw err;
  }
});
