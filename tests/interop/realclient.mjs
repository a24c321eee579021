// Shared helpers for the real-client tests (clients that are not a browser):
// a veth pair in the test's network namespace, the libgupnp-igd stub that
// lets simple-whip-client start, and a runner for simple-whip-client.
//
// These run inside the loopback-only namespace that scripts/test-browser
// creates (unshare -n), so the veth pair is private to the test run.

import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { OUT, sleep } from '../browser/harness.mjs';

export const WHIP_CLIENT = process.env.WHIP_CLIENT || '/usr/bin/whip-client';

// libnice (GStreamer's ICE agent) leaves loopback interfaces out of its
// candidates, and a namespace made by `unshare -n` has nothing else. A veth
// pair gives it two ordinary addresses; the server advertises VETH.server
// (--public-ip), and a client gathering on the other end pairs with it.
export const VETH = { a: 'cv0', b: 'cv1', server: '10.77.0.1', client: '10.77.0.2', prefix: 24 };

function ip(...args) {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

// Create the veth pair (unless it is there already). Resolves with a function
// that removes it again (only when this call made it), so that later test
// files in the same namespace see loopback only, as before. Throws with a
// readable reason when it cannot (no `ip`, no CAP_NET_ADMIN).
export async function setupVeth() {
  try {
    ip('link', 'show', VETH.a);
    return async () => {};
  } catch { /* not there: make it */ }
  try {
    ip('link', 'add', VETH.a, 'type', 'veth', 'peer', 'name', VETH.b);
    ip('addr', 'add', `${VETH.server}/${VETH.prefix}`, 'dev', VETH.a);
    ip('addr', 'add', `${VETH.client}/${VETH.prefix}`, 'dev', VETH.b);
    ip('link', 'set', VETH.a, 'up');
    ip('link', 'set', VETH.b, 'up');
  } catch (err) {
    try { ip('link', 'del', VETH.a); } catch { /* ignore */ }
    throw new Error(`cannot create the veth pair ${VETH.a}/${VETH.b} (ip link add … type veth): ${String(err.stderr || err.message).trim()}`);
  }
  // The addresses are usable once the links are up (no DAD for IPv4).
  for (let i = 0; i < 50; i++) {
    if (/state UP|LOWER_UP/.test(ip('link', 'show', VETH.a))) break;
    await sleep(50);
  }
  return async () => {
    try { ip('link', 'del', VETH.a); } catch { /* gone already */ }
  };
}

// Symbols of libgupnp-igd-1.0.so.4 that libnice 0.1.21 imports
// (`nm -D --undefined-only /usr/lib/x86_64-linux-gnu/libnice.so.10`):
// gupnp_simple_igd_thread_new, _add_port, _remove_port_local, _get_type.
// At run time libnice calls only gupnp_simple_igd_thread_new (in
// nice_agent_gather_candidates, UPnP on by default) and, getting NULL, logs
// "Error creating UPnP Simple IGD agent" and goes on without UPnP; the other
// functions are only reached with a non-NULL object. The GType functions
// return G_TYPE_OBJECT (a valid type) in case a cast check ever runs.
const IGD_STUB_C = `
extern unsigned long g_object_get_type(void);
void *gupnp_simple_igd_thread_new(void) { return 0; }
void *gupnp_simple_igd_new(void *main_context) { (void)main_context; return 0; }
unsigned long gupnp_simple_igd_get_type(void) { return g_object_get_type(); }
unsigned long gupnp_simple_igd_thread_get_type(void) { return g_object_get_type(); }
void gupnp_simple_igd_add_port(void *self, const char *protocol, unsigned external_port,
    const char *local_ip, unsigned local_port, unsigned lease_duration, const char *description) {
  (void)self; (void)protocol; (void)external_port; (void)local_ip; (void)local_port;
  (void)lease_duration; (void)description;
}
void gupnp_simple_igd_remove_port(void *self, const char *protocol, unsigned external_port) {
  (void)self; (void)protocol; (void)external_port;
}
void gupnp_simple_igd_remove_port_local(void *self, const char *protocol,
    const char *local_ip, unsigned local_port) {
  (void)self; (void)protocol; (void)local_ip; (void)local_port;
}
`;

// simple-whip-client links libsoup 2.4; libnice pulls in libgupnp-igd, which
// links libgupnp-1.6 and so libsoup 3. With both loaded, libsoup aborts at
// start-up: "libsoup2 symbols detected. Using libsoup2 and libsoup3 in the
// same process is not supported." A stub libgupnp-igd-1.0.so.4 (no UPnP, no
// libsoup 3) on LD_LIBRARY_PATH avoids it. Built with gcc into a temp dir;
// resolves with that dir.
export function buildIgdStub() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corelay-igd-stub-'));
  const src = path.join(dir, 'igd-stub.c');
  fs.writeFileSync(src, IGD_STUB_C);
  try {
    execFileSync('gcc', ['-shared', '-fPIC', '-O2', '-Wall', '-Wl,-soname,libgupnp-igd-1.0.so.4',
      '-o', path.join(dir, 'libgupnp-igd-1.0.so.4'), src], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    throw new Error(`gcc could not build the libgupnp-igd stub: ${String(err.stderr || err.message).trim()}`);
  }
  return dir;
}

// Why simple-whip-client cannot run here (a string), or null when it can.
export function whipClientUnavailable() {
  if (!fs.existsSync(WHIP_CLIENT)) {
    return `no simple-whip-client at ${WHIP_CLIENT} (scripts/test-browser installs Debian's simple-whip-client with apt; set WHIP_CLIENT to use another)`;
  }
  for (const [cmd, why] of [['gcc', 'to build the libgupnp-igd stub'], ['ip', 'to make the veth pair (iproute2)']]) {
    try {
      execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    } catch {
      return `no ${cmd} (needed ${why})`;
    }
  }
  return null;
}

// GStreamer pipelines for simple-whip-client's -V/-A: 320x240 30 fps test
// pattern, a keyframe every second; Opus tone. The client uses
// bundle-policy=max-bundle with both, and bundle-policy=none with video
// alone (one m-line, no a=group:BUNDLE: refused by the server until 72f3fe6).
export const WHIP_PIPELINES = {
  h264: 'videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 ! videoconvert '
    + '! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate=600 ! video/x-h264,profile=constrained-baseline '
    + '! rtph264pay config-interval=-1 pt=96 ! application/x-rtp,media=video,encoding-name=H264,payload=96',
  vp8: 'videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 ! videoconvert '
    + '! vp8enc deadline=1 cpu-used=8 keyframe-max-dist=30 target-bitrate=600000 '
    + '! rtpvp8pay pt=97 ! application/x-rtp,media=video,encoding-name=VP8,payload=97',
  opus: 'audiotestsrc is-live=true wave=sine freq=400 ! audioconvert ! audioresample ! queue '
    + '! opusenc ! rtpopuspay pt=111 ! application/x-rtp,media=audio,encoding-name=OPUS,payload=111',
};

// Run simple-whip-client against `url` (http://…/whip/{room}) with the given
// video codec and Opus audio; stdout+stderr go to OUT/{label}-{pid}.log.
// GST_DEBUG=dtls*:3 puts OpenSSL's reason for a DTLS failure into that log.
export function whipClient({ url, codec, stubDir, label, audio = true }) {
  const logPath = path.join(OUT, `${label}-${process.pid}.log`);
  const log = fs.openSync(logPath, 'w');
  const args = ['-u', url, '-o', '-l', '5', '-V', WHIP_PIPELINES[codec]];
  if (audio) args.push('-A', WHIP_PIPELINES.opus);
  fs.writeSync(log, `$ ${WHIP_CLIENT} ${args.map((a) => (/\s/.test(a) ? `'${a}'` : a)).join(' ')}\n`);
  const child = spawn(WHIP_CLIENT, args, {
    stdio: ['ignore', log, log],
    env: {
      ...process.env,
      LD_LIBRARY_PATH: [stubDir, process.env.LD_LIBRARY_PATH].filter(Boolean).join(':'),
      GST_DEBUG: process.env.GST_DEBUG || 'dtls*:3',
      GST_DEBUG_NO_COLOR: '1',
    },
  });
  let code = null;
  const exited = new Promise((resolve) => child.on('exit', (c, sig) => {
    code = c ?? sig;
    try { fs.closeSync(log); } catch { /* ignore */ }
    resolve(code);
  }));
  const text = () => fs.readFileSync(logPath, 'utf8');
  return {
    child,
    logPath,
    exited,
    log: text,
    running: () => code === null,
    // Wait until the client's log matches `re` (or it exits first).
    async waitLog(re, what, timeout = 15000) {
      const deadline = Date.now() + timeout;
      for (;;) {
        const m = re.exec(text());
        if (m) return m;
        if (code !== null) throw new Error(`simple-whip-client exited (${code}) before ${what}; log:\n${text().slice(-4000)}`);
        if (Date.now() > deadline) throw new Error(`simple-whip-client: no ${what} within ${timeout} ms; log:\n${text().slice(-4000)}`);
        await sleep(100);
      }
    },
    // SIGINT: the client sends DELETE to its resource URL and exits.
    async stop(timeout = 5000) {
      if (code !== null) return code;
      child.kill('SIGINT');
      const t = setTimeout(() => child.kill('SIGKILL'), timeout);
      const c = await exited;
      clearTimeout(t);
      return c;
    },
  };
}
