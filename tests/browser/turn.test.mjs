// TURN through coturn (issue 50.1): a Chromium participant whose network
// lets nothing reach corelay's media port joins through coturn with
// `iceTransportPolicy: 'relay'` (the demo page's ?ice=relay), over UDP,
// then TCP, then TLS on 443 (`turns:`, coturn with a certificate the test
// makes), decodes a direct Chromium participant's video and audio, and is
// decoded by it; its selected candidate pair is `relay` over that protocol.
//
// Layout: coturn (`turnserver`, use-auth-secret with the secret corelay
// mints credentials from) and corelay listen on the server-side address of
// a veth pair (10.79.0.1). The relayed Chromium runs in its own network
// namespace at the other end (10.79.0.2), through a wrapper script (`ip
// netns exec NS chromium "$@"`) as in simulcast.test.mjs; nftables there
// drops all UDP and TCP to corelay's media port, so the only way in is the
// relay. The direct Chromium runs here. The TCP case adds a rule dropping
// UDP to coturn's port in that namespace, leaving TURN over TCP; the TLS
// case one dropping TCP to it too, leaving turns: on 443.
//
// Skips (and says why) without turnserver (apt coturn), nft, or a way to
// make a network namespace and veth pair. About 35 s.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  OUT, joinDemo, launchBrowser, newPage, sleep, slotOf, snapshotAll, startServer, tail,
  uniqueRoom, waitFramesDecoded, waitMediaFlowing,
} from './harness.mjs';

const NS = `corelay-turn-${process.pid}`;
const VETH = {
  server: `trn${process.pid}s`,
  client: `trn${process.pid}c`,
  serverIp: '10.79.0.1',
  clientIp: '10.79.0.2',
  prefix: 24,
};
const TABLE = `corelay_turn_${process.pid}`;
const SECRET = `turn-secret-${process.pid}-${Date.now()}`;
const CHROMIUM = process.env.CHROMIUM || '/usr/lib/chromium/chromium';
const TURNSERVER = process.env.TURNSERVER || '/usr/bin/turnserver';

const run = (cmd, ...args) => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const ip = (...args) => run('ip', ...args);
const nsNft = (...args) => run('ip', 'netns', 'exec', NS, 'nft', ...args);
const quiet = (fn) => { try { fn(); } catch { /* gone already */ } };
const errText = (e) => String(e.stderr || e.message).trim().split('\n')[0];

function unavailable() {
  if (!fs.existsSync(TURNSERVER)) return `no ${TURNSERVER} (apt install coturn)`;
  for (const [cmd, args] of [['ip', ['-V']], ['nft', ['--version']], ['openssl', ['version']]]) {
    try { run(cmd, ...args); } catch (e) { return `no ${cmd}: ${errText(e)}`; }
  }
  const probe = `corelay-turnprobe-${process.pid}`;
  try {
    ip('netns', 'add', probe);
  } catch (e) {
    return `cannot create a network namespace (ip netns add): ${errText(e)}`;
  }
  try {
    ip('netns', 'exec', probe, 'ip', 'link', 'add', 'pa', 'type', 'veth', 'peer', 'name', 'pb');
    ip('netns', 'exec', probe, 'nft', 'list', 'tables');
    return null;
  } catch (e) {
    return `cannot make a veth pair or use nft in a namespace: ${errText(e)}`;
  } finally {
    quiet(() => ip('netns', 'del', probe));
  }
}

function freePort(host) {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// The selected candidate pair of a page's connection: local candidate type
// and, for a relay, the protocol to the TURN server.
async function selectedPair(page) {
  return page.evaluate(async () => {
    const stats = [...(await window.corelay.pc.getStats()).values()];
    const transport = stats.find((s) => s.type === 'transport' && s.selectedCandidatePairId);
    const pair = stats.find((s) => s.id === transport?.selectedCandidatePairId);
    const local = stats.find((s) => s.id === pair?.localCandidateId);
    const remote = stats.find((s) => s.id === pair?.remoteCandidateId);
    return {
      localType: local?.candidateType,
      relayProtocol: local?.relayProtocol,
      remote: remote && `${remote.address}:${remote.port}`,
      bytesReceived: pair?.bytesReceived,
    };
  });
}

const skip = unavailable();

describe('TURN through coturn, direct media port blocked', { skip: skip ?? false }, () => {
  let server;
  let coturn;
  let coturnLog;
  let turnPort;
  let browser;
  let relayBrowser;
  let wrapperDir;
  const pages = [];
  let failed = false;

  before(async () => {
    for (const ns of fs.existsSync('/run/netns') ? fs.readdirSync('/run/netns') : []) {
      const m = /^corelay-turn(?:probe)?-(\d+)$/.exec(ns);
      if (m && !fs.existsSync(`/proc/${m[1]}`)) quiet(() => ip('netns', 'del', ns));
    }
    ip('netns', 'add', NS);
    ip('netns', 'exec', NS, 'ip', 'link', 'set', 'lo', 'up');
    ip('link', 'add', VETH.server, 'type', 'veth', 'peer', 'name', VETH.client, 'netns', NS);
    ip('addr', 'add', `${VETH.serverIp}/${VETH.prefix}`, 'dev', VETH.server);
    ip('link', 'set', VETH.server, 'up');
    ip('netns', 'exec', NS, 'ip', 'addr', 'add', `${VETH.clientIp}/${VETH.prefix}`, 'dev', VETH.client);
    ip('netns', 'exec', NS, 'ip', 'link', 'set', VETH.client, 'up');
    for (let i = 0; i < 50 && !/LOWER_UP/.test(ip('link', 'show', VETH.server)); i++) await sleep(50);

    // coturn, use-auth-secret: the credentials corelay mints are its own.
    turnPort = await freePort(VETH.serverIp);
    const secretFile = path.join(OUT, `turn-secret-${process.pid}`);
    fs.writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
    const coturnLogPath = path.join(OUT, `coturn-${process.pid}.log`);
    coturnLog = fs.openSync(coturnLogPath, 'w');
    // A certificate of its own for turns: on 443.
    const cert = path.join(OUT, `turn-cert-${process.pid}.pem`);
    const key = path.join(OUT, `turn-key-${process.pid}.pem`);
    run('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-days', '1', '-subj', '/CN=corelay-turn-test', '-addext', `subjectAltName=IP:${VETH.serverIp}`,
      '-keyout', key, '-out', cert);
    coturn = spawn(TURNSERVER, [
      '-n', '--no-cli', '--no-dtls', '--fingerprint',
      '--listening-ip', VETH.serverIp, '--relay-ip', VETH.serverIp,
      '--listening-port', String(turnPort), '--tls-listening-port', '443',
      '--cert', cert, '--pkey', key,
      '--min-port', '49152', '--max-port', '65535',
      '--use-auth-secret', '--static-auth-secret', SECRET, '--realm', 'corelay.test',
      '--log-file', 'stdout', '--simple-log', '--allow-loopback-peers',
    ], { stdio: ['ignore', coturnLog, coturnLog] });
    coturn.logPath = coturnLogPath;

    server = await startServer({
      name: 'turn',
      httpHost: VETH.serverIp,
      publicIp: VETH.serverIp,
      extraArgs: [
        '--turn-url', `turn:${VETH.serverIp}:${turnPort}?transport=udp`,
        '--turn-url', `turn:${VETH.serverIp}:${turnPort}?transport=tcp`,
        '--turn-url', `turns:${VETH.serverIp}:443?transport=tcp`,
        '--turn-secret-file', secretFile,
      ],
    });
    // Nothing from the relayed participant's namespace reaches the media
    // port, UDP or TCP (ICE-TCP), either way.
    nsNft('add', 'table', 'inet', TABLE);
    nsNft('add', 'chain', 'inet', TABLE, 'out', '{ type filter hook output priority 0; policy accept; }');
    nsNft('add', 'rule', 'inet', TABLE, 'out', 'ip', 'daddr', VETH.serverIp, 'udp', 'dport', String(server.udpPort), 'counter', 'drop');
    nsNft('add', 'rule', 'inet', TABLE, 'out', 'ip', 'daddr', VETH.serverIp, 'tcp', 'dport', String(server.udpPort), 'counter', 'drop');

    wrapperDir = fs.mkdtempSync(path.join(os.tmpdir(), 'corelay-turn-'));
    const wrapper = path.join(wrapperDir, 'chromium-in-netns');
    fs.writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${NS} ${CHROMIUM} "$@"\n`, { mode: 0o755 });
    const extraArgs = [`--unsafely-treat-insecure-origin-as-secure=${server.base}`];
    browser = await launchBrowser({ extraArgs });
    // The relayed one takes coturn's self-made certificate.
    relayBrowser = await launchBrowser({ executablePath: wrapper, extraArgs: [...extraArgs, '--ignore-certificate-errors'] });
  });

  after(async () => {
    if (failed) {
      await snapshotAll(pages, 'turn-failure');
      console.log(`coturn log:\n${tail(coturn?.logPath ?? '', 40)}`);
    }
    await browser?.close().catch(() => {});
    await relayBrowser?.close().catch(() => {});
    await server?.stop();
    coturn?.kill('SIGTERM');
    if (coturnLog !== undefined) quiet(() => fs.closeSync(coturnLog));
    quiet(() => ip('link', 'del', VETH.server));
    quiet(() => ip('netns', 'del', NS));
    if (wrapperDir) fs.rmSync(wrapperDir, { recursive: true, force: true });
  });

  // A relayed participant and a direct one in a new room decode each
  // other's video and audio; the relayed one's pair is a relay over
  // `protocol`. Returns the relayed page's selected pair.
  async function relayedCall(tag, protocol) {
    const room = uniqueRoom(`turn-${tag}`);
    const relayed = await newPage(relayBrowser, `relayed-${tag}`);
    const direct = await newPage(browser, `direct-${tag}`);
    pages.push(relayed, direct);
    const idr = await joinDemo(relayed, server.base, room, 'Rita', { query: 'ice=relay' });
    const idd = await joinDemo(direct, server.base, room, 'Dan');

    // It had TURN servers with coturn credentials, and only relay candidates.
    const cfg = await relayed.evaluate(() => ({
      servers: window.corelay.iceServers ?? null,
      offer: window.corelay.pc.localDescription.sdp,
    }));
    assert.equal(cfg.servers?.length, 1, `ICE servers: ${JSON.stringify(cfg.servers)}`);
    assert.match(cfg.servers[0].username, /^\d+:Rita$/);
    assert.ok(cfg.servers[0].credential, 'a credential');
    const cands = cfg.offer.split(/\r?\n/).filter((l) => l.startsWith('a=candidate:'));
    assert.ok(cands.length > 0 && cands.every((c) => / typ relay /.test(c)), `relay candidates only: ${JSON.stringify(cands)}`);

    for (const [page, other] of [[relayed, idd], [direct, idr]]) {
      const video = await slotOf(page, other, 'video');
      await waitFramesDecoded(page, video, 30, { timeout: 30000 });
      const audio = await slotOf(page, other, 'audio');
      await waitMediaFlowing(page, audio, 'audio');
    }
    const pair = await selectedPair(relayed);
    assert.equal(pair.localType, 'relay', `relayed page: selected pair ${JSON.stringify(pair)}`);
    assert.equal(pair.relayProtocol, protocol, `relayed page: selected pair ${JSON.stringify(pair)}`);
    const directPair = await selectedPair(direct);
    assert.equal(directPair.localType, 'host', `direct page: selected pair ${JSON.stringify(directPair)}`);
    // The direct participant saw the relayed one arrive from coturn's
    // relayed address (the server's ICE-lite agent answered coturn).
    await relayed.close();
    await direct.close();
    return pair;
  }

  test('a relayed participant over TURN/UDP and a direct one decode each other', async () => {
    try {
      await relayedCall('udp', 'udp');
      // Nothing went to the media port from the relayed namespace.
      const dropped = [...nsNft('list', 'table', 'inet', TABLE).matchAll(/packets (\d+)/g)]
        .reduce((n, m) => n + Number(m[1]), 0);
      assert.equal(dropped, 0, 'the relayed browser never tried the media port directly');
    } catch (e) {
      failed = true;
      throw e;
    }
  });

  test('with UDP to coturn dropped too, the relay runs over TCP', async () => {
    try {
      nsNft('add', 'rule', 'inet', TABLE, 'out', 'ip', 'daddr', VETH.serverIp, 'udp', 'dport', String(turnPort), 'counter', 'drop');
      await relayedCall('tcp', 'tcp');
    } catch (e) {
      failed = true;
      throw e;
    }
  });

  test('with TCP to coturn\'s port dropped too, the relay runs over TLS on 443 (turns:)', async () => {
    try {
      nsNft('add', 'rule', 'inet', TABLE, 'out', 'ip', 'daddr', VETH.serverIp, 'tcp', 'dport', String(turnPort), 'counter', 'drop');
      await relayedCall('tls', 'tls');
    } catch (e) {
      failed = true;
      throw e;
    }
  });
});
