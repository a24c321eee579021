// Recording (issue 53, item 3) with real media: two Chromium demo pages in a
// recorded room for about 10 s, once on a VP8 server and once on an H.264
// one. Both pages show the "● REC" mark while it runs and drop it after;
// each of the four tracks is its own file (VP8 and Opus in WebM, H.264 in
// MP4), whose duration ffprobe reads within 1 s of the time its publisher
// was in the call, and which ffmpeg decodes, every frame, without an error.
//
// Needs Debian's ffmpeg (scripts/test installs it); SKIP_FFMPEG=1 skips the
// file checks where it is missing.

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import {
  joinDemo, launchBrowser, newPage, sleep, snapshotAll, startServer,
  uniqueRoom, waitInPage, waitMediaFlowing, slotOf,
} from './harness.mjs';

let browser;
const pages = [];
const servers = [];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corelay-rec-browser-'));

before(async () => {
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  for (const s of servers) await s.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const haveFfmpeg = () => ['ffmpeg', 'ffprobe'].every((b) => spawnSync(b, ['-version']).status === 0);

const recVisible = (page) => page.evaluate(() => !document.getElementById('rec').hidden);

for (const codec of ['vp8', 'h264']) test(`two Chromium pages recorded (${codec}): REC shown, one playable file per track`, async (t) => {
  const room = uniqueRoom('rec');
  const server = await startServer({
    name: `recording-${codec}`, defaults: true, extraArgs: ['--video-codecs', codec, '--recordings-dir', dir],
  });
  servers.push(server);
  try {
    let res = await fetch(`${server.base}/api/v1/rooms/${room}/recordings`, { method: 'POST' });
    const started = await res.text();
    assert.equal(res.status, 201, started);
    const { id } = JSON.parse(started);

    const a = await newPage(browser, 'alice');
    const b = await newPage(browser, 'bob');
    pages.push(a, b);
    const joined = {};
    const ida = await joinDemo(a, server.base, room, 'Alice');
    joined[ida] = Date.now();
    const idb = await joinDemo(b, server.base, room, 'Bob');
    joined[idb] = Date.now();
    for (const [page, other] of [[a, idb], [b, ida]]) {
      await waitMediaFlowing(page, await slotOf(page, other, 'video'), 'video');
      await waitInPage(page, () => !document.getElementById('rec').hidden, null, { what: 'the REC mark' });
    }
    await sleep(10000);

    res = await fetch(`${server.base}/api/v1/rooms/${room}/recordings/${id}`, { method: 'DELETE' });
    const stopped = Date.now();
    const done = await res.json();
    assert.equal(res.status, 200, JSON.stringify(done));
    t.diagnostic(JSON.stringify(done.files.map((f) => [f.file, f.bytes, f.duration_ms, f.frames, f.gaps.length])));
    assert.equal(done.state, 'stopped', JSON.stringify(done));
    assert.equal(done.files.length, 4, 'two videos and two audios');
    for (const page of [a, b]) {
      await waitInPage(page, () => document.getElementById('rec').hidden, null, { what: 'the REC mark to go' });
      assert.equal(await recVisible(page), false);
    }

    if (!haveFfmpeg()) {
      assert.equal(process.env.SKIP_FFMPEG, '1', 'ffmpeg/ffprobe are missing (apt-get install ffmpeg, or SKIP_FFMPEG=1)');
      t.diagnostic('SKIPPED the ffprobe/ffmpeg checks (SKIP_FFMPEG=1)');
      return;
    }
    for (const f of done.files) {
      assert.equal(f.error, null, JSON.stringify(f));
      assert.ok(f.file.endsWith(f.kind === 'video' && codec === 'h264' ? '.mp4' : '.webm'), f.file);
      const file = path.join(done.dir, f.file);
      const probed = Number(execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'format=duration', '-of', 'csv=p=0', file]).toString().trim());
      const call = (stopped - joined[f.participant]) / 1000;
      t.diagnostic(`${f.file} (${f.codec}): ffprobe ${probed.toFixed(2)} s, in the call ${call.toFixed(2)} s`);
      assert.ok(Math.abs(probed - call) <= 1.0, `${f.file}: ffprobe ${probed} s against ${call} s in the call`);
      const dec = spawnSync('ffmpeg', ['-nostdin', '-v', 'error', '-i', file, '-f', 'null', '-']);
      assert.equal(dec.status, 0, `ffmpeg failed on ${f.file}: ${dec.stderr}`);
      assert.equal(dec.stderr.toString(), '', `${f.file}: decode errors`);
    }
  } catch (e) {
    await snapshotAll(pages, 'recording');
    throw new Error(`${e.message}\nserver log:\n${server.tail(40)}`);
  }
});
