// More publishers than slots: a viewer with one video slot (?slots=1) pins
// the other participant from the roster; the slot switches source without
// renegotiation and stays one continuous stream (same SSRC, decoding goes on,
// the resolution follows the new source); when the pinned participant leaves
// the slot is refilled.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  debugState, inboundByMid, joinDemo, launchBrowser, newPage, sleep, snapshotAll,
  startServer, uniqueRoom, waitInPage, waitMediaFlowing, waitTiles,
} from './harness.mjs';

let server;
let browser;
const pages = [];

before(async () => {
  server = await startServer({ name: 'slots' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test('pinning switches a slot\'s source seamlessly; the pin ends when that participant leaves', async (t) => {
  const room = uniqueRoom('slots');
  try {
    const big = await newPage(browser, 'big');
    const small = await newPage(browser, 'small');
    const viewer = await newPage(browser, 'viewer');
    pages.push(big, small, viewer);
    const ids = {
      // One encoding each (the demo publishes simulcast by default, and the
      // viewer's tile would then pick a layer): the decoded width tells the
      // two sources apart.
      big: await joinDemo(big, server.base, room, 'Big', { query: 'video=640x360&simulcast=0' }),
      small: await joinDemo(small, server.base, room, 'Small', { query: 'video=320x240&simulcast=0' }),
    };
    const width = { [ids.big]: 640, [ids.small]: 320 };
    await joinDemo(viewer, server.base, room, 'Viewer', { recvonly: true, query: 'slots=1' });

    const [tile] = await waitInPage(viewer, () => {
      const tiles = window.corelay.tiles();
      return tiles.length === 1 && tiles[0].participant ? tiles : null;
    }, null, { what: 'one tile' });
    const mid = tile.mid;
    await waitMediaFlowing(viewer, mid, 'video');
    // Unpinned, the single slot follows the active speaker; count its switches.
    await sleep(3000);
    const switches = await viewer.evaluate(() => window.corelay.events.filter((e) => e.type === 'slots').length - 1);
    t.diagnostic(`unpinned slot changed source ${switches} times in ~4 s (fake microphones beep alike)`);

    const showsPinned = async (who) => {
      const t0 = Date.now();
      await waitInPage(viewer, ([m, o]) => {
        const x = window.corelay.tiles().find((y) => y.mid === m);
        return x && x.participant === o && x.pinned;
      }, [mid, who], { what: `the slot to show pinned ${who}`, timeout: 5000 });
      await waitInPage(viewer, async ([m, w]) => {
        let ok = false;
        (await window.corelay.pc.getStats()).forEach((r) => { if (r.type === 'inbound-rtp' && r.mid === m && r.frameWidth === w) ok = true; });
        return ok;
      }, [mid, width[who]], { what: `the decoded resolution to become ${width[who]} wide`, timeout: 5000 });
      const ms = Date.now() - t0;
      const flow = await waitMediaFlowing(viewer, mid, 'video');
      return { ms, flow };
    };

    // Pin through the roster's pin button: first Small, then Big (a switch
    // from one pinned source to another).
    await viewer.click(`#roster-list li[data-participant="${ids.small}"] button.pin`);
    const a = await showsPinned(ids.small);
    await viewer.click(`#roster-list li[data-participant="${ids.big}"] button.pin`);
    const b = await showsPinned(ids.big);
    t.diagnostic(`pinned switch small -> big decoded at the new resolution in ${b.ms} ms`);
    assert.equal(b.flow.stats.ssrc, a.flow.stats.ssrc, 'the slot keeps its SSRC across the switch');
    assert.ok(b.flow.now > a.flow.now, 'framesDecoded keeps counting on the same receiver');
    const other = ids.big;
    const first = ids.small;
    const before = a.flow;

    // The pin holds (speaker changes do not move it).
    await sleep(2500);
    const held = await viewer.evaluate(() => window.corelay.tiles()[0]);
    assert.equal(held.participant, other, 'pinned source held');
    const stats = (await inboundByMid(viewer))[mid];
    assert.equal(stats.ssrc, before.stats.ssrc);

    // The pinned participant leaves: the slot falls back to the other one.
    await (other === ids.big ? big : small).click('#leave');
    await waitInPage(viewer, ([m, f]) => {
      const x = window.corelay.tiles().find((y) => y.mid === m);
      return x && x.participant === f && !x.pinned;
    }, [mid, first], { what: 'the slot to be refilled after the pinned participant left', timeout: 5000 });
    await waitTiles(viewer, [first]);
    await waitInPage(viewer, async ([m, w]) => {
      let ok = false;
      (await window.corelay.pc.getStats()).forEach((r) => { if (r.type === 'inbound-rtp' && r.mid === m && r.frameWidth === w) ok = true; });
      return ok;
    }, [mid, width[first]], { what: 'decoding the first source again', timeout: 5000 });
    for (const p of pages) assert.deepEqual(p.errors, [], `${p.label} errors`);
  } catch (err) {
    await snapshotAll(pages, 'slots-failure');
    for (const p of pages) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
    console.log(`--- server log:\n${server.tail(80)}`);
    throw err;
  }
});
