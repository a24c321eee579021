// Capture driver: starts the svc-capture binary, has headless Chromium
// publish the fake camera to it with one SVC encoding, logs what getStats()
// says the encoder does, and waits for the binary to write the fixture.
//
//   unshare -rn -- bash -c 'ip link set lo up && node crates/svc-capture/capture.mjs \
//     --codec vp9 --mode L3T3_KEY --seconds 4 \
//     --out crates/core/tests/fixtures/svc/vp9-l3t3-key.crtp'
//
// Options: --bin (default $CARGO_TARGET_DIR/debug/svc-capture or
// target/debug/svc-capture), --max-bitrate bps (1500000), --start-bitrate
// kbps (1200), --stats FILE (the getStats samples as JSON). CHROMIUM picks
// the browser (default /usr/lib/chromium/chromium).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { CHROMIUM_ARGS, ROOT, sleep } from '../../tests/browser/harness.mjs';
import { chromium } from 'playwright-core';

const opt = { codec: 'vp9', mode: 'L3T3_KEY', seconds: '4', 'max-bitrate': '1500000', 'start-bitrate': '1200' };
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
if (!opt.out) throw new Error('--out FILE is required');
const bin = opt.bin || path.join(process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target'), 'debug/svc-capture');

const child = spawn(bin, ['--codec', opt.codec, '--seconds', opt.seconds, '--out', opt.out], {
  stdio: ['ignore', 'pipe', 'pipe'],
});
const serverLog = [];
child.stderr.on('data', (d) => serverLog.push(d.toString()));
const exited = new Promise((res) => child.on('exit', (code) => res(code)));
const lines = readline.createInterface({ input: child.stdout });
const stdout = [];
const base = await new Promise((res, rej) => {
  lines.on('line', (l) => {
    stdout.push(l);
    console.log(`[svc-capture] ${l}`);
    const m = l.match(/^LISTEN (\S+)/);
    if (m) res(m[1]);
  });
  child.on('exit', (c) => rej(new Error(`svc-capture exited ${c}:\n${serverLog.join('')}`)));
});

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium',
  args: CHROMIUM_ARGS,
  headless: true,
});
console.log(`chromium ${browser.version()}`);
const page = await browser.newPage();
page.on('console', (m) => console.log(`[page] ${m.text()}`));
const codec = opt.codec.toUpperCase();
await page.goto(`${base}?codec=${codec}&mode=${opt.mode}&maxBitrate=${opt['max-bitrate']}&startBitrate=${opt['start-bitrate']}`);
const neg = await page.evaluate(() => window.capture);
console.log('encodings after negotiation:', JSON.stringify(neg.encodings));
for (const l of neg.answer.split(/\r?\n/)) {
  if (/^a=(rtpmap|fmtp|extmap)/.test(l)) console.log(`[answer] ${l}`);
}

const samples = [];
let done = false;
exited.then(() => { done = true; });
const t0 = Date.now();
while (!done && Date.now() - t0 < 60000) {
  const stats = await page.evaluate(() => window.outbound());
  const codecs = Object.fromEntries(stats.filter((s) => s.type === 'codec').map((s) => [s.id, s]));
  for (const s of stats.filter((x) => x.type === 'outbound-rtp' && x.kind === 'video')) {
    const c = codecs[s.codecId];
    const row = {
      t: (Date.now() - t0) / 1000,
      codec: c && `${c.mimeType} pt=${c.payloadType} ${c.sdpFmtpLine || ''}`,
      ssrc: s.ssrc,
      rid: s.rid,
      scalabilityMode: s.scalabilityMode,
      frameWidth: s.frameWidth,
      frameHeight: s.frameHeight,
      framesPerSecond: s.framesPerSecond,
      framesEncoded: s.framesEncoded,
      keyFramesEncoded: s.keyFramesEncoded,
      bytesSent: s.bytesSent,
      targetBitrate: s.targetBitrate,
      encoderImplementation: s.encoderImplementation,
      powerEfficientEncoder: s.powerEfficientEncoder,
      qualityLimitationReason: s.qualityLimitationReason,
    };
    samples.push(row);
    console.log('[stats]', JSON.stringify(row));
  }
  await Promise.race([sleep(1000), exited]);
}
const code = await exited;
if (opt.stats) fs.writeFileSync(opt.stats, JSON.stringify({ chromium: browser.version(), negotiation: neg, samples, server: serverLog.join('') }, null, 2));
await browser.close();
if (code !== 0) {
  console.error(serverLog.join(''));
  process.exit(1);
}
console.log(stdout.filter((l) => l.startsWith('WROTE')).join('\n'));
