// corelay demo client. Plain modern JS, no build step.
//
// Uses only the public API (docs/api.md): one RTCPeerConnection whose offer
// describes the whole session (sendonly camera + mic, recvonly "slots"), one
// POST, and the `events` data channel, whose `slots` messages say which
// participant is in which receive slot. No renegotiation, no trickle ICE.
//
// This file defines `CorelaySession` and `CorelayGrid` (shared with the viewer
// page, watch.js) and drives the room page when it finds #join-form.
'use strict';

(() => {
  const ABS_CAPTURE_TIME = 'http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time';
  // AV1's SVC layers (and Chromium's VP9's): a receiver that does not
  // negotiate it cannot decode an AV1 stream the server thinned to its
  // layers. Chromium leaves it off on receive-only transceivers.
  const DEPENDENCY_DESCRIPTOR = 'https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension';
  const ICE_GATHER_TIMEOUT_MS = 5000;
  // Reconnection (issue 50.3): a connection `disconnected` this long, or
  // `failed`, restarts ICE; a restart that could not be made is tried again
  // after RESTART_RETRY_MS while the connection is still down.
  const RESTART_AFTER_MS = 2000;
  const RESTART_RETRY_MS = 2000;
  // Chromium calls a connection `disconnected` only ~7 s after its network
  // went away. A connection that was receiving steadily (media, RTCP
  // feedback to a publisher: many datagrams a second) and then receives
  // nothing for SILENT_MS is taken as down at once: the page restarts ICE
  // (harmless if the path was fine: media goes on over it meanwhile).
  // Steady: bytes arrived in at least 3 of the last 4 polls of
  // SILENCE_POLL_MS (an empty room, with only ICE consent every ~5 s,
  // never is).
  const SILENT_MS = 750;
  const SILENCE_POLL_MS = 250;
  // Simulcast encodings, lowest first (docs/api.md, "Simulcast").
  const SIMULCAST_ENCODINGS = [
    { rid: 'q', scaleResolutionDownBy: 4, maxBitrate: 150000 },
    { rid: 'h', scaleResolutionDownBy: 2, maxBitrate: 500000 },
    { rid: 'f', scaleResolutionDownBy: 1, maxBitrate: 1500000 },
  ];

  const params = new URLSearchParams(location.search);

  function intParam(name, dflt, min, max) {
    const v = parseInt(params.get(name) ?? '', 10);
    return Number.isFinite(v) ? Math.min(max, Math.max(min, v)) : dflt;
  }

  function boolParam(name, dflt) {
    const v = params.get(name);
    if (v === null) return dflt;
    return !['0', 'false', 'no', 'off'].includes(v.toLowerCase());
  }

  // Turn on abs-capture-time (Chrome has it "stopped" by default) so the
  // server's forwarding of it is exercised. ?abscapture=0 turns this off.
  function enableHeaderExtensions(transceiver, uris) {
    if (typeof transceiver.setHeaderExtensionsToNegotiate !== 'function') return;
    try {
      const exts = transceiver.getHeaderExtensionsToNegotiate();
      let changed = false;
      for (const e of exts) {
        if (uris.includes(e.uri) && e.direction === 'stopped') {
          e.direction = 'sendrecv';
          changed = true;
        }
      }
      if (changed) transceiver.setHeaderExtensionsToNegotiate(exts);
    } catch (err) {
      console.warn(`corelay: could not enable ${uris.join(', ')}`, err);
    }
  }

  // The ICE lines of an SDP offer as a trickle-ice-sdpfrag (RFC 8840): the
  // credentials and candidates, under the first m-line's mid.
  function iceFragment(sdp) {
    const lines = sdp.split(/\r?\n/);
    const value = (prefix) => (lines.find((l) => l.startsWith(prefix)) || '').slice(prefix.length);
    const mids = lines.filter((l) => l.startsWith('a=mid:')).map((l) => l.slice(6));
    return [
      'a=ice-options:trickle',
      ...(mids.length ? [`a=group:BUNDLE ${mids.join(' ')}`] : []),
      'm=audio 9 UDP/TLS/RTP/SAVPF 0',
      `a=mid:${mids[0] ?? '0'}`,
      `a=ice-ufrag:${value('a=ice-ufrag:')}`,
      `a=ice-pwd:${value('a=ice-pwd:')}`,
      ...[...new Set(lines.filter((l) => l.startsWith('a=candidate:')))],
      'a=end-of-candidates',
      '',
    ].join('\r\n');
  }

  // `answer` with the ICE credentials and candidates of the fragment `frag`
  // (the server's answer to an ICE restart by fragment).
  function withIce(answer, frag) {
    const lines = frag.split(/\r?\n/);
    const value = (prefix) => (lines.find((l) => l.startsWith(prefix)) || '').slice(prefix.length);
    const cands = lines.filter((l) => l.startsWith('a=candidate:'));
    return answer
      .replace(/a=ice-ufrag:.*\r?\n/g, `a=ice-ufrag:${value('a=ice-ufrag:')}\r\n`)
      .replace(/a=ice-pwd:.*\r?\n/g, `a=ice-pwd:${value('a=ice-pwd:')}\r\n`)
      .replace(/a=candidate:.*\r?\n/g, '')
      .replace(/a=end-of-candidates\r?\n/g, cands.map((c) => `${c}\r\n`).join('') + 'a=end-of-candidates\r\n');
  }

  function waitForIceGathering(pc, timeoutMs) {
    if (pc.iceGatheringState === 'complete') return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        pc.removeEventListener('icegatheringstatechange', check);
        resolve();
      };
      const check = () => { if (pc.iceGatheringState === 'complete') done(); };
      // Never hang on a slow gatherer: the host candidates come first anyway.
      const timer = setTimeout(done, timeoutMs);
      pc.addEventListener('icegatheringstatechange', check);
    });
  }

  // End-to-end encryption (?e2ee=PASSPHRASE): each encoded frame is
  // encrypted in the browser before packetization (RTCRtpScriptTransform),
  // so the server forwards bytes it cannot read. As the usual schemes do,
  // the first bytes of a frame stay in the clear: VP8's payload header (10
  // bytes of a keyframe, 3 of a delta frame: what tells a keyframe and its
  // size) and Opus's TOC byte; the rest is AES-GCM (128-bit key from the
  // passphrase by PBKDF2, salted with the room's name; a fresh 96-bit IV per
  // frame, appended; the clear bytes authenticated as associated data).
  // Video is VP8 only under E2EE (H.264's packetizer reads the frame's NAL
  // units). The worker counts frames and reports every 250 ms.
  const E2EE_WORKER = `'use strict';
const counts = { encrypted: 0, decrypted: 0, failed: 0 };
let dirty = false;
setInterval(() => { if (dirty) { dirty = false; postMessage(counts); } }, 250);
const clearBytes = (frame, kind) => (kind === 'audio' ? 1 : frame.type === 'key' ? 10 : 3);
async function encrypt(key, kind, frame, controller) {
  const data = new Uint8Array(frame.data);
  const n = Math.min(clearBytes(frame, kind), data.length);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = new Uint8Array(await crypto.subtle.encrypt(
    { name: 'AES-GCM', iv, additionalData: data.subarray(0, n) }, key, data.subarray(n)));
  const out = new Uint8Array(n + sealed.length + iv.length);
  out.set(data.subarray(0, n));
  out.set(sealed, n);
  out.set(iv, n + sealed.length);
  frame.data = out.buffer;
  counts.encrypted++;
  dirty = true;
  controller.enqueue(frame);
}
async function decrypt(key, kind, frame, controller) {
  const data = new Uint8Array(frame.data);
  const n = Math.min(clearBytes(frame, kind), data.length);
  try {
    if (data.length < n + 16 + 12) throw new Error('too short');
    const plain = new Uint8Array(await crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: data.subarray(data.length - 12), additionalData: data.subarray(0, n) },
      key, data.subarray(n, data.length - 12)));
    const out = new Uint8Array(n + plain.length);
    out.set(data.subarray(0, n));
    out.set(plain, n);
    frame.data = out.buffer;
    counts.decrypted++;
    controller.enqueue(frame);
  } catch {
    counts.failed++;  // another key, or none: the frame is dropped
  }
  dirty = true;
}
onrtctransform = (ev) => {
  const { readable, writable, options } = ev.transformer;
  const step = options.op === 'encrypt' ? encrypt : decrypt;
  readable
    .pipeThrough(new TransformStream({ transform: (frame, c) => step(options.key, options.kind, frame, c) }))
    .pipeTo(writable)
    .catch(() => {});
};
`;

  // The AES-GCM key of `passphrase` in `room`. Throws where the browser
  // cannot do E2EE (no encoded transforms; WebCrypto needs a secure
  // context: https or localhost).
  async function e2eeKey(passphrase, room) {
    if (typeof RTCRtpScriptTransform !== 'function') throw new Error('end-to-end encryption needs RTCRtpScriptTransform, which this browser lacks');
    if (!crypto.subtle) throw new Error('end-to-end encryption needs a secure context (https or localhost)');
    const enc = new TextEncoder();
    const base = await crypto.subtle.importKey('raw', enc.encode(passphrase), 'PBKDF2', false, ['deriveKey']);
    return crypto.subtle.deriveKey(
      { name: 'PBKDF2', salt: enc.encode(`corelay-e2ee:${room}`), iterations: 100000, hash: 'SHA-256' },
      base, { name: 'AES-GCM', length: 128 }, false, ['encrypt', 'decrypt']);
  }

  // VP8 (and its RTX) only, for a video transceiver under E2EE.
  function preferVp8(transceiver) {
    const caps = RTCRtpReceiver.getCapabilities?.('video');
    if (!caps || typeof transceiver.setCodecPreferences !== 'function') return;
    const codecs = caps.codecs.filter((c) => /^video\/(vp8|rtx)$/i.test(c.mimeType));
    if (codecs.length) transceiver.setCodecPreferences(codecs);
  }

  // One video codec (and RTX) on a sending transceiver.
  function preferCodec(transceiver, name) {
    const caps = RTCRtpReceiver.getCapabilities?.('video');
    if (!caps || typeof transceiver.setCodecPreferences !== 'function') return;
    const want = new RegExp(`^video/(${name}|rtx)$`, 'i');
    const codecs = caps.codecs.filter((c) => want.test(c.mimeType));
    if (codecs.some((c) => !/rtx/i.test(c.mimeType))) transceiver.setCodecPreferences(codecs);
  }

  async function errorText(res) {
    const text = await res.text().catch(() => '');
    try {
      const j = JSON.parse(text);
      if (j && j.code) return `${res.status} ${j.code}: ${j.message ?? ''}`;
    } catch { /* not JSON */ }
    return `${res.status} ${res.statusText} ${text}`.trim();
  }

  // One session = one RTCPeerConnection + one POST + the events channel.
  class CorelaySession extends EventTarget {
    // opts: {endpoint, name, stream, videoSlots, audioSlots, absCaptureTime, token, simulcast}
    // simulcast: send the camera as three encodings (rids q, h, f at 1/4,
    // 1/2 and full size); the server gives each viewer the one its
    // downlink and tile size fit, and pauses those nobody takes.
    // token: access token for a server run with --auth-secret (default: the
    // page address's ?token=), sent as `Authorization: Bearer` on every call.
    constructor(opts) {
      super();
      this.endpoint = opts.endpoint;
      this.token = opts.token ?? params.get('token') ?? null;
      this.name = opts.name || '';
      this.stream = opts.stream || null;
      this.videoSlots = opts.videoSlots ?? 3;
      this.audioSlots = opts.audioSlots ?? 3;
      this.absCaptureTime = opts.absCaptureTime ?? true;
      this.simulcast = opts.simulcast ?? false;
      // codec: 'vp9', 'av1', 'vp8' or 'h264': the only one the camera
      // offers (a room takes its first publisher's); svc: a
      // scalabilityMode for one scalable encoding, e.g. 'L3T3_KEY'.
      this.codec = opts.codec ?? null;
      this.svc = opts.svc ?? null;
      // 'relay' sends all media through the TURN servers the server hands
      // out (GET /api/v1/ice-servers); default 'all' (page address: ?ice=relay).
      this.iceTransportPolicy = opts.iceTransportPolicy ?? (params.get('ice') === 'relay' ? 'relay' : 'all');
      this.iceServers = [];
      // e2ee: a CryptoKey (e2eeKey): every frame sent is encrypted with it
      // and every frame received decrypted (frames it does not open are
      // dropped). Counts in `e2eeCounts`.
      this.e2ee = opts.e2ee ?? null;
      this.e2eeCounts = { encrypted: 0, decrypted: 0, failed: 0 };
      this.e2eeWorkers = [];
      this.views = new Map();  // slot mid -> last `view` sent ("WxH")
      this.pc = null;
      this.dc = null;
      this.location = null;
      this.nodes = [];
      this.elsewhere = null;
      this.etag = null;
      this.participantId = null;
      this.room = null;
      this.roster = [];
      this.viewers = 0;
      this.bye = null;
      this.slots = [];
      this.speaker = null;
      this.events = [];  // every event received, for debugging and tests
      this.state = 'new';
      this.error = null;
      this.offer = null;
      this.answer = null;
      this.senders = {};  // kind -> RTCRtpSender
    }

    // Headers for an API call: `extra` plus the bearer token, if any.
    headers(extra) {
      const h = { ...(extra || {}) };
      if (this.token) h.Authorization = `Bearer ${this.token}`;
      return h;
    }

    setState(state, detail) {
      this.state = state;
      this.dispatchEvent(new CustomEvent('state', { detail: { state, detail } }));
    }

    transceiverByMid(mid) {
      if (!this.pc) return null;
      return this.pc.getTransceivers().find((t) => t.mid === mid) || null;
    }

    nameOf(participant) {
      const p = this.roster.find((r) => r.id === participant);
      return p ? p.name : '';
    }

    // The TURN servers the server hands out (coturn credentials minted
    // for this participant; an empty list without --turn-url), asked for
    // like a join: the room of the endpoint, the token, the name. Without
    // them (an older server, an error) the session goes on direct.
    async fetchIceServers() {
      try {
        const url = new URL('/api/v1/ice-servers', location.href);
        const endpoint = new URL(this.endpoint, location.href);
        const m = /^\/(?:api\/v1\/rooms\/([^/]+)\/participants|whep\/([^/]+)|whip\/([^/]+))/.exec(endpoint.pathname);
        const room = m && (m[1] || m[2] || m[3]);
        if (room) url.searchParams.set('room', decodeURIComponent(room));
        const name = this.name || endpoint.searchParams.get('name');
        if (name) url.searchParams.set('name', name);
        const res = await fetch(url, { headers: this.headers() });
        if (!res.ok) return [];
        const j = await res.json();
        return Array.isArray(j.iceServers) ? j.iceServers : [];
      } catch (err) {
        console.warn('corelay: no ICE servers', err);
        return [];
      }
    }

    async start() {
      this.setState('connecting');
      // Before the offer, so that its relay candidates are in it.
      this.iceServers = await this.fetchIceServers();
      const pc = new RTCPeerConnection({
        bundlePolicy: 'max-bundle',
        rtcpMuxPolicy: 'require',
        iceServers: this.iceServers,
        iceTransportPolicy: this.iceTransportPolicy,
      });
      this.pc = pc;
      let downTimer = null;
      pc.addEventListener('connectionstatechange', () => {
        this.dispatchEvent(new CustomEvent('connection', { detail: pc.connectionState }));
        if (pc.connectionState === 'connected') this.setState('connected');
        if (pc.connectionState === 'failed') this.setState('failed', 'ICE/DTLS failed');
        // The network went away or changed: restart ICE (new credentials,
        // candidates gathered on the network the device has now).
        clearTimeout(downTimer);
        if (pc.connectionState === 'disconnected') downTimer = setTimeout(() => this.restartIce('disconnected'), RESTART_AFTER_MS);
        if (pc.connectionState === 'failed') this.restartIce('failed');
      });
      this.watchSilence(pc);

      const transceivers = [];
      if (this.stream) {
        // Video first: mid 0 is the camera, mid 1 the microphone.
        for (const track of [...this.stream.getVideoTracks(), ...this.stream.getAudioTracks()]) {
          const init = { direction: 'sendonly', streams: [this.stream] };
          // ?svc=L3T3_KEY: one scalable encoding (VP9, AV1) instead of
          // simulcast; the server picks layers out of it per viewer.
          // At most the simulcast top layer's rate, all layers together.
          if (track.kind === 'video' && this.svc) init.sendEncodings = [{ scalabilityMode: this.svc, maxBitrate: 1500000 }];
          else if (track.kind === 'video' && this.simulcast) init.sendEncodings = SIMULCAST_ENCODINGS;
          const t = pc.addTransceiver(track, init);
          if (track.kind === 'video' && this.codec && !this.e2ee) preferCodec(t, this.codec);
          this.senders[track.kind] = t.sender;
          transceivers.push(t);
        }
      }
      for (let i = 0; i < this.videoSlots; i++) transceivers.push(pc.addTransceiver('video', { direction: 'recvonly' }));
      for (let i = 0; i < this.audioSlots; i++) transceivers.push(pc.addTransceiver('audio', { direction: 'recvonly' }));
      if (this.absCaptureTime) transceivers.forEach((t) => enableHeaderExtensions(t, [ABS_CAPTURE_TIME]));
      transceivers.filter((t) => t.receiver.track.kind === 'video')
        .forEach((t) => enableHeaderExtensions(t, [DEPENDENCY_DESCRIPTOR]));
      if (this.e2ee) this.encryptAll(transceivers);

      const dc = pc.createDataChannel('events');
      this.dc = dc;
      dc.addEventListener('open', () => {
        for (const kind of ['audio', 'video']) if (this.isMuted(kind)) this.sendMute(kind);
        this.dispatchEvent(new Event('dcopen'));
      });
      dc.addEventListener('close', () => this.dispatchEvent(new Event('dcclose')));
      dc.addEventListener('message', (ev) => this.onEvent(ev.data));

      await pc.setLocalDescription(await pc.createOffer());
      await waitForIceGathering(pc, ICE_GATHER_TIMEOUT_MS);
      this.offer = pc.localDescription.sdp;

      const res = await fetch(this.endpoint, {
        method: 'POST',
        headers: this.headers({ 'Content-Type': 'application/sdp' }),
        body: this.offer,
      });
      if (res.status === 409) {
        // A cluster node that sends this join to another (`follow=0`).
        const body = await res.clone().json().catch(() => ({}));
        if (body.code === 'elsewhere' && body.node) {
          this.elsewhere = body.node;
          throw new Error(body.message || 'elsewhere');
        }
      }
      if (!res.ok) {
        let msg = await errorText(res);
        const retry = res.headers.get('Retry-After');
        if (res.status === 503 && retry) msg += ` (try again in ${retry} s)`;
        if (res.status === 401 && !this.token) msg += ' (this server needs an access token: add ?token=… to the address)';
        this.fail(msg);
        throw new Error(msg);
      }
      const loc = res.headers.get('Location');
      // Relative to where the join landed: a cluster node may have sent it
      // on to another (307).
      this.location = loc ? new URL(loc, location.href).href : null;
      // The cluster's other nodes, to join through if this one goes away.
      this.nodes = (res.headers.get('Corelay-Nodes') || '').split(',').map((n) => n.trim()).filter(Boolean);
      this.etag = res.headers.get('ETag');
      // The resource URL is a secret capability; the public id comes apart.
      this.participantId = res.headers.get('Participant-Id');
      this.answer = await res.text();
      await pc.setRemoteDescription({ type: 'answer', sdp: this.answer });
      this.setState('negotiated');
      return this;
    }

    // ICE restart by PATCH: the participant keeps its id, tracks, slots and
    // place in the room; media moves to whatever path the new checks find.
    // A `silent` event, and an ICE restart, when a connection that was
    // receiving steadily goes quiet for SILENT_MS (see there). Once per
    // silence: it must be steady again before the next.
    watchSilence(pc) {
      let last = -1;
      let quietSince = Date.now();
      let steady = false; // when it last received: steadily
      const recent = []; // the last 4 polls: did bytes arrive?
      const timer = setInterval(async () => {
        if (this.pc !== pc || pc.connectionState === 'closed') { clearInterval(timer); return; }
        let bytes = 0;
        try {
          (await pc.getStats()).forEach((r) => { if (r.type === 'candidate-pair') bytes += r.bytesReceived || 0; });
        } catch { return; } // closed meanwhile
        const rose = bytes !== last;
        last = bytes;
        recent.push(rose);
        if (recent.length > 4) recent.shift();
        if (rose) {
          quietSince = Date.now();
          steady = recent.length === 4 && recent.filter(Boolean).length >= 3;
        } else if (steady && pc.connectionState === 'connected' && Date.now() - quietSince >= SILENT_MS) {
          steady = false;
          this.dispatchEvent(new Event('silent'));
          this.restartIce('silent');
        }
      }, SILENCE_POLL_MS);
    }

    // The participant API takes the whole new offer (If-Match: the ETag); a
    // WHIP/WHEP session only its ICE lines as a trickle-ice-sdpfrag
    // (If-Match: *, RFC 9725 §4.3.3), the answer then being the old one
    // with the new credentials and candidates. A server that no longer
    // knows the participant (404) ends the session with a `gone` event (the
    // pages rejoin); any other failure is tried again while the connection
    // is down.
    async restartIce(why) {
      const pc = this.pc;
      if (this.restarting || !pc || !this.location || this.state === 'left' || pc.signalingState !== 'stable') return;
      this.restarting = true;
      this.restarts = (this.restarts ?? 0) + 1;
      this.dispatchEvent(new CustomEvent('restart', { detail: { why, n: this.restarts } }));
      try {
        pc.restartIce();
        await pc.setLocalDescription(await pc.createOffer());
        await waitForIceGathering(pc, ICE_GATHER_TIMEOUT_MS);
        const offer = pc.localDescription.sdp;
        const frag = /\/(whip|whep)\/[^/]+\/[^/]+$/.test(new URL(this.location).pathname);
        const res = await fetch(this.location, frag
          ? { method: 'PATCH', headers: this.headers({ 'Content-Type': 'application/trickle-ice-sdpfrag', 'If-Match': '*' }), body: iceFragment(offer) }
          : { method: 'PATCH', headers: this.headers({ 'Content-Type': 'application/sdp', 'If-Match': this.etag }), body: offer });
        if (res.status === 404) {
          await pc.setLocalDescription({ type: 'rollback' }).catch(() => {});
          this.location = null;
          this.setState('failed', 'the server no longer knows this participant');
          this.dispatchEvent(new Event('gone'));
          return;
        }
        if (!res.ok) throw new Error(await errorText(res));
        const body = await res.text();
        const answer = frag ? withIce(this.answer, body) : body;
        this.etag = res.headers.get('ETag') ?? this.etag;
        await pc.setRemoteDescription({ type: 'answer', sdp: answer });
        this.offer = offer;
        this.answer = answer;
      } catch (err) {
        console.warn(`corelay: ICE restart (${why}) failed`, err);
        if (pc.signalingState === 'have-local-offer') await pc.setLocalDescription({ type: 'rollback' }).catch(() => {});
        setTimeout(() => {
          if (this.pc === pc && ['disconnected', 'failed'].includes(pc.connectionState)) this.restartIce('retry');
        }, RESTART_RETRY_MS);
      } finally {
        this.restarting = false;
      }
    }

    // A transform per sender (encrypt) and per receiver (decrypt), in two
    // workers whose counts add up in `e2eeCounts`.
    encryptAll(transceivers) {
      const url = URL.createObjectURL(new Blob([E2EE_WORKER], { type: 'text/javascript' }));
      const last = [{}, {}];
      const workers = [0, 1].map((i) => {
        const w = new Worker(url, { name: `corelay-e2ee-${i}` });
        w.onmessage = (ev) => {
          last[i] = ev.data;
          for (const k of Object.keys(this.e2eeCounts)) this.e2eeCounts[k] = (last[0][k] ?? 0) + (last[1][k] ?? 0);
        };
        return w;
      });
      this.e2eeWorkers = workers;
      for (const t of transceivers) {
        const kind = t.receiver.track.kind;
        if (kind === 'video') preferVp8(t);
        if (t.direction === 'sendonly') {
          t.sender.transform = new RTCRtpScriptTransform(workers[0], { op: 'encrypt', kind, key: this.e2ee });
        } else {
          t.receiver.transform = new RTCRtpScriptTransform(workers[1], { op: 'decrypt', kind, key: this.e2ee });
        }
      }
    }

    fail(msg) {
      this.error = msg;
      this.setState('error', msg);
    }

    onEvent(data) {
      let ev;
      try { ev = JSON.parse(data); } catch { console.warn('corelay: non-JSON event', data); return; }
      this.events.push(ev);
      switch (ev.type) {
        case 'welcome':
          this.participantId = ev.participant;
          this.room = ev.room;
          break;
        case 'roster':
          this.roster = ev.participants || [];
          // Receive-only viewers (WHEP, /watch) are counted, not listed.
          this.viewers = ev.viewers || 0;
          break;
        case 'bye':
          // The server removed us; DTLS closes right after this.
          this.bye = ev.reason;
          break;
        case 'slots':
          this.slots = ev.slots || [];
          break;
        case 'speaker':
          this.speaker = ev.participant;
          break;
        case 'layers':
          this.applyLayers(ev.active || []);
          break;
        case 'svc':
          this.svcTaken = ev.spatial;
          this.applySpatialLayers(ev.spatial);
          break;
        case 'recording':
          // The room is being recorded (issue 53): its id and, if the
          // recorder failed (a full disk), why; null once it stopped.
          this.recording = ev.active ? ev : null;
          break;
        case 'track': {
          // A published track muted/unmuted or paused/resumed: the roster
          // keeps each track's state.
          const t = this.roster.find((p) => p.id === ev.participant)?.tracks?.find((x) => x.mid === ev.mid);
          if (t) { t.muted = ev.muted; t.paused = ev.paused; }
          break;
        }
        default:
          break;
      }
      this.dispatchEvent(new CustomEvent(ev.type, { detail: ev }));
      this.dispatchEvent(new CustomEvent('event', { detail: ev }));
    }

    send(msg) {
      if (this.dc && this.dc.readyState === 'open') this.dc.send(JSON.stringify(msg));
    }

    // Dynacast: send only the simulcast encodings some viewer takes.
    async applyLayers(active) {
      const sender = this.senders.video;
      if (!sender) return;
      const params = sender.getParameters();
      if (!params.encodings || params.encodings.length < 2) return;
      let changed = false;
      for (const e of params.encodings) {
        const on = active.includes(e.rid);
        if (e.active !== on) { e.active = on; changed = true; }
      }
      if (changed) await sender.setParameters(params).catch((err) => console.warn('corelay: layers', err));
    }

    // Dynacast for one scalable encoding: encode only the spatial layers
    // some viewer takes, each at the size it had (L3T3_KEY at 1280x720
    // taken up to its second layer: L2T3_KEY scaled down by 2, layers 320
    // and 640 wide), all of ?svc= again when asked.
    async applySpatialLayers(n) {
      const sender = this.senders.video;
      const m = /^([LS])(\d)(T\d.*)$/.exec(this.svc ?? '');
      if (!sender || !m || !Number.isInteger(n) || n < 1) return;
      const all = Number(m[2]);
      const keep = Math.min(n, all);
      const params = sender.getParameters();
      const e = params.encodings?.[0];
      const mode = `${m[1]}${keep}${m[3]}`;
      const scale = 2 ** (all - keep);
      if (!e || (e.scalabilityMode === mode && (e.scaleResolutionDownBy ?? 1) === scale)) return;
      e.scalabilityMode = mode;
      e.scaleResolutionDownBy = scale;
      await sender.setParameters(params).catch((err) => console.warn('corelay: svc', err));
    }

    // Tell the server how large a video slot is shown (0x0: hidden), when
    // that changes: it picks the simulcast layer from it.
    view(mid, width, height) {
      const key = `${width}x${height}`;
      if (this.views.get(mid) === key) return;
      if (!this.dc || this.dc.readyState !== 'open') return;
      this.views.set(mid, key);
      this.send({ type: 'view', mid, width, height });
    }

    // The server's live verdict on each of our receive slots: slot mid ->
    // {verdict, evidence, history}; empty when it cannot be had.
    async diagnosis() {
      const out = new Map();
      if (!this.room || !this.participantId) return out;
      try {
        const url = `/api/v1/rooms/${encodeURIComponent(this.room)}/participants/${encodeURIComponent(this.participantId)}/diagnosis`;
        const res = await fetch(url, { headers: this.headers() });
        if (!res.ok) return out;
        for (const s of (await res.json()).slots ?? []) out.set(s.mid, s);
      } catch { /* the overlay shows the rest */ }
      return out;
    }

    pin(mid, participant) { this.send({ type: 'pin', participant, mid }); }
    unpin(mid) { this.send({ type: 'unpin', mid }); }

    // Mute keeps the sender and disables the track (the camera's light
    // stays on, nothing leaves it), and tells the server, which stops
    // forwarding the track and tells the room (a `track` event); on
    // unmute it asks the camera for a keyframe, so the picture is back at
    // once. Sent again when the data channel opens (a mute before it).
    setMuted(kind, muted) {
      if (!this.stream) return;
      for (const t of this.stream.getTracks()) if (t.kind === kind) t.enabled = !muted;
      this.sendMute(kind);
      this.dispatchEvent(new CustomEvent('mute', { detail: { kind, muted } }));
    }

    sendMute(kind) {
      const mid = this.pc?.getTransceivers().find((t) => t.sender === this.senders[kind])?.mid;
      if (mid != null) this.send({ type: 'mute', mid, muted: this.isMuted(kind) });
    }

    // Why `participant`'s camera or microphone (`kind`) is off, as the
    // server says: 'muted' (they said so), 'paused' (their media stopped),
    // or '' (on, or no such track).
    trackOff(participant, kind) {
      const tracks = this.roster.find((p) => p.id === participant)?.tracks?.filter((t) => t.kind === kind) ?? [];
      if (tracks.length === 0) return '';
      if (tracks.every((t) => t.muted)) return 'muted';
      if (tracks.every((t) => t.muted || t.paused)) return 'paused';
      return '';
    }

    isMuted(kind) {
      const tracks = this.stream ? this.stream.getTracks().filter((t) => t.kind === kind) : [];
      return tracks.length > 0 && tracks.every((t) => !t.enabled || t.readyState === 'ended');
    }

    // Best-effort removal on page unload: fetch keepalive survives the page.
    leaveOnUnload() {
      if (this.location && this.state !== 'left') {
        try { fetch(this.location, { method: 'DELETE', headers: this.headers(), keepalive: true }); } catch { /* ignore */ }
        this.state = 'left';
      }
    }

    // `server: false`: the node is known to be gone; do not wait on a
    // DELETE it cannot answer. Otherwise the DELETE waits at most 2 s (a
    // node that dies as the page leaves must not hold the page).
    async leave({ server = true } = {}) {
      const loc = this.location;
      this.setState('left');
      this.location = null;
      if (loc && server) {
        try {
          await fetch(loc, { method: 'DELETE', headers: this.headers(), signal: AbortSignal.timeout(2000) });
        } catch (err) { console.warn('corelay: DELETE failed', err); }
      }
      if (this.dc) try { this.dc.close(); } catch { /* ignore */ }
      if (this.pc) this.pc.close();
      if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
      for (const w of this.e2eeWorkers) w.terminate();
    }
  }

  // -------------------------------------------------------------------------
  // Grid: a tile per filled video slot, hidden <audio> per audio slot.

  // Tiles keep this aspect; the grid picks the column count that makes them
  // largest in the space it has (CorelayGrid.layout).
  const TILE_ASPECT = 16 / 9;
  const ICON_MIC_OFF = '<svg viewBox="0 0 24 24" width="16" height="16" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true"><rect x="9" y="2" width="6" height="12" rx="3"/><path d="M5 10v1a7 7 0 0 0 14 0v-1M12 18v4M8 22h8M3 3l18 18"/></svg>';
  const ICON_CAM_OFF = '<svg viewBox="0 0 24 24" width="16" height="16" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true"><rect x="2" y="6" width="14" height="12" rx="2"/><path d="M16 10l6-4v12l-6-4M3 3l18 18"/></svg>';

  // The column count (and tile width, px) that makes `n` tiles of
  // TILE_ASPECT largest in a `width` x `height` box with gaps `gapX`/`gapY`.
  function bestLayout(n, width, height, gapX, gapY) {
    let best = { cols: 1, width: 0 };
    for (let cols = 1; cols <= n; cols++) {
      const rows = Math.ceil(n / cols);
      const w = Math.min((width - gapX * (cols - 1)) / cols, ((height - gapY * (rows - 1)) / rows) * TILE_ASPECT);
      if (w > best.width) best = { cols, width: w };
    }
    return { cols: best.cols, width: Math.max(0, Math.floor(best.width)) };
  }

  function fmtBitrate(bps) {
    if (!Number.isFinite(bps)) return '-';
    if (bps >= 1e6) return `${(bps / 1e6).toFixed(2)} Mbit/s`;
    return `${Math.round(bps / 1e3)} kbit/s`;
  }

  // One short line for a slot's verdict (docs/api.md, diagnosis): what is
  // wrong and the figure that says so.
  const VERDICT_WORDS = {
    good: 'good',
    idle: 'idle',
    publisher_uplink: "sender's network",
    subscriber_downlink: 'your network',
    server: 'the server',
  };
  function verdictLine(v) {
    const e = v.evidence?.[0];
    const why = e ? `: ${e.figure} ${Number.isInteger(e.value) ? e.value : e.value.toFixed(3)}` : '';
    return `${VERDICT_WORDS[v.verdict] ?? v.verdict}${v.verdict === 'good' || v.verdict === 'idle' ? '' : why}`;
  }

  class CorelayGrid {
    constructor(session, gridEl, audioEl) {
      this.session = session;
      this.gridEl = gridEl;
      this.audioEl = audioEl;
      this.showStats = false;
      this.localTile = null;
      this.prevStats = new Map();  // key -> {bytes, ts}
      this.statsTimer = null;
      session.addEventListener('slots', () => { this.renderSlots(); this.reportViews(); });
      session.addEventListener('dcopen', () => this.reportViews());
      session.addEventListener('roster', () => { this.renderNames(); this.renderRemoteMute(); });
      session.addEventListener('track', () => this.renderRemoteMute());
      session.addEventListener('speaker', () => this.renderSpeaker());
      session.addEventListener('mute', () => this.renderLocalMute());
      // Re-layout when the grid's box changes (window resize, roster or
      // controls wrapping) and when tiles come and go.
      this.onResize = () => this.layout();
      if (typeof ResizeObserver === 'function') {
        this.resizeObserver = new ResizeObserver(this.onResize);
        this.resizeObserver.observe(gridEl);
      } else {
        window.addEventListener('resize', this.onResize);
      }
      this.mutationObserver = new MutationObserver(() => this.layout());
      this.mutationObserver.observe(gridEl, { childList: true });
    }

    // Size the tiles: the column count that makes them largest for the
    // grid's box, keeping TILE_ASPECT (CSS: --cols and --tile-w).
    layout() {
      const el = this.gridEl;
      const n = el.querySelectorAll(':scope > .tile').length;
      const cs = getComputedStyle(el);
      const width = el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      const height = el.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom);
      const { cols, width: w } = bestLayout(Math.max(1, n), width, height, parseFloat(cs.columnGap) || 0, parseFloat(cs.rowGap) || 0);
      if (el.dataset.cols !== String(cols) || el.style.getPropertyValue('--tile-w') !== `${w}px`) {
        el.style.setProperty('--cols', String(cols));
        el.style.setProperty('--tile-w', `${w}px`);
        el.dataset.cols = String(cols);
      }
      this.reportViews();
    }

    // Each video slot's rendered size to the server (slots without a tile
    // are hidden: 0x0).
    reportViews() {
      const s = this.session;
      for (const slot of s.slots) {
        if (slot.kind !== 'video') continue;
        const tile = slot.participant ? this.tileFor(slot.mid) : null;
        const v = tile ? tile.querySelector('video') : null;
        const w = v ? Math.round(v.clientWidth) : 0;
        const h = v ? Math.round(v.clientHeight) : 0;
        s.view(slot.mid, w, h);
      }
    }

    makeTile(kind) {
      const tile = document.createElement('div');
      tile.className = 'tile';
      const video = document.createElement('video');
      video.autoplay = true;
      video.muted = true;  // audio is played by the hidden audio elements
      video.playsInline = true;
      const label = document.createElement('div');
      label.className = 'label';
      const stats = document.createElement('pre');
      stats.className = 'stats';
      stats.hidden = !this.showStats;
      const off = document.createElement('div');
      off.className = 'camera-off';
      off.textContent = 'camera off';
      const badges = document.createElement('div');
      badges.className = 'badges';
      badges.innerHTML = `<span class="badge mic-off" title="microphone muted" role="img" aria-label="microphone muted">${ICON_MIC_OFF}</span>`
        + `<span class="badge cam-off" title="camera off" role="img" aria-label="camera off">${ICON_CAM_OFF}</span>`;
      tile.append(video, off, label, badges, stats);
      tile.dataset.kind = kind;
      return tile;
    }

    addLocal(stream, name) {
      const tile = this.makeTile('local');
      tile.classList.add('local');
      tile.dataset.local = 'true';
      tile.dataset.name = name;
      tile.querySelector('.label').textContent = `${name || 'me'} (you)`;
      const video = tile.querySelector('video');
      video.srcObject = new MediaStream(stream.getVideoTracks());
      video.classList.add('mirror');
      this.localTile = tile;
      this.gridEl.prepend(tile);
      this.renderLocalMute();
    }

    // The muted state of a tile: `mic-muted`, `cam-muted`, and `muted` for
    // either (what the page shows: badges, "camera off").
    setTileMuted(tile, mic, cam) {
      tile.classList.toggle('mic-muted', mic);
      tile.classList.toggle('cam-muted', cam);
      tile.classList.toggle('muted', mic || cam);
    }

    renderLocalMute() {
      if (!this.localTile) return;
      this.setTileMuted(this.localTile, this.session.isMuted('audio'), this.session.isMuted('video'));
    }

    // Each remote tile's camera and microphone state, as the server tells
    // it (the roster and `track` events): declared mutes and media that
    // stopped, never a guess from the pictures or the sound. The reason is
    // kept on the tile (`data-cam-off`; `tiles()` reports it).
    renderRemoteMute() {
      const s = this.session;
      for (const tile of this.gridEl.querySelectorAll('.tile[data-mid]')) {
        const participant = tile.dataset.participant;
        const camOff = s.trackOff(participant, 'video');
        tile.dataset.camOff = camOff;
        this.setTileMuted(tile, s.trackOff(participant, 'audio') !== '', camOff !== '');
      }
    }

    tileFor(mid) {
      return this.gridEl.querySelector(`.tile[data-mid="${CSS.escape(mid)}"]`);
    }

    renderSlots() {
      const s = this.session;
      const seen = new Set();
      for (const slot of s.slots) {
        const t = s.transceiverByMid(slot.mid);
        if (slot.kind === 'audio') {
          this.renderAudioSlot(slot, t);
          continue;
        }
        if (slot.kind !== 'video') continue;
        if (!slot.participant) continue;
        if (!t) { console.warn('corelay: slot for unknown mid', slot.mid); continue; }
        seen.add(slot.mid);
        let tile = this.tileFor(slot.mid);
        if (!tile) {
          tile = this.makeTile('video');
          tile.dataset.mid = slot.mid;
          tile.querySelector('video').srcObject = new MediaStream([t.receiver.track]);
          tile.addEventListener('dblclick', () => this.togglePin(tile));
          this.gridEl.append(tile);
        }
        // A pin ends when its participant leaves the slot.
        if (tile.dataset.pinned === 'true' && tile.dataset.participant !== slot.participant) delete tile.dataset.pinned;
        if (this.pendingPin && this.pendingPin.mid === slot.mid && this.pendingPin.participant === slot.participant) {
          tile.dataset.pinned = 'true';
          this.pendingPin = null;
        }
        tile.dataset.participant = slot.participant;
        tile.dataset.track = slot.track ?? '';
        tile.dataset.name = s.nameOf(slot.participant);
        tile.querySelector('.label').textContent = tile.dataset.name || slot.participant;
      }
      for (const tile of this.gridEl.querySelectorAll('.tile[data-mid]')) {
        if (!seen.has(tile.dataset.mid)) {
          const v = tile.querySelector('video');
          v.srcObject = null;
          tile.remove();
          this.prevStats.delete(tile.dataset.mid);
        }
      }
      this.renderSpeaker();
      this.renderRemoteMute();
      this.gridEl.dataset.tiles = String(this.gridEl.querySelectorAll('.tile[data-mid]').length);
    }

    renderAudioSlot(slot, t) {
      if (!t) return;
      let el = this.audioEl.querySelector(`audio[data-mid="${CSS.escape(slot.mid)}"]`);
      if (!el) {
        el = document.createElement('audio');
        el.autoplay = true;
        el.dataset.mid = slot.mid;
        el.srcObject = new MediaStream([t.receiver.track]);
        this.audioEl.append(el);
        el.play().catch(() => { /* autoplay policy; the Join click usually allows it */ });
      }
      el.dataset.participant = slot.participant ?? '';
    }

    renderNames() {
      for (const tile of this.gridEl.querySelectorAll('.tile[data-participant]')) {
        const name = this.session.nameOf(tile.dataset.participant);
        tile.dataset.name = name;
        tile.querySelector('.label').textContent = name || tile.dataset.participant;
      }
    }

    // The active speaker's tile (the local one too) gets `speaking`.
    renderSpeaker() {
      const speaker = this.session.speaker;
      for (const tile of this.gridEl.querySelectorAll('.tile[data-mid]')) {
        tile.classList.toggle('speaking', !!speaker && tile.dataset.participant === speaker);
      }
      if (this.localTile) this.localTile.classList.toggle('speaking', !!speaker && speaker === this.session.participantId);
    }

    togglePin(tile) {
      if (tile.dataset.pinned === 'true') {
        this.session.unpin(tile.dataset.mid);
        delete tile.dataset.pinned;
      } else {
        this.session.pin(tile.dataset.mid, tile.dataset.participant);
        tile.dataset.pinned = 'true';
      }
    }

    // Show `participant` for sure: pin the slot that already shows them, or
    // else the last video slot that is not pinned yet.
    pinParticipant(participant) {
      const s = this.session;
      const video = s.slots.filter((x) => x.kind === 'video');
      const slot = video.find((x) => x.participant === participant)
        || [...video].reverse().find((x) => this.tileFor(x.mid)?.dataset.pinned !== 'true')
        || video[video.length - 1];
      if (!slot) return null;
      s.pin(slot.mid, participant);
      const tile = this.tileFor(slot.mid);
      if (tile && tile.dataset.participant === participant) tile.dataset.pinned = 'true';
      this.pendingPin = { mid: slot.mid, participant };
      return slot.mid;
    }

    tiles() {
      return [...this.gridEl.querySelectorAll('.tile[data-mid]')].map((tile) => {
        const v = tile.querySelector('video');
        return {
          mid: tile.dataset.mid,
          participant: tile.dataset.participant,
          pinned: tile.dataset.pinned === 'true',
          name: tile.dataset.name,
          track: tile.dataset.track,
          width: v.videoWidth,
          height: v.videoHeight,
          currentTime: v.currentTime,
          paused: v.paused,
          speaking: tile.classList.contains('speaking'),
          muted: tile.classList.contains('muted'),
          micMuted: tile.classList.contains('mic-muted'),
          camMuted: tile.classList.contains('cam-muted'),
          camOff: tile.dataset.camOff ?? '',
        };
      });
    }

    setStatsVisible(on) {
      this.showStats = on;
      for (const el of this.gridEl.querySelectorAll('.tile .stats')) el.hidden = !on;
      clearInterval(this.statsTimer);
      this.statsTimer = null;
      if (on) {
        this.updateStats();
        this.statsTimer = setInterval(() => this.updateStats(), 1000);
      }
    }

    async updateStats() {
      const pc = this.session.pc;
      if (!pc || pc.signalingState === 'closed') return;
      const report = await pc.getStats();
      let rtt = NaN;
      const byMid = new Map();
      const remoteInbound = new Map();  // ssrc -> remote-inbound-rtp (for our outbound)
      report.forEach((r) => {
        if (r.type === 'candidate-pair' && r.nominated && r.state === 'succeeded' && Number.isFinite(r.currentRoundTripTime)) {
          rtt = r.currentRoundTripTime;
        }
        if ((r.type === 'inbound-rtp' || r.type === 'outbound-rtp') && r.kind === 'video') byMid.set(r.mid, r);
        if (r.type === 'remote-inbound-rtp') remoteInbound.set(r.ssrc, r);
      });
      const now = performance.now();
      const line = (key, r) => {
        const bytes = r.type === 'inbound-rtp' ? r.bytesReceived : r.bytesSent;
        const prev = this.prevStats.get(key);
        const bps = prev ? ((bytes - prev.bytes) * 8 * 1000) / (now - prev.ts) : NaN;
        this.prevStats.set(key, { bytes, ts: now });
        const res = r.frameWidth ? `${r.frameWidth}x${r.frameHeight}` : '-';
        const fps = Number.isFinite(r.framesPerSecond) ? r.framesPerSecond.toFixed(0) : '-';
        let loss = '-';
        if (r.type === 'inbound-rtp') {
          const total = (r.packetsReceived || 0) + Math.max(0, r.packetsLost || 0);
          loss = total ? `${((100 * Math.max(0, r.packetsLost || 0)) / total).toFixed(1)}%` : '0%';
        } else {
          const ri = remoteInbound.get(r.ssrc);
          if (ri && Number.isFinite(ri.fractionLost)) loss = `${(100 * ri.fractionLost).toFixed(1)}%`;
        }
        const codec = r.codecId ? (report.get(r.codecId)?.mimeType ?? '').replace('video/', '') : '';
        return [
          `${res} ${fps} fps ${codec}`,
          `${fmtBitrate(bps)}`,
          `loss ${loss}  rtt ${Number.isFinite(rtt) ? `${(rtt * 1000).toFixed(rtt < 0.01 ? 1 : 0)} ms` : '-'}`,
        ].join('\n');
      };
      const verdicts = await this.session.diagnosis();
      for (const tile of this.gridEl.querySelectorAll('.tile[data-mid]')) {
        const r = byMid.get(tile.dataset.mid);
        const v = verdicts.get(tile.dataset.mid);
        tile.dataset.verdict = v?.verdict ?? '';
        tile.querySelector('.stats').textContent = (r ? line(tile.dataset.mid, r) : 'no stats yet') + (v ? `\n${verdictLine(v)}` : '');
      }
      if (this.localTile && this.session.senders.video) {
        const mid = this.session.pc.getTransceivers().find((t) => t.sender === this.session.senders.video)?.mid;
        const r = byMid.get(mid);
        this.localTile.querySelector('.stats').textContent = r ? `sending\n${line('local', r)}` : 'no stats yet';
      }
    }

    clear() {
      this.setStatsVisible(false);
      this.resizeObserver?.disconnect();
      window.removeEventListener('resize', this.onResize);
      this.mutationObserver.disconnect();
      this.gridEl.replaceChildren();
      this.audioEl.replaceChildren();
      this.localTile = null;
      this.prevStats.clear();
    }
  }

  window.CorelaySession = CorelaySession;
  window.CorelayGrid = CorelayGrid;
  window.corelayParams = { intParam, boolParam, params };

  // Expose state for tests and debugging before anyone joins.
  window.corelay = {
    state: 'idle',
    pc: null,
    participantId: null,
    roster: [],
    slots: [],
    events: [],
    tiles: () => [],
  };

  // Make `window.corelay` a live view of a session + grid.
  window.corelayExpose = (session, grid) => {
    window.corelay = {
      session,
      grid,
      get state() { return session.state; },
      get error() { return session.error; },
      get pc() { return session.pc; },
      get dc() { return session.dc; },
      get participantId() { return session.participantId; },
      get location() { return session.location; },
      get roster() { return session.roster; },
      get slots() { return session.slots; },
      get speaker() { return session.speaker; },
      get events() { return session.events; },
      get offer() { return session.offer; },
      get answer() { return session.answer; },
      // The ICE servers the session was given (GET /api/v1/ice-servers).
      get iceServers() { return session.iceServers; },
      // ICE restarts the session made by itself (reconnection).
      get restarts() { return session.restarts ?? 0; },
      // Frames the E2EE transforms encrypted, decrypted and could not open
      // (null without ?e2ee).
      get e2ee() { return session.e2ee ? { ...session.e2eeCounts } : null; },
      tiles: () => grid.tiles(),
      leave: () => session.leave(),
    };
  };

  // -------------------------------------------------------------------------
  // Room page (index.html).

  const form = document.getElementById('join-form');
  if (!form) return;

  const $ = (id) => document.getElementById(id);
  const statusEl = $('status');
  const setStatus = (text, cls) => {
    statusEl.textContent = text;
    statusEl.className = `status ${cls || ''}`;
  };

  if (params.get('room')) $('room').value = params.get('room');
  $('name').value = params.get('name') || localStorage.getItem('corelay.name') || '';
  if (boolParam('recvonly', false)) $('recvonly').checked = true;

  let session = null;
  let grid = null;

  // The "● REC" mark while the room is recorded; its title says why if
  // the recorder failed.
  function renderRecording() {
    const r = session?.recording;
    const mark = $('rec');
    mark.hidden = !r;
    mark.classList.toggle('failed', !!r?.error);
    mark.title = r?.error ? `recording failed: ${r.error}` : 'this room is being recorded';
  }

  function renderRoster() {
    const list = $('roster-list');
    list.replaceChildren(...session.roster.map((p) => {
      const li = document.createElement('li');
      li.textContent = p.name || p.id;
      li.dataset.participant = p.id;
      if (p.id === session.participantId) {
        li.classList.add('me');
      } else if ((p.tracks || []).some((t) => t.kind === 'video')) {
        // Click a name to pin that participant's video into a slot.
        const btn = document.createElement('button');
        btn.type = 'button';
        btn.className = 'pin';
        btn.title = `pin ${p.name || p.id}`;
        btn.textContent = 'pin';
        btn.addEventListener('click', () => grid?.pinParticipant(p.id));
        li.append(' ', btn);
      }
      return li;
    }));
    if (session.viewers) {
      const li = document.createElement('li');
      li.className = 'viewers';
      li.textContent = `+ ${session.viewers} watching`;
      list.append(li);
    }
    $('roster').hidden = false;
  }

  // Chat: application messages on the topic `chat` (docs/api.md), and the
  // server's refusals of our own.
  function chatLine(who, text, cls) {
    const li = document.createElement('li');
    if (cls) li.className = cls;
    const b = document.createElement('b');
    b.textContent = who;
    li.append(b, ' ', text);
    const log = $('chat-log');
    log.append(li);
    while (log.children.length > 200) log.firstElementChild.remove();
    li.scrollIntoView({ block: 'nearest' });
  }

  function onChatMessage(e) {
    const m = e.detail;
    if (m.topic !== 'chat') return;
    const text = typeof m.payload?.text === 'string' ? m.payload.text : JSON.stringify(m.payload);
    chatLine(`${m.name || m.from}:`, text);
  }

  function onServerError(e) {
    chatLine('server:', `${e.detail.request} refused (${e.detail.reason})`, 'error');
  }

  function sendChat(ev) {
    ev.preventDefault();
    const input = $('chat-text');
    const text = input.value.trim();
    if (!text || !session) return;
    session.send({ type: 'message', topic: 'chat', payload: { text } });
    chatLine('you:', text, 'me');
    input.value = '';
  }

  // In a cluster: this page on node `base` (its origin), joining the same
  // room as the same name at once; `nodes`, the ones to try after it (the
  // page's `?nodes=`), so that a node that died is skipped.
  function moveTo(base, nodes) {
    const u = new URL('/', base);
    for (const [k, v] of params) if (!['join', 'nodes'].includes(k)) u.searchParams.set(k, v);
    u.searchParams.set('room', $('room').value.trim());
    u.searchParams.set('name', $('name').value.trim());
    u.searchParams.set('join', '1');
    const rest = (nodes || []).filter((n) => n !== base);
    if (rest.length) u.searchParams.set('nodes', rest.join(','));
    location.href = u.href;
  }
  // The nodes this page was told to try next (after one that died).
  const nextNodes = (params.get('nodes') || '').split(',').map((n) => n.trim()).filter(Boolean);

  async function join(ev) {
    if (ev) ev.preventDefault();
    if (session) return;
    const room = $('room').value.trim();
    const name = $('name').value.trim();
    if (!room) { setStatus('enter a room name', 'error'); return; }
    localStorage.setItem('corelay.name', name);
    const recvOnly = $('recvonly').checked;
    $('join').disabled = true;
    document.body.dataset.state = 'joining';
    setStatus('joining…');

    let stream = null;
    try {
      if (!recvOnly) {
        // ?video=WxH picks the camera resolution (default 640x360).
        const [w, h] = (params.get('video') || '640x360').split('x').map((n) => parseInt(n, 10));
        stream = await navigator.mediaDevices.getUserMedia({
          audio: true,
          video: { width: { ideal: w || 640 }, height: { ideal: h || 360 }, frameRate: { ideal: 30 } },
        });
      }
    } catch (err) {
      setStatus(`camera/microphone: ${err.message}`, 'error');
      $('join').disabled = false;
      document.body.dataset.state = 'idle';
      return;
    }

    // ?e2ee=PASSPHRASE: the same passphrase on every page of the room.
    let e2ee = null;
    if (params.get('e2ee')) {
      try {
        e2ee = await e2eeKey(params.get('e2ee'), room);
      } catch (err) {
        stream?.getTracks().forEach((t) => t.stop());
        setStatus(err.message, 'error');
        $('join').disabled = false;
        document.body.dataset.state = 'idle';
        return;
      }
    }

    // follow=0: a node that sends the join elsewhere says where (409
    // `elsewhere`), and this page moves there.
    const q = new URLSearchParams({ name, follow: '0' });
    session = new CorelaySession({
      e2ee,
      endpoint: `/api/v1/rooms/${encodeURIComponent(room)}/participants?${q}`,
      name,
      stream,
      videoSlots: intParam('slots', 3, 0, 16),
      audioSlots: intParam('audioslots', 3, 0, 16),
      absCaptureTime: boolParam('abscapture', true),
      simulcast: boolParam('simulcast', true),
      codec: /^(vp8|vp9|av1|h264)$/i.test(params.get('codec') ?? '') ? params.get('codec') : null,
      svc: /^[LS][1-3]T[1-3](_KEY)?$/.test(params.get('svc') ?? '') ? params.get('svc') : null,
    });
    grid = new CorelayGrid(session, $('grid'), $('audio-sinks'));
    window.corelayExpose(session, grid);
    if (stream) grid.addLocal(stream, name);

    session.addEventListener('state', (e) => {
      document.body.dataset.state = e.detail.state;
      // In a cluster, a node that died takes its calls with it: join again
      // through the next node it named.
      if (e.detail.state === 'failed' && session?.nodes?.length) {
        const was = session;
        leave().then(() => moveTo(was.nodes[0], was.nodes));
        return;
      }
      if (e.detail.state === 'connected') setStatus(`connected as ${name || session.participantId}${e2ee ? ', end-to-end encrypted' : ''}`, 'ok');
      else if (e.detail.state === 'failed' || e.detail.state === 'error') setStatus(e.detail.detail || e.detail.state, 'error');
    });
    // In a cluster: a connection that stops answering may be a node that
    // died. If the node does not answer HTTP either, move to the next one
    // at once (not after ICE's failure timeout, tens of seconds), without
    // waiting on a DELETE the dead node cannot answer.
    let probing = false;
    const probeNode = async (s) => {
      if (probing || !s?.nodes?.length) return;
      probing = true;
      const alive = await fetch('/healthz', { signal: AbortSignal.timeout(1000) }).then(() => true, () => false);
      probing = false;
      if (alive || session !== s) return;
      setStatus('this node is not answering: moving to another…');
      await leave({ server: false });
      moveTo(s.nodes[0], s.nodes);
    };
    session.addEventListener('connection', (e) => {
      if (e.detail === 'disconnected') probeNode(session);
    });
    // Chromium calls a connection `disconnected` only ~5 s after its node
    // went silent; the session says `silent` after 1 s without a byte on a
    // connection that was receiving steadily: reason enough to ask the
    // node's HTTP whether it is still there.
    const watched = session;
    watched.addEventListener('silent', () => {
      if (watched.nodes?.length) probeNode(watched);
    });
    session.addEventListener('roster', renderRoster);
    session.addEventListener('recording', renderRecording);
    session.addEventListener('message', onChatMessage);
    session.addEventListener('error', onServerError);
    $('chat').hidden = false;
    // The server no longer knows this participant (a restart got 404):
    // join again, with the same name and token (so the same identity).
    session.addEventListener('gone', async () => {
      await leave();
      setStatus('the connection was lost; joining again…');
      join();
    });
    session.addEventListener('bye', async (e) => {
      const reason = e.detail.reason;
      const was = session;
      await leave();
      // Its node drains (a rolling upgrade): join again on another node.
      if (reason === 'node_draining' && was?.nodes?.length) {
        setStatus('this node is draining: moving to another…');
        moveTo(was.nodes[0], was.nodes);
        return;
      }
      // `replaced`: the same identity (token) joined again, in another tab
      // or device; that session is the live one, so do not rejoin.
      setStatus(reason === 'replaced'
        ? 'replaced: this identity joined the room again elsewhere'
        : `removed by the server (${reason})`, 'error');
    });

    form.hidden = true;
    $('controls').hidden = false;
    $('room-label').textContent = room;
    // The viewer takes the same token (it needs the subscribe right).
    const watchQuery = params.get('token') ? `?${new URLSearchParams({ token: params.get('token') })}` : '';
    $('watch-link').href = `/watch/${encodeURIComponent(room)}${watchQuery}`;
    $('mute-audio').disabled = $('mute-video').disabled = !stream;
    const u = new URL(location.href);
    u.searchParams.set('room', room);
    history.replaceState(null, '', u);

    try {
      await session.start();
      setStatus('connecting…');
    } catch (err) {
      const failed = session;
      await leave();
      // Sent elsewhere by this node (full, draining): join there.
      if (failed.elsewhere) {
        setStatus(`this node sends the room to ${failed.elsewhere}: moving…`);
        moveTo(failed.elsewhere, nextNodes);
        return;
      }
      // This node is not answering: the next one the cluster named.
      if (nextNodes.length && err instanceof TypeError) {
        setStatus(`cannot reach this node: trying ${nextNodes[0]}…`);
        moveTo(nextNodes[0], nextNodes);
        return;
      }
      const msg = failed.error || err.message;
      setStatus(`join failed: ${msg}`, 'error');
      window.corelay.error = msg;
      window.corelay.state = 'error';
      document.body.dataset.state = 'error';
    }
  }

  async function leave(opts) {
    if (!session) return;
    const s = session;
    session = null;
    grid.clear();
    await s.leave(opts);
    $('roster').hidden = true;
    $('rec').hidden = true;
    $('chat').hidden = true;
    $('chat-log').replaceChildren();
    form.hidden = false;
    $('controls').hidden = true;
    $('join').disabled = false;
    $('mute-audio').setAttribute('aria-pressed', 'false');
    $('mute-audio').textContent = 'Mute mic';
    $('mute-video').setAttribute('aria-pressed', 'false');
    $('mute-video').textContent = 'Stop camera';
    $('toggle-stats').setAttribute('aria-pressed', 'false');
    $('toggle-stats').textContent = 'Show stats';
    document.body.dataset.state = 'left';
    setStatus('left the room');
    window.corelay = { state: 'left', pc: null, participantId: null, roster: [], slots: [], events: [], tiles: () => [] };
  }

  function toggleMute(btn, kind, onText, offText) {
    const muted = btn.getAttribute('aria-pressed') !== 'true';
    session?.setMuted(kind, muted);
    btn.setAttribute('aria-pressed', String(muted));
    btn.textContent = muted ? offText : onText;
  }

  form.addEventListener('submit', join);
  $('chat-form').addEventListener('submit', sendChat);
  $('leave').addEventListener('click', () => leave());
  $('mute-audio').addEventListener('click', (e) => toggleMute(e.currentTarget, 'audio', 'Mute mic', 'Unmute mic'));
  $('mute-video').addEventListener('click', (e) => toggleMute(e.currentTarget, 'video', 'Stop camera', 'Start camera'));
  $('toggle-stats').addEventListener('click', (e) => {
    const on = e.currentTarget.getAttribute('aria-pressed') !== 'true';
    e.currentTarget.setAttribute('aria-pressed', String(on));
    e.currentTarget.textContent = on ? 'Hide stats' : 'Show stats';
    grid?.setStatsVisible(on);
  });
  window.addEventListener('pagehide', () => session?.leaveOnUnload());

  if (boolParam('join', false)) join();
})();
