// ICE-TCP (issue 10): "No ICE-TCP: a client whose network blocks UDP cannot
// connect at all". Two Chromium participants join a default server while
// nftables, inside this test's own network namespace, drops every UDP packet
// to and from the server's media port. They must connect over the shard's
// passive TCP candidate (RFC 6544, RFC 4571 framing on the UDP port number)
// and decode each other's video.
//
// Skips (and says why) when nft is missing; scripts/test-browser installs it.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import {
  joinDemo, launchBrowser, newPage, slotOf, snapshotAll, startServer, uniqueRoom,
  waitFramesDecoded,
} from './harness.mjs';

const TABLE = `corelay_icetcp_${process.pid}`;
const nft = (...args) => execFileSync('nft', args, { encoding: 'utf8' });

function nftUnavailable() {
  try {
    nft('list', 'tables');
    return null;
  } catch (e) {
    return `nft unusable here (${String(e.message).split('\n')[0]}); install nftables`;
  }
}

const unavailable = nftUnavailable();

describe('ICE-TCP with UDP blocked', { skip: unavailable ?? false }, () => {
  let server;
  let browser;
  const pages = [];
  let failed = false;

  before(async () => {
    server = await startServer({ name: 'icetcp', defaults: true });
    // Both directions of the media port, so not even a reply gets through.
    nft('add', 'table', 'inet', TABLE);
    nft('add', 'chain', 'inet', TABLE, 'out', '{ type filter hook output priority 0; policy accept; }');
    nft('add', 'rule', 'inet', TABLE, 'out', 'udp', 'dport', String(server.udpPort), 'counter', 'drop');
    nft('add', 'rule', 'inet', TABLE, 'out', 'udp', 'sport', String(server.udpPort), 'counter', 'drop');
    browser = await launchBrowser();
  });

  after(async () => {
    if (failed) await snapshotAll(pages, 'icetcp-failure');
    await browser?.close();
    try { nft('delete', 'table', 'inet', TABLE); } catch { /* already gone */ }
    await server?.stop();
  });

  test('two Chromium participants connect over TCP and decode each other', async () => {
    try {
      const room = uniqueRoom('icetcp');
      const a = await newPage(browser, 'tcp-a');
      const b = await newPage(browser, 'tcp-b');
      pages.push(a, b);
      const ida = await joinDemo(a, server.base, room, 'Ana');
      const idb = await joinDemo(b, server.base, room, 'Ben');

      // The answer offers the passive TCP candidate after the UDP one.
      const answer = await a.evaluate(() => window.corelay.pc.remoteDescription.sdp);
      const cands = answer.split(/\r?\n/).filter((l) => l.startsWith('a=candidate:'));
      const udp = cands.findIndex((l) => / udp /i.test(l));
      const tcp = cands.findIndex((l) => / tcp /i.test(l) && /tcptype passive/.test(l));
      assert.ok(udp >= 0 && tcp > udp, `a UDP then a passive TCP candidate in the answer: ${JSON.stringify(cands)}`);
      assert.ok(cands[tcp].includes(` ${server.udpPort} `), `the TCP candidate is on the UDP port number: ${cands[tcp]}`);

      const midOnA = await slotOf(a, idb, 'video');
      const midOnB = await slotOf(b, ida, 'video');
      await waitFramesDecoded(a, midOnA, 30, { timeout: 30000 });
      await waitFramesDecoded(b, midOnB, 30, { timeout: 30000 });

      // Both selected pairs are TCP, and UDP really was tried and dropped.
      for (const page of [a, b]) {
        const proto = await page.evaluate(async () => {
          const stats = [...(await window.corelay.pc.getStats()).values()];
          const transport = stats.find((s) => s.type === 'transport' && s.selectedCandidatePairId);
          const pair = stats.find((s) => s.id === transport?.selectedCandidatePairId);
          const local = stats.find((s) => s.id === pair?.localCandidateId);
          const remote = stats.find((s) => s.id === pair?.remoteCandidateId);
          return { local: local?.protocol, remote: remote?.protocol, tcpType: remote?.tcpType };
        });
        assert.equal(proto.local, 'tcp', `${page.label}: selected pair ${JSON.stringify(proto)}`);
        assert.equal(proto.remote, 'tcp', `${page.label}: selected pair ${JSON.stringify(proto)}`);
      }
      const dropped = [...nft('list', 'table', 'inet', TABLE).matchAll(/packets (\d+)/g)]
        .reduce((n, m) => n + Number(m[1]), 0);
      assert.ok(dropped > 0, 'the clients tried UDP first and nftables dropped it');
    } catch (e) {
      failed = true;
      throw e;
    }
  });
});
