// The demo page at / with real Chromium participants: two see and hear each
// other, a third appears on both grids, leavers disappear, and a screenshot of
// a two-participant grid lands in docs/screenshots/grid.png.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  OUT, ROOT, debugState, joinDemo, launchBrowser, newPage, sleep, slotOf, snapshotAll,
  startServer, uniqueRoom, waitInPage, waitMediaFlowing, waitTiles,
} from './harness.mjs';

describe('demo page', () => {
  let server;
  let browser;
  const room = uniqueRoom('demo');
  const pages = {};
  const ids = {};
  let failed = false;

  before(async () => {
    server = await startServer({ name: 'demo' });
    browser = await launchBrowser();
  });

  after(async () => {
    if (failed) {
      await snapshotAll(Object.values(pages), 'demo-failure');
      for (const p of Object.values(pages)) {
        if (!p.isClosed()) console.log(`--- ${p.label} state: ${await debugState(p).catch(String)}`);
        console.log(p.logs.slice(-20).join('\n'));
      }
      console.log(`--- server log (${server?.logPath}):\n${server?.tail(80)}`);
    }
    await browser?.close();
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

  step('the page loads without script errors', async () => {
    const page = await newPage(browser, 'alice');
    pages.alice = page;
    const res = await page.goto(`${server.base}/`);
    assert.equal(res.status(), 200);
    for (const asset of ['/assets/app.js', '/assets/style.css', '/assets/watch.js']) {
      const r = await fetch(`${server.base}${asset}`);
      assert.equal(r.status, 200, `${asset} status`);
      const ct = r.headers.get('content-type') || '';
      assert.match(ct, asset.endsWith('.js') ? /javascript/ : /text\/css/, `${asset} content-type`);
    }
    assert.equal(await page.evaluate(() => typeof window.CorelaySession), 'function');
    assert.deepEqual(page.errors, []);
  });

  step('two participants decode each other\'s video and audio', async () => {
    pages.bob = await newPage(browser, 'bob');
    ids.alice = await joinDemo(pages.alice, server.base, room, 'Alice');
    ids.bob = await joinDemo(pages.bob, server.base, room, 'Bob');
    assert.notEqual(ids.alice, ids.bob);

    for (const [me, other] of [['alice', 'bob'], ['bob', 'alice']]) {
      const page = pages[me];
      const tiles = await waitTiles(page, [ids[other]]);
      assert.equal(tiles[0].name, other === 'alice' ? 'Alice' : 'Bob', 'tile is labelled with the roster name');
      const vmid = await slotOf(page, ids[other], 'video');
      assert.equal(tiles[0].mid, vmid, 'the tile shows the slot filled by the other participant');
      const video = await waitMediaFlowing(page, vmid, 'video');
      assert.ok(video.now > 0);
      const amid = await slotOf(page, ids[other], 'audio');
      await waitMediaFlowing(page, amid, 'audio');
      // The <video> element actually renders frames.
      await waitInPage(page, (mid) => {
        const t = window.corelay.tiles().find((x) => x.mid === mid);
        return t && t.width > 0 && t.height > 0 && !t.paused;
      }, vmid, { what: 'the tile video to render' });
    }
  });

  step('roster and welcome match the API', async () => {
    for (const me of ['alice', 'bob']) {
      const c = await pages[me].evaluate(() => ({
        roster: window.corelay.roster,
        welcome: window.corelay.events.find((e) => e.type === 'welcome'),
        location: window.corelay.location,
      }));
      assert.equal(c.welcome.participant, ids[me]);
      assert.equal(c.welcome.room, room);
      // The resource URL is an unguessable capability, not the public id.
      assert.match(c.location, new RegExp(`/api/v1/rooms/${room}/participants/[0-9a-f]{32}$`), c.location);
      assert.ok(!c.location.includes(ids[me]), c.location);
      const names = Object.fromEntries(c.roster.map((p) => [p.id, p.name]));
      assert.equal(names[ids.alice], 'Alice');
      assert.equal(names[ids.bob], 'Bob');
    }
    const info = await server.room(room);
    assert.equal(info.participants.length, 2);
  });

  step('stats overlay shows resolution, fps, bitrate, loss, RTT; screenshot of the grid', async () => {
    const page = pages.alice;
    await page.click('#toggle-stats');
    await waitInPage(page, () => {
      const el = document.querySelector('.tile[data-mid] .stats');
      return el && !el.hidden && /\d+x\d+/.test(el.textContent) && /bit\/s/.test(el.textContent)
        && /loss/.test(el.textContent) && /rtt [\d.]+ ms/.test(el.textContent) && el.textContent;
    }, null, { what: 'the stats overlay', timeout: 10000 });
    await sleep(1500); // let bitrate/fps settle for the picture
    // Always in the test output; into docs/screenshots/grid.png (the README's
    // picture) when that is missing or CORELAY_UPDATE_SCREENSHOT=1, so that a
    // test run does not dirty the working tree.
    const file = path.join(OUT, 'grid.png');
    await page.screenshot({ path: file });
    assert.ok(fs.statSync(file).size > 10000);
    const doc = path.join(ROOT, 'docs/screenshots/grid.png');
    if (process.env.CORELAY_UPDATE_SCREENSHOT === '1' || !fs.existsSync(doc)) {
      fs.mkdirSync(path.dirname(doc), { recursive: true });
      fs.copyFileSync(file, doc);
    }
    await page.click('#toggle-stats');
    assert.equal(await page.evaluate(() => document.querySelector('.tile[data-mid] .stats').hidden), true);
  });

  step('mute and unmute toggle the local tracks', async () => {
    const page = pages.bob;
    const enabled = () => page.evaluate(() => window.corelay.session.stream.getTracks().map((t) => `${t.kind}:${t.enabled}`).sort().join(','));
    await page.click('#mute-audio');
    await page.click('#mute-video');
    assert.equal(await enabled(), 'audio:false,video:false');
    await page.click('#mute-audio');
    await page.click('#mute-video');
    assert.equal(await enabled(), 'audio:true,video:true');
  });

  step('a third participant appears on both grids', async () => {
    pages.carol = await newPage(browser, 'carol');
    ids.carol = await joinDemo(pages.carol, server.base, room, 'Carol');
    await waitTiles(pages.alice, [ids.bob, ids.carol]);
    await waitTiles(pages.bob, [ids.alice, ids.carol]);
    await waitTiles(pages.carol, [ids.alice, ids.bob]);
    const carolMid = await slotOf(pages.alice, ids.carol, 'video');
    await waitMediaFlowing(pages.alice, carolMid, 'video');
    const names = await pages.bob.evaluate((id) => window.corelay.tiles().find((t) => t.participant === id)?.name, ids.carol);
    assert.equal(names, 'Carol');
  });

  step('a participant who clicks Leave disappears from the others within seconds', async () => {
    const t0 = Date.now();
    await pages.bob.click('#leave');
    await waitTiles(pages.alice, [ids.carol], { timeout: 5000 });
    await waitTiles(pages.carol, [ids.alice], { timeout: 5000 });
    const took = Date.now() - t0;
    await waitInPage(pages.alice, (id) => !window.corelay.roster.some((p) => p.id === id), ids.bob, { what: 'bob to leave the roster', timeout: 5000 });
    assert.equal(await pages.bob.evaluate(() => window.corelay.state), 'left');
    const info = await server.room(room);
    assert.deepEqual(info.participants.map((p) => p.id).sort(), [ids.alice, ids.carol].sort());
    console.log(`leave -> tile gone on both grids in ${took} ms`);
  });

  step('the same page can join again after leaving', async () => {
    ids.bob2 = await joinDemo(pages.bob, server.base, room, 'Bob again');
    assert.notEqual(ids.bob2, ids.bob);
    await waitTiles(pages.alice, [ids.carol, ids.bob2]);
    await waitTiles(pages.bob, [ids.alice, ids.carol]);
    const mid = await slotOf(pages.bob, ids.alice, 'video');
    await waitMediaFlowing(pages.bob, mid, 'video');
  });

  step('closing the tab removes the participant (pagehide + fetch keepalive)', async () => {
    // Navigating away fires pagehide; the DELETE goes out with keepalive.
    await pages.carol.goto('about:blank');
    await pages.carol.context().close();
    await waitTiles(pages.alice, [ids.bob2], { timeout: 8000 });
    const info = await server.room(room);
    assert.deepEqual((info?.participants ?? []).map((p) => p.id).sort(), [ids.alice, ids.bob2].sort());
  });

  step('no script errors on any page', async () => {
    for (const p of Object.values(pages)) assert.deepEqual(p.errors, [], `${p.label} errors`);
  });
});
