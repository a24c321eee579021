// Pins the API contract independently of the demo page: a page with its own
// 40 lines of JS (served on the server's origin through page.route, no demo
// assets) POSTs one sendonly video, three recvonly video, one recvonly audio
// and a data channel, then must get slot events and decode video.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  debugState, launchBrowser, newPage, snapshotAll, startServer, uniqueRoom,
  waitInPage, waitMediaFlowing,
} from './harness.mjs';

const RAW_PAGE = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><title>raw</title>
<script>
window.raw = { events: [], slots: [], roster: [], state: 'new' };
window.rawJoin = async (room, name, videoSlots = 3, audioSlots = 1) => {
  const raw = window.raw;
  const stream = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240 } });
  const pc = new RTCPeerConnection();
  raw.pc = pc;
  pc.addTransceiver(stream.getVideoTracks()[0], { direction: 'sendonly' });
  for (let i = 0; i < videoSlots; i++) pc.addTransceiver('video', { direction: 'recvonly' });
  for (let i = 0; i < audioSlots; i++) pc.addTransceiver('audio', { direction: 'recvonly' });
  const dc = pc.createDataChannel('events');
  raw.dc = dc;
  dc.onmessage = (e) => {
    const m = JSON.parse(e.data);
    raw.events.push(m);
    if (m.type === 'slots') raw.slots = m.slots;
    if (m.type === 'roster') raw.roster = m.participants;
    if (m.type === 'welcome') raw.participantId = m.participant;
  };
  await pc.setLocalDescription();
  await new Promise((resolve) => {
    if (pc.iceGatheringState === 'complete') return resolve();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && resolve();
    setTimeout(resolve, 5000);
  });
  raw.offer = pc.localDescription.sdp;
  const res = await fetch('/api/v1/rooms/' + room + '/participants?name=' + encodeURIComponent(name), {
    method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: raw.offer,
  });
  raw.status = res.status;
  raw.location = res.headers.get('Location');
  raw.pid = res.headers.get('Participant-Id');
  raw.etag = res.headers.get('ETag');
  raw.contentType = res.headers.get('Content-Type');
  raw.answer = await res.text();
  if (res.status !== 201) { raw.state = 'error'; raw.error = raw.answer; return raw.status; }
  await pc.setRemoteDescription({ type: 'answer', sdp: raw.answer });
  raw.transceivers = pc.getTransceivers().map((t) => ({ mid: t.mid, kind: t.receiver.track.kind, direction: t.direction, current: t.currentDirection }));
  raw.state = 'negotiated';
  return raw.status;
};
</script><p>raw API page</p>`;

let server;
let browser;
const pages = [];

before(async () => {
  server = await startServer({ name: 'raw' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

async function rawPage(label) {
  const page = await newPage(browser, label);
  pages.push(page);
  await page.route(`${server.base}/raw-test`, (route) => route.fulfill({ status: 200, contentType: 'text/html', body: RAW_PAGE }));
  await page.goto(`${server.base}/raw-test`);
  return page;
}

// m-line sections of an SDP: [{kind, mid, direction, codecs: [name], lines}]
function sections(sdp) {
  const out = [];
  let cur = null;
  for (const line of sdp.split(/\r?\n/)) {
    if (line.startsWith('m=')) {
      cur = { kind: line.slice(2).split(' ')[0], port: line.split(' ')[1], lines: [line], codecs: [], direction: 'sendrecv' };
      out.push(cur);
    } else if (cur) {
      cur.lines.push(line);
      if (line.startsWith('a=mid:')) cur.mid = line.slice(6);
      if (/^a=(sendonly|recvonly|sendrecv|inactive)$/.test(line)) cur.direction = line.slice(2);
      const m = /^a=rtpmap:\d+ ([^/]+)\//.exec(line);
      if (m) cur.codecs.push(m[1].toLowerCase());
    }
  }
  return out;
}

test('a page using only the HTTP API and the data channel gets slots and decodes video', async (t) => {
  const room = uniqueRoom('raw');
  try {
    const a = await rawPage('rawA');
    const b = await rawPage('rawB');
    assert.equal(await a.evaluate((r) => window.rawJoin(r, 'A'), room), 201, 'POST status for A');
    assert.equal(await b.evaluate((r) => window.rawJoin(r, 'B'), room), 201, 'POST status for B');

    for (const page of [a, b]) {
      const raw = await page.evaluate(() => ({
        offer: window.raw.offer, answer: window.raw.answer, location: window.raw.location,
        etag: window.raw.etag, contentType: window.raw.contentType, transceivers: window.raw.transceivers,
      }));
      assert.match(raw.location, new RegExp(`^/api/v1/rooms/${room}/participants/[^/]+$`), 'Location');
      assert.match(raw.etag || '', /^(W\/)?"[^"]+"$/, 'ETag is a quoted string');
      assert.match(raw.contentType || '', /^application\/sdp/, 'answer Content-Type');

      const offer = sections(raw.offer);
      const answer = sections(raw.answer);
      assert.deepEqual(answer.map((s) => s.mid), offer.map((s) => s.mid), 'answer keeps every m-line, in order');
      assert.deepEqual(answer.map((s) => s.kind), ['video', 'video', 'video', 'video', 'audio', 'application']);
      assert.deepEqual(answer.map((s) => s.direction).slice(0, 5), ['recvonly', 'sendonly', 'sendonly', 'sendonly', 'sendonly'],
        'published tracks answered recvonly, slots sendonly');
      const want = (process.env.CORELAY_VIDEO_CODEC || 'vp8').toLowerCase(); // the server prefers VP8, Chromium offers it
      for (const s of answer.slice(0, 4)) {
        const media = s.codecs.filter((c) => !['rtx', 'red', 'ulpfec', 'flexfec-03'].includes(c));
        assert.deepEqual([...new Set(media)], [want], `video m-line ${s.mid} keeps only ${want}: ${s.codecs}`);
      }
      assert.deepEqual([...new Set(answer[4].codecs)], ['opus'], 'audio keeps only opus');
      assert.ok(raw.transceivers.every((x) => x.current === x.direction), `currentDirection: ${JSON.stringify(raw.transceivers)}`);
    }

    const idA = await a.evaluate(() => window.raw.pid);
    const idB = await b.evaluate(() => window.raw.pid);
    for (const [page, me, other] of [[a, idA, idB], [b, idB, idA]]) {
      await waitInPage(page, (o) => window.raw.slots.some((s) => s.kind === 'video' && s.participant === o), other,
        { what: 'a slots event with the other participant' });
      const raw = await page.evaluate(() => ({ events: window.raw.events, slots: window.raw.slots, roster: window.raw.roster, tr: window.raw.transceivers }));
      const welcome = raw.events.find((e) => e.type === 'welcome');
      assert.ok(welcome, 'welcome event');
      assert.equal(welcome.participant, me, 'welcome.participant is the id in Location');
      assert.equal(welcome.room, room);
      assert.equal(raw.events.findIndex((e) => e.type === 'welcome'), 0, 'welcome comes first');
      const rosterIds = raw.roster.map((p) => p.id).sort();
      assert.deepEqual(rosterIds, [me, other].sort(), 'roster has both');
      const otherEntry = raw.roster.find((p) => p.id === other);
      assert.deepEqual(otherEntry.tracks, [{ mid: '0', kind: 'video', muted: false, paused: false }], 'roster lists the published track, neither muted nor paused');

      const slotMids = raw.tr.filter((x) => x.direction === 'recvonly').map((x) => `${x.mid}:${x.kind}`).sort();
      assert.deepEqual(raw.slots.map((s) => `${s.mid}:${s.kind}`).sort(), slotMids, 'slots cover every recvonly m-line');
      const filled = raw.slots.filter((s) => s.participant);
      assert.equal(filled.length, 1, `exactly one filled slot: ${JSON.stringify(raw.slots)}`);
      assert.equal(filled[0].kind, 'video');
      assert.equal(filled[0].track, '0', 'slot track is the publisher\'s mid');
      for (const s of raw.slots.filter((x) => !x.participant)) assert.equal(s.track, null);

      const flow = await waitMediaFlowing(page, filled[0].mid, 'video', { pcExpr: 'window.raw.pc' });
      t.diagnostic(`${page.label} decoded ${flow.now} frames ${flow.stats.frameWidth}x${flow.stats.frameHeight} via ${flow.stats.decoder}`);
    }

    // Leaving empties the slot on the other side.
    const del = await b.evaluate(async () => (await fetch(window.raw.location, { method: 'DELETE' })).status);
    assert.equal(del, 204);
    await waitInPage(a, () => window.raw.slots.every((s) => s.participant === null), null, { what: 'slots to empty', timeout: 5000 });
    await waitInPage(a, () => window.raw.roster.length === 1, null, { what: 'roster to shrink', timeout: 5000 });
    // A second DELETE is 404 (from node: the page would log the 404 as an error).
    const loc = await b.evaluate(() => window.raw.location);
    const again = await fetch(`${server.base}${loc}`, { method: 'DELETE' });
    assert.equal(again.status, 404, 'second DELETE is 404');
    assert.equal((await again.json()).code, 'not_found');
    for (const p of pages) assert.deepEqual(p.errors, [], `${p.label} errors`);
  } catch (err) {
    await snapshotAll(pages, 'raw-failure');
    for (const p of pages) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
    for (const p of pages) console.log(`--- ${p.label} answer:\n${await p.evaluate(() => window.raw.answer).catch(String)}`);
    console.log(`--- server log:\n${server.tail(80)}`);
    throw err;
  }
});

test('API errors are JSON with the documented codes', async () => {
  const base = server.base;
  const room = uniqueRoom('err');
  const post = (body, ct = 'application/sdp') => fetch(`${base}/api/v1/rooms/${room}/participants`, { method: 'POST', headers: { 'Content-Type': ct }, body });
  let r = await post('v=0', 'text/plain');
  assert.equal(r.status, 415);
  assert.equal((await r.json()).code, 'unsupported_media_type');
  r = await post('');
  assert.equal(r.status, 400);
  assert.equal((await r.json()).code, 'bad_offer');
  r = await fetch(`${base}/api/v1/rooms/${room}/participants/nope`, { method: 'DELETE' });
  assert.equal(r.status, 404);
  assert.equal((await r.json()).code, 'not_found');
  r = await fetch(`${base}/healthz`);
  assert.deepEqual(await r.json(), { status: 'ok', shards: 1 });
});

test('a browser can renegotiate with PATCH + If-Match: a slot added later gets filled', async () => {
  const room = uniqueRoom('patch');
  const page = await rawPage('rawPatch');
  const pub = await rawPage('rawPub');
  try {
    // Joins publishing one video and receiving nothing.
    assert.equal(await page.evaluate((r) => window.rawJoin(r, 'P', 0, 0), room), 201);
    await waitInPage(page, () => window.raw.pc.connectionState === 'connected' && window.raw.events.some((e) => e.type === 'welcome'),
      null, { what: 'P to connect' });
    const r = await page.evaluate(async () => {
      const raw = window.raw;
      const pc = raw.pc;
      pc.addTransceiver('video', { direction: 'recvonly' });
      await pc.setLocalDescription(await pc.createOffer());
      const offer = pc.localDescription.sdp;
      const patch = (headers) => fetch(raw.location, { method: 'PATCH', headers: { 'Content-Type': 'application/sdp', ...headers }, body: offer });
      const out = {};
      let res = await patch({});
      out.noIfMatch = { status: res.status, body: await res.text() };
      res = await patch({ 'If-Match': '"stale-etag"' });
      out.stale = { status: res.status, body: await res.text() };
      res = await patch({ 'If-Match': raw.etag });
      out.ok = { status: res.status, etag: res.headers.get('ETag'), contentType: res.headers.get('Content-Type') };
      const answer = await res.text();
      out.answer = answer;
      if (res.status === 200) await pc.setRemoteDescription({ type: 'answer', sdp: answer });
      out.mids = pc.getTransceivers().map((t) => `${t.mid}:${t.receiver.track.kind}:${t.currentDirection}`);
      out.etag = raw.etag;
      return out;
    });
    assert.equal(r.noIfMatch.status, 428, `PATCH without If-Match: ${r.noIfMatch.body}`);
    assert.equal(JSON.parse(r.noIfMatch.body).code, 'precondition_required');
    assert.equal(r.stale.status, 412, `stale If-Match: ${r.stale.body}`);
    assert.equal(JSON.parse(r.stale.body).code, 'etag_mismatch');
    assert.equal(r.ok.status, 200, `PATCH: ${r.answer}`);
    assert.match(r.ok.contentType || '', /^application\/sdp/);
    assert.ok(r.ok.etag && r.ok.etag !== r.etag, 'a new ETag');
    const answer = sections(r.answer);
    assert.deepEqual(answer.map((x) => `${x.kind}:${x.direction}`), ['video:recvonly', 'application:sendrecv', 'video:sendonly']);
    assert.equal(r.mids[1], `${answer[2].mid}:video:recvonly`, `transceivers: ${r.mids}`);

    // A publisher joins: the new slot is filled and decodes.
    assert.equal(await pub.evaluate((rm) => window.rawJoin(rm, 'Q', 0, 0), room), 201);
    const qid = await pub.evaluate(() => window.raw.pid);
    await waitInPage(page, ([m, q]) => window.raw.slots.some((s) => s.mid === m && s.participant === q),
      [answer[2].mid, qid], { what: 'the new slot to be filled by Q' });
    await waitMediaFlowing(page, answer[2].mid, 'video', { pcExpr: 'window.raw.pc' });
    const unexpected = page.errors.filter((e) => !/status of (428|412)/.test(e));
    assert.deepEqual(unexpected, []);
  } catch (err) {
    for (const p of [page, pub]) console.log(`--- ${p.label}: ${await debugState(p).catch(String)}\n${p.logs.slice(-20).join('\n')}`);
    console.log(`--- server log:\n${server.tail(40)}`);
    throw err;
  }
});
