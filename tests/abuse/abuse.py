"""corelay's abuse suite (scripts/abuse is its entry point).

Replays hostile requests and datagrams against a live release corelay on
127.0.0.1 while a legitimate call (corelay-bench rooms) runs, and prints one
row per attack: the HTTP result, whether the server is still up (process
alive, /healthz 200 with every shard, every shard's loop turning, no panic in
its log), the legitimate call's loss and e2e P99 during the attack against
the quiet window just before it, the server's RSS and open descriptors
before and after, the bytes its log grew by during the attack, and a verdict
with its reason. Exits 1 if any row fails.

    python3 tests/abuse/abuse.py          # what scripts/abuse runs (after building)
    ONLY=garbage,pins python3 tests/abuse/abuse.py

Environment (defaults in brackets):
  CORELAY_BIN [$CARGO_TARGET_DIR/release/corelay]   server under test
  BENCH_BIN [.../release/corelay-bench]   ATTACKER_BIN [.../release/examples/attacker]
  CARGO_TARGET_DIR [target]
  OUT [abuse-out/<date>]      server.log, bench/ (timeseries.csv ...), results.json, report.txt
  ONLY [all rows]  comma-separated substrings of row names
  SHARDS [2]  QUIET [3] seconds of quiet before each attack (its baseline window)
  CALL_SECONDS [auto]  hold time of the legitimate call (must outlast the attacks)
  CONNECT_TIMEOUT [5s] passed as --connect-timeout when the server has it
  SLOW_HOLD [15] seconds the slow-header connections are held open
  STUN_SOURCES [3000]  source ports of the many-address attack
  LOSS_TOL [0.02]  P99_FACTOR [3]  P99_ABS_MS [100]   when the legit call counts as hurt
  CHANNEL_RSS_MIB [16]  how much the server may grow while it refuses 200 data
                        channels with 60 KB labels

Stdlib only. Loopback only (127.0.0.0/8: some attacks come from 127.0.0.2 and
up, so that the per-address caps do not refuse the suite's own requests);
every loop is bounded in count and time. The pure parts (durations, the
verdict, the table, SDP surgery, packet builders) are unit-tested in
test_abuse.py (python3 -m unittest discover -s tests/abuse).
"""
import base64, hashlib, hmac, http.client, json, os, random, re, resource, signal, socket
import struct, subprocess, sys, threading, time

# Configuration: defaults here, set from the environment by configure()
# (called by main(); importing the module starts nothing and reads nothing).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_BIN = BENCH_BIN = ATTACKER_BIN = OUT = None
SHARDS = 2
QUIET = 3.0
CONNECT_TIMEOUT = "5s"
SLOW_HOLD_ENV = None
STUN_SOURCES = 3000
LOSS_TOL = 0.02
P99_FACTOR = 3.0
P99_ABS_MS = 100.0
CHANNEL_RSS_MIB = 16.0
ONLY = []
T0 = time.monotonic()
SERVER_HELP = BENCH_HELP = ""
AUTH = BENCH_AUTH = HAS_CONNECT_TIMEOUT = False
SHUTDOWN_DEADLINE = 10.0
MAX_ADDRS = MAX_RPS = HEADER_TIMEOUT = None
WRITE_TIMEOUT = 10.0
ICE_TCP_AUTH = 5.0
ICE_TCP_PER_IP = 32
HTTP_PER_IP = 64
SLOW_HOLD = 15.0
SECRET = ""
HTTP_PORT = 0
UDP_BASE = 0
URL = ""

def log(msg):
    print(f"[abuse {time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)

def secs(text, default):
    """Seconds in a duration like "5s", "250ms", "2m", "1h" or "7" (seconds);
    `default` for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
    if not m:
        return default
    v = float(m.group(1))
    return v * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]

def helptext(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
    except Exception:
        return ""

def has_flag(text, flag):
    return re.search(r"(^|\s)" + re.escape(flag) + r"[\s=<]", text, re.M) is not None

def flag_default(text, flag):
    """The [default: X] clap prints in the paragraph of FLAG, if any."""
    m = re.search(r"^[ \t]*(?:-\w, )?(" + re.escape(flag) + r")[\s=<,]", text, re.M)
    if not m:
        return None
    i = m.start(1)
    nxt = re.search(r"\n\s+--", text[i + len(flag):])
    para = text[i: i + len(flag) + (nxt.start() if nxt else len(text))]
    m = re.search(r"\[default: ([^\]]+)\]", para)
    return m.group(1) if m else None

def int_or(text, default):
    try:
        return int(text)
    except (TypeError, ValueError):
        return default

def configure(env):
    """Read the environment and the binaries' --help; exits if one is missing."""
    global SERVER_BIN, BENCH_BIN, ATTACKER_BIN, OUT, SHARDS, QUIET, CONNECT_TIMEOUT
    global SLOW_HOLD_ENV, STUN_SOURCES, LOSS_TOL, P99_FACTOR, P99_ABS_MS, CHANNEL_RSS_MIB, ONLY
    global SERVER_HELP, BENCH_HELP, AUTH, BENCH_AUTH, HAS_CONNECT_TIMEOUT, SHUTDOWN_DEADLINE
    global MAX_ADDRS, MAX_RPS, HEADER_TIMEOUT, WRITE_TIMEOUT, ICE_TCP_AUTH, ICE_TCP_PER_IP
    global HTTP_PER_IP, SLOW_HOLD, SECRET, ROOT
    ROOT = env.get("ABUSE_ROOT") or ROOT
    target = env.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    SERVER_BIN = env.get("CORELAY_BIN") or os.path.join(target, "release", "corelay")
    BENCH_BIN = env.get("BENCH_BIN") or os.path.join(target, "release", "corelay-bench")
    ATTACKER_BIN = env.get("ATTACKER_BIN") or os.path.join(target, "release", "examples", "attacker")
    OUT = env.get("OUT") or os.path.join(ROOT, "abuse-out", time.strftime("%Y%m%d-%H%M%S"))
    SHARDS = int(env.get("SHARDS", "2"))
    QUIET = float(env.get("QUIET", "3"))
    CONNECT_TIMEOUT = env.get("CONNECT_TIMEOUT", "5s")
    SLOW_HOLD_ENV = env.get("SLOW_HOLD")
    STUN_SOURCES = int(env.get("STUN_SOURCES", "3000"))
    LOSS_TOL = float(env.get("LOSS_TOL", "0.02"))
    P99_FACTOR = float(env.get("P99_FACTOR", "3"))
    P99_ABS_MS = float(env.get("P99_ABS_MS", "100"))
    CHANNEL_RSS_MIB = float(env.get("CHANNEL_RSS_MIB", "16"))
    ONLY = only_filter(env.get("ONLY", ""))
    for b in (SERVER_BIN, BENCH_BIN, ATTACKER_BIN):
        if not os.access(b, os.X_OK):
            sys.exit(f"missing {b} (build it, or set CORELAY_BIN/BENCH_BIN/ATTACKER_BIN)")
    os.makedirs(OUT, exist_ok=True)
    SERVER_HELP = helptext(SERVER_BIN, "--help")
    BENCH_HELP = helptext(BENCH_BIN, "--help")
    AUTH = has_flag(SERVER_HELP, "--auth-secret")
    BENCH_AUTH = has_flag(BENCH_HELP, "--auth-secret")
    HAS_CONNECT_TIMEOUT = has_flag(SERVER_HELP, "--connect-timeout")
    SHUTDOWN_DEADLINE = secs(flag_default(SERVER_HELP, "--shutdown-timeout") or "10s", 10.0)
    MAX_ADDRS = flag_default(SERVER_HELP, "--max-addrs-per-participant")
    MAX_RPS = flag_default(SERVER_HELP, "--max-requests-per-second")
    HEADER_TIMEOUT = flag_default(SERVER_HELP, "--http-header-timeout")
    WRITE_TIMEOUT = secs(flag_default(SERVER_HELP, "--http-write-timeout") or "10s", 10.0)
    ICE_TCP_AUTH = secs(flag_default(SERVER_HELP, "--ice-tcp-auth-timeout") or "5s", 5.0)
    ICE_TCP_PER_IP = int_or(flag_default(SERVER_HELP, "--ice-tcp-max-conns-per-ip"), 32)
    HTTP_PER_IP = int_or(flag_default(SERVER_HELP, "--http-max-conns-per-ip"), 64)
    # Hold slow-header connections past the server's header timeout (if it says one).
    SLOW_HOLD = (float(SLOW_HOLD_ENV) if SLOW_HOLD_ENV
                 else min(30.0, secs(HEADER_TIMEOUT or "10s", 10.0) + 5.0))
    if AUTH and not BENCH_AUTH:
        log("corelay has --auth-secret but corelay-bench does not: running WITHOUT auth "
            "(the authorization rows will fail)")
        AUTH = False
    SECRET = hashlib.sha256(os.urandom(16)).hexdigest()

def only_filter(text):
    """ONLY=a,b -> ["a", "b"] (empty: every row)."""
    return [x.strip() for x in (text or "").split(",") if x.strip()]

def selected(name, only):
    """Whether row `name` runs under the ONLY filter (substring match)."""
    return not only or any(o in name for o in only)

# ------------------------------------------------------------------ tokens

def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

def claims_for(room, identity, admin=False, ttl=3600, now=None):
    """corelay's token claims (sub, room, admin, exp, iat)."""
    now = int(time.time()) if now is None else now
    claims = {"sub": identity, "exp": now + ttl, "iat": now}
    if room is not None:
        claims["room"] = room
    if admin:
        claims["admin"] = True
    return claims

def jwt_hs256(secret, claims):
    """An HS256 JWT of `claims` signed with `secret`."""
    head = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = b64u(json.dumps(claims, separators=(",", ":")).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64u(sig)}"

def mint(room, identity, admin=False, ttl=3600):
    """A token for the suite's server (None when it runs without auth)."""
    if not AUTH:
        return None
    return jwt_hs256(SECRET, claims_for(room, identity, admin, ttl))

def auth(token):
    return {"Authorization": f"Bearer {token}"} if token else {}

# ------------------------------------------------------------------ ports, http

def free_tcp_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

def free_udp_base(n):
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for i in range(n):
                u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(u)
                u.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            pass
        finally:
            for u in socks:
                u.close()
    sys.exit("no free UDP ports")

def new_ports():
    """Free ports for a (new) server: HTTP, and SHARDS consecutive UDP ports
    (the TCP ones of the same numbers are ICE-TCP's)."""
    global HTTP_PORT, UDP_BASE, URL
    HTTP_PORT = free_tcp_port()
    UDP_BASE = free_udp_base(SHARDS)
    URL = f"http://127.0.0.1:{HTTP_PORT}"

def req(method, path, headers=None, body=None, timeout=10.0):
    """(status or None, {header: value}, body text, seconds). Never raises."""
    t = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", HTTP_PORT, timeout=timeout)
        h = {"Connection": "close"}
        h.update(headers or {})
        if isinstance(body, str):
            body = body.encode()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read(4 << 20)
        hs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hs, data.decode("utf-8", "replace"), time.monotonic() - t
    except Exception as e:
        return None, {}, f"{type(e).__name__}: {e}", time.monotonic() - t

def status_str(st, body=""):
    if st is None:
        return "no answer"
    code = ""
    try:
        code = json.loads(body).get("code", "")
    except Exception:
        pass
    return f"{st} {code}".strip()

def req_stream(method, path, headers, body, timeout=30.0):
    """A request with a big body over a raw socket, reading while sending, so
    that an early answer (413, then a closed connection) is seen rather than
    lost in a reset. (status or None, {header: value}, body text, seconds, bytes sent)."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
            + "Connection: close\r\n\r\n").encode()
    t = time.monotonic()
    sent, resp = 0, b""
    try:
        s = socket.create_connection(("127.0.0.1", HTTP_PORT), timeout=timeout)
    except OSError as e:
        return None, {}, str(e), 0.0, 0
    try:
        s.sendall(head)
        s.setblocking(False)
        while sent < len(body) and time.monotonic() - t < timeout:
            try:
                got = s.recv(65536)
                if got == b"":
                    break
                resp += got
            except BlockingIOError:
                pass
            try:
                sent += s.send(body[sent: sent + 65536])
            except BlockingIOError:
                time.sleep(0.002)
            except OSError:
                break
        s.setblocking(True)
        s.settimeout(max(1.0, timeout - (time.monotonic() - t)))
        while True:
            if b"\r\n\r\n" in resp:
                h, _, rest = resp.partition(b"\r\n\r\n")
                m = re.search(rb"(?im)^content-length: *(\d+)", h)
                if not m or len(rest) >= int(m.group(1)):
                    break
            got = s.recv(65536)
            if not got:
                break
            resp += got
    except OSError:
        pass
    finally:
        s.close()
    dt = time.monotonic() - t
    m = re.match(rb"HTTP/1\.[01] (\d{3})", resp)
    if not m:
        return None, {}, "no answer (connection closed)", dt, sent
    h, _, rest = resp.partition(b"\r\n\r\n")
    hs = {}
    for line in h.split(b"\r\n")[1:]:
        k, _, v = line.decode("latin-1").partition(":")
        hs[k.strip().lower()] = v.strip()
    return int(m.group(1)), hs, rest.decode("utf-8", "replace"), dt, sent

# ------------------------------------------------------------------ the server

class Server:
    count = 0

    def __init__(self):
        Server.count += 1
        args = [SERVER_BIN, "--http", f"127.0.0.1:{HTTP_PORT}", "--udp-port", str(UDP_BASE),
                "--shards", str(SHARDS), "--no-pin", "--public-ip", "127.0.0.1",
                "--bind-ip", "127.0.0.1", "--metrics", "off", "--log", "warn"]
        if AUTH:
            args += ["--auth-secret", SECRET]
        if HAS_CONNECT_TIMEOUT:
            args += ["--connect-timeout", CONNECT_TIMEOUT]
        self.args = args
        self.log_path = os.path.join(OUT, "server.log" if Server.count == 1 else f"server-{Server.count}.log")
        self.logf = open(self.log_path, "wb")
        self.p = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        self.pid = self.p.pid
        for _ in range(200):
            st, _, _, _ = req("GET", "/healthz", timeout=1)
            if st == 200:
                return
            if self.p.poll() is not None:
                sys.exit(f"corelay exited at start; see {self.log_path}")
            time.sleep(0.1)
        sys.exit("corelay did not come up")

    def alive(self):
        return self.p.poll() is None

    def proc(self, key):
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        except OSError:
            pass
        return None

    def rss_mib(self):
        kib = self.proc("VmRSS")
        return None if kib is None else kib / 1024.0

    def fds(self):
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None

    def cpu_s(self):
        try:
            f = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except Exception:
            return None

    def log_bytes(self):
        """Bytes the server has written to its log so far."""
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return None

    def panics(self):
        try:
            return open(self.log_path, "rb").read().count(b"panicked")
        except OSError:
            return 0

    def stats(self):
        st, _, body, _ = req("GET", "/api/v1/stats", auth(ADMIN), timeout=5)
        if st != 200:
            return None
        try:
            return json.loads(body)
        except Exception:
            return None

    def stop(self, sig=signal.SIGTERM, wait=15):
        if self.alive():
            self.p.send_signal(sig)
            try:
                self.p.wait(wait)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

ADMIN = None
server = None
bench = None

def up_check(panics_before):
    """(ok, why) for: alive, /healthz 200 with every shard, loops turning, no panic."""
    if not server.alive():
        return False, f"server exited (status {server.p.returncode})"
    st, _, body, dt = req("GET", "/healthz", timeout=5)
    if st != 200:
        return False, f"/healthz {status_str(st, body)}"
    try:
        shards = json.loads(body).get("shards")
    except Exception:
        shards = None
    if shards != SHARDS:
        return False, f"/healthz says shards={shards}, expected {SHARDS}"
    a = server.stats()
    time.sleep(0.7)
    b = server.stats()
    if a and b:
        for sa, sb in zip(a.get("shards", []), b.get("shards", [])):
            if sb.get("loop_iterations", 0) <= sa.get("loop_iterations", 0):
                return False, f"shard {sa.get('shard')} loop stopped turning"
    p = server.panics()
    if p > panics_before:
        return False, f"{p - panics_before} panic(s) in server.log"
    caught = sum(sh.get("counters", {}).get("participant_panics", 0) for sh in (b or {}).get("shards", []))
    if caught > PANICS_CAUGHT[0]:
        n = caught - PANICS_CAUGHT[0]
        PANICS_CAUGHT[0] = caught
        return False, f"{n} participant panic(s) caught by the server (participant_panics)"
    return True, ""

PANICS_CAUGHT = [0]

# ------------------------------------------------------------------ the legit call

class Bench:
    def __init__(self, seconds):
        self.dir = os.path.join(OUT, "bench" if Server.count == 1 else f"bench-{Server.count}")
        os.makedirs(self.dir, exist_ok=True)
        args = [BENCH_BIN, "--url", URL, "--out", self.dir, "--threads", "1",
                "--server-pid", str(server.pid)]
        if AUTH:
            args += ["--auth-secret", SECRET]
        args += ["rooms", "--room-size", "4", "--room-interval", "500ms", "--join-spread", "2s",
                 "--max-rooms", "3", "--duration", f"{int(seconds)}s"]
        self.offset = None  # wall (monotonic) time of bench second 0
        self.seconds = seconds
        self.active = 0
        self.stdout = open(os.path.join(self.dir, "stdout.txt"), "wb")
        self.p = subprocess.Popen(args, stdout=self.stdout, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        with open(os.path.join(self.dir, "progress.log"), "w") as f:
            for raw in self.p.stderr:
                now = time.monotonic()
                line = raw.decode("utf-8", "replace")
                f.write(line)
                f.flush()
                m = re.match(r"\[\s*(\d+)s\]", line)
                if m:
                    off = now - int(m.group(1))
                    self.offset = off if self.offset is None else min(self.offset, off)
                    a = re.search(r"participants (\d+) active", line)
                    if a:
                        self.active = int(a.group(1))

    def rows(self):
        path = os.path.join(self.dir, "timeseries.csv")
        if not os.path.exists(path):
            return []
        return parse_timeseries(open(path).read())

def parse_timeseries(text):
    """corelay-bench's timeseries.csv as a list of {column: float or None}."""
    lines = text.strip().splitlines()
    if not lines:
        return []
    head = lines[0].split(",")
    out = []
    for l in lines[1:]:
        row = {}
        for k, v in zip(head, l.split(",")):
            try:
                row[k] = float(v) if v != "" else None
            except ValueError:
                row[k] = None
        out.append(row)
    return out

def window(rows, offset, t0, t1, whole=True):
    """Loss, worst per-second e2e P99 (ms) and fewest active participants over
    the bench seconds wholly inside [t0, t1] (monotonic), or (whole=False)
    every second that overlaps it."""
    if offset is None:
        return None
    if whole:
        sel = [r for r in rows if offset + r["second"] >= t0 - 0.01 and offset + r["second"] + 1 <= t1 + 0.01]
    else:
        sel = [r for r in rows if offset + r["second"] < t1 and offset + r["second"] + 1 > t0]
    if not sel:
        return None
    tx = sum(r["tx_pps"] or 0 for r in sel)
    rx = sum(r["rx_video_pps"] or 0 for r in sel)
    loss = max(0.0, 1.0 - rx / (3.0 * tx)) if tx else None
    p99 = max((r["e2e_p99_ms"] or 0) for r in sel)
    active = min(int(r["active"] or 0) for r in sel)
    return {"loss": loss, "p99": p99, "active": active, "seconds": len(sel)}

# ------------------------------------------------------------------ the attacker process

class Attacker:
    def __init__(self, room):
        self.room = room
        toks = [mint(room, n) for n in ("abuser", "partner1", "partner2")]
        args = [ATTACKER_BIN, "serve", "--url", URL, "--room", room, "--partners", "2"]
        for t in toks:
            if t:
                args += ["--token", t]
        self.errf = open(os.path.join(OUT, f"attacker-{Server.count}.log"), "wb")
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.errf)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.info = self.next(40)

    def _read(self):
        for raw in self.p.stdout:
            try:
                v = json.loads(raw)
            except Exception:
                continue
            with self.cv:
                self.lines.append(v)
                self.cv.notify_all()

    def next(self, timeout):
        end = time.monotonic() + timeout
        with self.cv:
            while not self.lines:
                left = end - time.monotonic()
                if left <= 0 or self.p.poll() is not None and not self.lines:
                    return {"error": "attacker gave no answer"}
                self.cv.wait(min(left, 0.5))
            return self.lines.pop(0)

    def cmd(self, line, timeout=90):
        if self.p.poll() is not None:
            return {"error": "attacker process is gone"}
        try:
            self.p.stdin.write((line + "\n").encode())
            self.p.stdin.flush()
        except OSError as e:
            return {"error": str(e)}
        return self.next(timeout)

    def frames(self):
        st = self.cmd("status", 10)
        return {p["name"]: p for p in st.get("peers", [])}

    def flowing(self, names, secs=1.5, min_frames=10):
        """(ok, why): each named peer received >= min_frames frames over secs."""
        a = self.frames()
        time.sleep(secs)
        b = self.frames()
        bad = []
        for n in names:
            if n not in a or n not in b:
                bad.append(f"{n}: gone")
                continue
            d = b[n]["frames"] - a[n]["frames"]
            if d < min_frames or not b[n]["connected"]:
                bad.append(f"{n}: {d} frames in {secs}s (connected={b[n]['connected']})")
        return (not bad), "; ".join(bad)

    def flowing_for(self, names, total):
        """flowing() over consecutive 2 s windows for `total` seconds: a call
        that stops a few seconds after the attack is caught too."""
        t = time.monotonic()
        while True:
            ok, why = self.flowing(names, secs=2.0)
            if not ok:
                return False, f"{why} ({time.monotonic() - t:.0f}s after the attack)"
            if time.monotonic() - t >= total:
                return True, ""

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write(b"leave\n")
                self.p.stdin.flush()
                self.p.wait(20)
            except Exception:
                self.p.kill()

def offer(*flags):
    return subprocess.run([ATTACKER_BIN, "offer", *flags], capture_output=True, text=True,
                          timeout=60, check=True).stdout

# ------------------------------------------------------------------ SDP surgery

def sections(sdp):
    """(session lines, [media sections as line lists])."""
    lines = [l for l in sdp.replace("\r\n", "\n").split("\n") if l]
    sess, media = [], []
    for l in lines:
        if l.startswith("m="):
            media.append([l])
        elif media:
            media[-1].append(l)
        else:
            sess.append(l)
    return sess, media

def join_sdp(sess, media):
    mids = [l[6:] for m in media for l in m if l.startswith("a=mid:")]
    sess = [("a=group:BUNDLE " + " ".join(mids)) if l.startswith("a=group:BUNDLE") else l
            for l in sess]
    return "\r\n".join(sess + [l for m in media for l in m]) + "\r\n"

def recv_section(media):
    for m in media:
        if m[0].startswith("m=video") and "a=recvonly" in m:
            return m
    return next(m for m in media if m[0].startswith("m=video"))

def first_h264_pt(media):
    for m in media:
        for l in m:
            if l.startswith("a=rtpmap:") and "H264/" in l:
                return l.split()[0][9:]
    return "102"

def with_copies(sdp, n, prefix="x"):
    """SDP plus n minimal recvonly video m-sections (m=, mid, direction,
    rtpmap: about 75 bytes each, so that 16,000 stay under a 2 MB body limit
    and reach the SDP parser)."""
    sess, media = sections(sdp)
    pt = first_h264_pt(media)
    extra = [[f"m=video 9 UDP/TLS/RTP/SAVPF {pt}", f"a=mid:{prefix}{i}", "a=recvonly",
              f"a=rtpmap:{pt} H264/90000"] for i in range(n)]
    return join_sdp(sess, media + extra)

def with_dup_pt(sdp):
    """The issue's offer: one more recvonly video m-line whose payload type
    repeats an earlier one, with its rtpmap and no fmtp."""
    sess, media = sections(sdp)
    video = next(m for m in media if m[0].startswith("m=video"))
    h264 = [l.split()[0][9:] for l in video if l.startswith("a=rtpmap:") and "H264/" in l]
    # The browser offer had H.264 on 102; str0m's offers use other numbers.
    pt = "102" if "102" in h264 or not h264 else h264[0]
    keep = [l for l in video if l.startswith(("c=", "a=ice-ufrag:", "a=ice-pwd:",
                                               "a=fingerprint:", "a=setup:"))]
    dup = [f"m=video 9 UDP/TLS/RTP/SAVPF {pt}"] + keep + [
        "a=mid:dup", "a=recvonly", "a=rtcp-mux", f"a=rtpmap:{pt} H264/90000"]
    return join_sdp(sess, media + [dup]), pt

def with_ufrag(sdp, ufrag):
    return re.sub(r"a=ice-ufrag:\S+", f"a=ice-ufrag:{ufrag}", sdp)

def reordered(sdp):
    sess, media = sections(sdp)
    if len(media) >= 2:
        media[0], media[1] = media[1], media[0]
    # Keep the BUNDLE order as it was (the m-lines moved, the group did not).
    lines = sess + [l for m in media for l in m]
    return "\r\n".join(lines) + "\r\n"

# ------------------------------------------------------------------ rows

results = []

def run_row(name, fn, needs_call=True):
    if not selected(name, ONLY):
        return
    quiet = QUIET if needs_call else 0.5
    log(f"quiet {quiet:.0f}s, then {name}")
    tq0 = time.monotonic()
    time.sleep(quiet)
    rss0, fds0, log0 = server.rss_mib(), server.fds(), server.log_bytes()
    panics0 = server.panics()
    t0 = time.monotonic()
    try:
        r = fn()
    except Exception as e:
        import traceback
        traceback.print_exc()
        r = {"http": "-", "ok": False, "why": f"the check itself failed: {type(e).__name__}: {e}"}
    t1 = max(time.monotonic(), t0 + 2.0)
    up, upwhy = up_check(panics0)
    rss1, fds1, log1 = server.rss_mib(), server.fds(), server.log_bytes()
    if "fds" in r:
        # A row that watches descriptors says when they are judged (e.g. after
        # a deadline), rather than whenever the row happens to end.
        fds0, fds1 = r["fds"]
    row = {"attack": name, "http": r.get("http", "-"), "ok": bool(r.get("ok")),
           "why": r.get("why", ""), "up": up, "upwhy": upwhy, "rss0": rss0, "rss1": rss1,
           "fds0": fds0, "fds1": fds1,
           "log_bytes": None if log0 is None or log1 is None else log1 - log0,
           "quiet": (tq0, t0), "window": (t0, t1), "needs_call": needs_call,
           "observed": r.get("observed", {}), "bench": bench}
    results.append(row)
    log(f"{name}: http={row['http']} up={up} ok={row['ok']} {row['why']} {upwhy}")

def post_offer(room, identity, sdp, ctype="application/sdp", timeout=15, name=None):
    h = {"Content-Type": ctype}
    h.update(auth(mint(room, identity)))
    q = f"?name={name or identity}"
    return req("POST", f"/api/v1/rooms/{room}/participants{q}", h, sdp, timeout)

def cleanup(location, room, identity):
    if location:
        req("DELETE", location, auth(mint(room, identity)))

def bad_status_row(status, body, hs, expect, what, room, identity):
    """Common verdict for 'this must be refused' rows (cleans up a 201)."""
    if status == 201:
        cleanup(hs.get("location"), room, identity)
    ok = status in expect
    return {"http": status_str(status, body), "ok": ok,
            "why": "" if ok else f"{what}: expected {'/'.join(map(str, expect))}"}

BASE_OFFER = None
ATT = None

def a_content_type():
    room, who = "abuse-ct", "ct"
    st, hs, body, _ = post_offer(room, who, BASE_OFFER, ctype="application/sdpXYZ")
    return bad_status_row(st, body, hs, (415,), "Content-Type: application/sdpXYZ", room, who)

def a_parse_leak():
    room, who = "abuse-leak", "leak"
    # Every probe carries addresses (o=, c=, a candidate) away from the broken
    # token: an error message that shows them dumps SDP lines back.
    addr = (BASE_OFFER.replace("IN IP4 0.0.0.0", "IN IP4 10.11.12.13")
            .replace("a=mid:", "a=candidate:1 1 udp 2113937151 192.168.77.5 54321 typ host\r\na=mid:", 1))
    probes = {
        "bad v=": "v=X\r\no=- 1 1 IN IP4 10.11.12.13\r\ns=-\r\nc=IN IP4 10.11.12.13\r\n",
        "bad m=": addr.replace("m=video 9 UDP/TLS/RTP/SAVPF", "m=video 9 UDP/TLS/RTP/SAVPF x7", 1),
        "bad port": addr.replace("m=video 9 ", "m=video nine ", 1),
        "bad candidate": addr.replace("a=mid:", "a=candidate:1 1 udp x 192.168.77.5 y typ\r\na=mid:", 1),
        "truncated": addr[: len(addr) // 3] + "\r\nc=IN IP4 10.11.12.13",
        "binary": "v=0\r\no=- 0 0 IN IP4 10.11.12.13\r\n\x01\x02\x7f garbage 192.168.77.5:9\r\n",
    }
    leaks, statuses, notjson, samples = [], [], [], {}
    for label, sdp in probes.items():
        st, hs, body, _ = post_offer(room, who, sdp)
        statuses.append(f"{label}:{st}")
        if st is not None and 200 <= st < 300:
            # Accepted (lenient parser): an SDP answer, not an error message.
            cleanup(hs.get("location"), room, who)
            continue
        samples[label] = body[:200]
        for needle in ("10.11.12.13", "192.168.77.5", f":{UDP_BASE}", "127.0.0.1"):
            if needle in body:
                leaks.append(f"{label}: echoes {needle}")
        try:
            j = json.loads(body)
            if not {"code", "message"} <= set(j):
                notjson.append(label)
        except Exception:
            notjson.append(label)
    why = "; ".join(leaks + ([f"not JSON {{code,message}}: {', '.join(notjson)}"] if notjson else []))
    ok = not leaks and not notjson
    return {"http": " ".join(statuses), "ok": ok, "why": why, "observed": samples}

def a_dotdot():
    who = "dots"
    out, bad = [], []
    for path in ("/api/v1/rooms/../participants", "/api/v1/rooms/%2E%2E/participants",
                 "/api/v1/rooms/%2e%2e/participants?name=x", "/whip/..", "/whip/%2E%2E"):
        h = {"Content-Type": "application/sdp"}
        h.update(auth(mint("..", who)))
        st, hs, body, _ = req("POST", path, h, BASE_OFFER)
        out.append(str(st))
        if st == 201:
            bad.append(f"{path} -> 201 Location {hs.get('location')}")
            req("DELETE", hs.get("location", "/x"), auth(mint("..", who)))
    return {"http": ",".join(sorted(set(out))), "ok": not bad, "why": "; ".join(bad)}

def a_trickle_unknown():
    bad, out = [], []
    tok = auth(mint(ATT.room, "mallory"))
    for path in (f"/whip/{ATT.room}/p0000000000000000", f"/whep/{ATT.room}/nosuchid",
                 f"/whip/nosuchroom/p1", f"/api/v1/rooms/{ATT.room}/participants/nosuchid"):
        h = {"Content-Type": "application/trickle-ice-sdpfrag", "If-Match": "*"}
        h.update(tok)
        st, _, body, _ = req("PATCH", path, h, "a=ice-ufrag:x\r\na=candidate:1 1 udp 1 10.0.0.1 9 typ host\r\n")
        out.append(str(st))
        if st is None or st < 400:
            bad.append(f"{path} -> {st}")
    return {"http": ",".join(sorted(set(out))), "ok": not bad,
            "why": ("trickle to an unknown id accepted: " + "; ".join(bad)) if bad else ""}

def a_body_10mb():
    room, who = "abuse-big", "big"
    body = (b"v=0\r\n" + b"a=x:" + b"y" * (10 * 1024 * 1024))[: 10 * 1024 * 1024]
    h = {"Content-Type": "application/sdp"}
    h.update(auth(mint(room, who)))
    st, hs, text, dt, sent = req_stream("POST", f"/api/v1/rooms/{room}/participants?name={who}",
                                        h, body, timeout=20)
    if st == 201:
        cleanup(hs.get("location"), room, who)
    ok = st is not None and 400 <= st < 500
    return {"http": status_str(st, text), "ok": ok,
            "why": f"answered after {sent / 1048576:.1f} MiB sent, {dt:.2f}s" + ("" if ok else "; expected 413"),
            "observed": {"bytes_sent": sent}}

def a_list_noauth():
    out, bad = [], []
    for path in ("/api/v1/rooms", f"/api/v1/rooms/{ATT.room}", "/api/v1/stats"):
        st, _, body, _ = req("GET", path)
        out.append(f"{path.rsplit('/', 1)[-1] or path}:{st}")
        if st == 200 and path != "/api/v1/stats":
            bad.append(f"GET {path} 200 without a token")
    # With an admin token the listing works (so a 401 above is about the token).
    if ADMIN:
        st, _, _, _ = req("GET", "/api/v1/rooms", auth(ADMIN))
        out.append(f"admin:{st}")
    return {"http": " ".join(out), "ok": not bad,
            "why": "; ".join(bad) + ("" if AUTH else " (server runs without --auth-secret)")}

def a_cors():
    evil = "https://evil.example"
    bad, out = [], []
    for method, path, extra in (
            ("OPTIONS", f"/api/v1/rooms/{ATT.room}/participants",
             {"Access-Control-Request-Method": "POST",
              "Access-Control-Request-Headers": "content-type,authorization"}),
            ("GET", "/api/v1/rooms", {}),
            ("OPTIONS", f"/whip/{ATT.room}", {"Access-Control-Request-Method": "POST"})):
        h = {"Origin": evil}
        h.update(extra)
        st, hs, _, _ = req(method, path, h)
        acao = hs.get("access-control-allow-origin")
        out.append(f"{method}:{st}:{acao or '-'}")
        if acao in ("*", evil):
            bad.append(f"{method} {path} allows {acao}")
    return {"http": " ".join(out), "ok": not bad, "why": "; ".join(bad)}

def a_post_dup_pt():
    room, who = "abuse-duppt", "duppt"
    sdp, pt = with_dup_pt(BASE_OFFER)
    st, hs, body, _ = post_offer(room, who, sdp)
    if st == 201:
        cleanup(hs.get("location"), room, who)
    # A payload type past 127 (outside RTP's 7 bits) in the same offer.
    big = BASE_OFFER.replace("a=rtpmap:", "a=rtpmap:200 H264/90000\r\na=rtpmap:", 1)
    st2, hs2, body2, _ = post_offer(room, who, big)
    if st2 == 201:
        cleanup(hs2.get("location"), room, who)
    ok = st == 400 and st2 == 400
    why = f"PT {pt} repeated without fmtp: {status_str(st, body)}; rtpmap:200: {status_str(st2, body2)}"
    return {"http": f"{st}, {st2}", "ok": ok, "why": why + ("" if ok else "; expected 400 for both")}

def new_victim(name):
    r = ATT.cmd(f"join {name} {mint(ATT.room, name) or ''}".strip(), 40)
    if "peer" not in r or not r.get("ready"):
        why = r.get("error") or ("media did not flow within 15 s" if "peer" in r else str(r)[:200])
        raise RuntimeError(f"victim {name} did not get going: {why}")
    return r["peer"]

def patch_row(name, make, expect, watch=3.0):
    v = new_victim(name)
    try:
        sdp = make(v["offer"])
        h = {"Content-Type": "application/sdp", "If-Match": v["etag"]}
        h.update(auth(mint(ATT.room, name)))
        st, hs, body, dt, _ = req_stream("PATCH", v["location"], h, sdp.encode(), timeout=60)
        flow, why = ATT.flowing_for([name, "abuser"], watch)
        ok = flow and st in expect
        reasons = []
        if st not in expect:
            reasons.append(f"expected {'/'.join(map(str, expect))}")
        if not flow:
            reasons.append("victim's call stopped: " + why)
        reasons.append(f"answered in {dt:.2f}s, {len(sdp) // 1024} KiB; victim watched {watch:.0f}s")
        return {"http": status_str(st, body), "ok": ok, "why": "; ".join(reasons)}
    finally:
        ATT.cmd(f"drop {name}", 20)

def a_patch_dup_pt():
    return patch_row("v-duppt", lambda o: with_dup_pt(o)[0], (400,))

def a_patch_ufrag():
    # Another ICE ufrag and the m-lines in another order: str0m starts an ICE
    # restart before it sees the order; a server that applied half of it broke
    # the call about 6 s later, so the victim is watched for 8 s.
    return patch_row("v-ufrag", lambda o: with_ufrag(reordered(o), "evilufrag"), (400,), watch=8.0)

def a_patch_reorder():
    return patch_row("v-reorder", reordered, (400,), watch=8.0)

def a_patch_8000():
    return patch_row("v-8000", lambda o: with_copies(o, 8000), (400, 413))

class Pinger:
    """/healthz every 200 ms in a thread: the worst latency while an attack runs."""
    def __init__(self):
        self.worst, self.fails, self.stop = 0.0, 0, False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
    def _run(self):
        while not self.stop:
            st, _, _, dt = req("GET", "/healthz", timeout=10)
            self.worst = max(self.worst, dt)
            self.fails += st != 200
            time.sleep(0.2)
    def done(self):
        self.stop = True
        self.t.join(15)
        return self.worst, self.fails

def a_offer_16000():
    room, who = "abuse-16k", "sixteen"
    sdp = with_copies(BASE_OFFER, 16000)
    ping = Pinger()
    h = {"Content-Type": "application/sdp"}
    h.update(auth(mint(room, who)))
    st, hs, body, dt, _ = req_stream("POST", f"/api/v1/rooms/{room}/participants?name={who}", h,
                                     sdp.encode(), timeout=60)
    worst, fails = ping.done()
    if st == 201:
        cleanup(hs.get("location"), room, who)
    ok = st in (400, 413) and worst < 2.0 and not fails
    why = f"{len(sdp) / 1048576:.1f} MiB answered in {dt:.2f}s; /healthz worst {worst * 1000:.0f} ms"
    if st not in (400, 413):
        why += "; expected 400/413"
    return {"http": status_str(st, body), "ok": ok, "why": why}

def participants():
    s = server.stats()
    return None if s is None else s.get("participants")

def a_offer_flood():
    n, spread = 1000, 2.0
    rooms = 50
    tokens = [(f"flood-{i % rooms}", f"f{i}") for i in range(n)]
    tokens = [(r, w, mint(r, w)) for r, w in tokens]
    before = participants()
    statuses, locs, lock = {}, [], threading.Lock()
    start = time.monotonic()
    idx = [0]

    def worker():
        while True:
            with lock:
                i = idx[0]
                idx[0] += 1
            if i >= n or time.monotonic() - start > spread + 15:
                return
            due = start + spread * i / n
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
            r, w, t = tokens[i]
            h = {"Content-Type": "application/sdp"}
            h.update(auth(t))
            st, hs, body, _ = req("POST", f"/api/v1/rooms/{r}/participants?name={w}", h,
                                  BASE_OFFER, timeout=10)
            with lock:
                k = status_str(st, body)
                statuses[k] = statuses.get(k, 0) + 1
                if st == 201 and hs.get("location"):
                    locs.append((hs["location"], r, w))

    ths = [threading.Thread(target=worker) for _ in range(24)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(30)
    flood_s = time.monotonic() - start
    peak = participants()
    # Admission must recover once --connect-timeout has reaped the joins that never did ICE.
    limit = secs(CONNECT_TIMEOUT, 5.0) + 6.0
    t_wait = time.monotonic()
    reaped_after = None
    while time.monotonic() - t_wait < limit:
        p = participants()
        if p is not None and before is not None and p <= before:
            reaped_after = time.monotonic() - t_wait
            break
        time.sleep(0.5)
    left = participants()
    st, hs, body, _ = post_offer("abuse-after-flood", "late", BASE_OFFER)
    if st == 201:
        cleanup(hs.get("location"), "abuse-after-flood", "late")
    # Remove whatever the server did not (so later rows start clean).
    leftovers = 0
    for loc, r, w in locs:
        s2, _, _, _ = req("DELETE", loc, auth(mint(r, w)), timeout=5)
        leftovers += s2 in (200, 204)
    http = ", ".join(f"{k}x{v}" for k, v in sorted(statuses.items(), key=lambda kv: -kv[1]))
    reasons = [f"{sum(statuses.values())} POSTs in {flood_s:.1f}s; participants {before}->{peak}"]
    ok = True
    if reaped_after is None:
        ok = False
        reasons.append(f"not reaped: {left} participants {limit:.0f}s later"
                       + ("" if HAS_CONNECT_TIMEOUT else " (server has no --connect-timeout)"))
    else:
        reasons.append(f"reaped {reaped_after:.1f}s after the flood")
    if st != 201:
        ok = False
        reasons.append(f"a fresh join afterwards got {status_str(st, body)}")
    if leftovers:
        reasons.append(f"{leftovers} leftovers DELETEd by the script")
    return {"http": http, "ok": ok, "why": "; ".join(reasons),
            "observed": {"statuses": statuses, "before": before, "peak": peak, "left": left}}

def a_slow_headers():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = max(10, min(300, soft // 4))
    socks = []
    fds0 = server.fds()
    # From 127.0.0.2 and up, at most --http-max-conns-per-ip less a few from
    # each: the per-address cap would otherwise refuse most of them at accept
    # (and the suite's own /healthz and join from 127.0.0.1 meanwhile).
    per_ip = max(1, HTTP_PER_IP - 4)
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", HTTP_PORT), timeout=5,
                                         source_address=(source_ip(i, per_ip), 0))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            s.setblocking(False)
            socks.append(s)
        except OSError:
            break
    t = time.monotonic()
    closed_at = {}
    worst, fails, joins = 0.0, 0, []
    max_fds = server.fds() or 0
    while time.monotonic() - t < SLOW_HOLD:
        st, _, _, dt = req("GET", "/healthz", timeout=5)
        worst = max(worst, dt)
        fails += st != 200
        max_fds = max(max_fds, server.fds() or 0)
        for i, s in enumerate(socks):
            if i in closed_at:
                continue
            try:
                got = s.recv(4096, socket.MSG_PEEK)
                closed_at[i] = time.monotonic() - t  # EOF or a 408 answer
            except BlockingIOError:
                pass
            except OSError:
                closed_at[i] = time.monotonic() - t
        if not joins:
            st2, hs2, body2, _ = post_offer("abuse-slow", "slowjoin", BASE_OFFER)
            joins.append(st2)
            if st2 == 201:
                cleanup(hs2.get("location"), "abuse-slow", "slowjoin")
        if len(closed_at) == len(socks):
            break
        time.sleep(0.5)
    for s in socks:
        s.close()
    closed = len(closed_at)
    first = min(closed_at.values()) if closed_at else None
    ok = fails == 0 and worst < 2.0 and closed >= 0.9 * len(socks) and joins and joins[0] == 201
    why = (f"{len(socks)} half-sent headers: server closed {closed}"
           + (f" (first after {first:.1f}s)" if first is not None else "")
           + f" within {SLOW_HOLD:.0f}s; /healthz worst {worst * 1000:.0f} ms, {fails} failed;"
           + f" a join during it: {joins[0] if joins else '-'}; server fds {fds0}->{max_fds}")
    why += f" (from {source_ip(0, per_ip)}..{source_ip(len(socks) - 1, per_ip)}, {per_ip} each)"
    return {"http": f"{closed}/{len(socks)} closed", "ok": ok, "why": why}

def source_ip(i, per_ip, first=2):
    """The loopback address connection i comes from when each address takes
    per_ip of them: 127.0.0.FIRST for the first per_ip, then the next."""
    k = first + i // max(1, per_ip)
    if k > 254:
        raise ValueError(f"connection {i}: past 127.0.0.254 at {per_ip} per address")
    return f"127.0.0.{k}"

def shard_counters(shard):
    s = server.stats()
    if not s:
        return None
    for sh in s.get("shards", []):
        if sh.get("shard") == shard:
            c = sh.get("counters", {})
            return c.get("rx_packets", 0), sum(v for k, v in c.items() if k.startswith("dropped_"))
    return None

def abuser_shard():
    s = server.stats()
    for r in (s or {}).get("room_detail", []):
        if r.get("room") == ATT.room:
            for p in r.get("participants", []):
                if p.get("name") == "abuser" or p.get("id") == ATT.info["abuser"].get("public_id"):
                    return p.get("shard")
    return None

def a_garbage():
    n = 14000
    shard = abuser_shard()
    if shard is None:
        return {"http": "-", "ok": False, "why": "cannot find the abuser's shard in /api/v1/stats"}
    # Baseline: datagrams on that shard that are not dropped, per second.
    q0, tq0 = shard_counters(shard), time.monotonic()
    time.sleep(3.0)
    q1, tq1 = shard_counters(shard), time.monotonic()
    rate = ((q1[0] - q0[0]) - (q1[1] - q0[1])) / (tq1 - tq0)
    a0, ta0 = q1, tq1
    r = ATT.cmd(f"garbage {n} 2", 60)
    time.sleep(1.5)  # the shards report every 250 ms
    a1, ta1 = shard_counters(shard), time.monotonic()
    rx, dropped = a1[0] - a0[0], a1[1] - a0[1]
    legit = rate * (ta1 - ta0)
    unaccounted = (rx - dropped) - legit
    sent = r.get("sent", 0)
    # The "dtls" kind is whole DTLS 1.2 records (types 20-25, any epoch) of
    # garbage: the server hands those to the DTLS stack and does not judge
    # them by its silence (valid records often produce nothing at once; see
    # docs/operations.md, Limits), so they may go uncounted by design.
    whole_dtls = int((r.get("kinds") or {}).get("dtls", 0))
    tol = garbage_tolerance(sent, legit, whole_dtls)
    ok = sent == n and unaccounted <= tol and rx >= 0.9 * sent
    why = (f"shard {shard}: rx +{rx}, dropped_* +{dropped}, sent {sent}; legit non-dropped "
           f"~{legit:.0f} ({rate:.0f}/s); unaccounted {unaccounted:+.0f} (tolerance {tol:.0f}: "
           f"1 % of sent or 10 % of legit, + {whole_dtls} whole DTLS records)")
    if rx < 0.9 * sent:
        why += "; most garbage never reached the server (kernel buffer?)"
    if not ok and sent:
        # Which kinds escape the counters: 1,000 of each, one kind at a time.
        per = []
        for kind in ("random", "rtp", "rtcp", "stun", "dtls", "tiny"):
            b0, tb0 = shard_counters(shard), time.monotonic()
            ATT.cmd(f"garbage 1000 0.5 {kind}", 30)
            time.sleep(1.0)
            b1, tb1 = shard_counters(shard), time.monotonic()
            esc = ((b1[0] - b0[0]) - (b1[1] - b0[1])) - rate * (tb1 - tb0)
            per.append(f"{kind} {esc:+.0f}")
        why += "; uncounted of 1000 per kind: " + ", ".join(per)
    flow, fwhy = ATT.flowing(["abuser", "partner1"])
    if not flow:
        ok = False
        why += "; abuser's call stopped: " + fwhy
    return {"http": f"{dropped}/{sent} dropped", "ok": ok, "why": why, "observed": r}

def garbage_tolerance(sent, legit, whole_dtls=0):
    """How many garbage datagrams may escape every drop counter: 1 % of those
    sent or 10 % of the legit traffic estimate (its rate is measured, not
    known), plus the whole DTLS records that are not judged by silence."""
    return max(0.01 * sent, 0.10 * legit) + whole_dtls

def total_counter(name):
    s = server.stats()
    return None if not s else s.get("total", {}).get(name)

def a_pins():
    cpu0, t = server.cpu_s(), time.monotonic()
    d0 = total_counter("dropped_requests")
    r = ATT.cmd("pins 20000 4", 90)
    cpu1, t1 = server.cpu_s(), time.monotonic()
    d1 = total_counter("dropped_requests")
    cores = (cpu1 - cpu0) / (t1 - t) if cpu0 is not None and cpu1 is not None else None
    if "error" in r:
        return {"http": "-", "ok": False, "why": r["error"]}
    flow, fwhy = ATT.flowing(["partner1", "partner2"])
    ok = flow
    why = (f"{r['sent']} requests in {r['secs']:.1f}s: {r['slots_events']} slot updates came back; "
           f"server CPU {cores:.2f} cores meanwhile; abuser connected={r['connected']} "
           f"channel_open={r['channel_open']}")
    if d0 is not None and d1 is not None:
        why += f"; dropped_requests +{d1 - d0}"
    if MAX_RPS and MAX_RPS.isdigit():
        # At most the rate (bursts of twice it) over the flood plus the 2 s after it.
        bound = 2 * int(MAX_RPS) * (r["secs"] + 2) + 20
        if r["slots_events"] > bound:
            ok = False
            why += f"; not rate limited: more than {bound:.0f} answers at --max-requests-per-second {MAX_RPS}"
    else:
        why += "; server has no --max-requests-per-second"
    if not flow:
        why += "; partners' call stopped: " + fwhy
    return {"http": f"{r['slots_events']} answers", "ok": ok, "why": why, "observed": r}

def a_stun_sources():
    rss0 = server.rss_mib()
    d0 = total_counter("dropped_addr_limit")
    r = ATT.cmd(f"stun {STUN_SOURCES} 250", 120)
    d1 = total_counter("dropped_addr_limit")
    if "error" in r:
        return {"http": "-", "ok": False, "why": r["error"]}
    rss1 = server.rss_mib()
    cap = int(MAX_ADDRS) if MAX_ADDRS and MAX_ADDRS.isdigit() else None
    limit = cap if cap is not None else 100
    ok = r["answered"] <= limit
    why = (f"{r['sources']} source ports: {r['answered']} answered, {r['silent']} silent, "
           f"{r['error_or_other']} errors; RSS {rss0:.1f}->{rss1:.1f} MiB; "
           + (f"cap --max-addrs-per-participant {cap}" if cap is not None
              else "no --max-addrs-per-participant (limit used: 100)")
           + (f"; dropped_addr_limit +{d1 - d0}" if d0 is not None and d1 is not None else ""))
    flow, fwhy = ATT.flowing(["abuser", "partner1"])
    if not flow:
        ok = False
        why += "; abuser's call stopped: " + fwhy
    return {"http": f"{r['answered']}/{r['sources']} answered", "ok": ok, "why": why, "observed": r}

def a_patch_foreign():
    v = new_victim("v-foreign")
    try:
        pid = v.get("public_id") or v["location"].rsplit("/", 1)[-1]
        h = {"Content-Type": "application/sdp", "If-Match": "*"}
        h.update(auth(mint(ATT.room, "mallory")))
        out, bad = [], []
        for path in {f"/api/v1/rooms/{ATT.room}/participants/{pid}", v["location"]}:
            st, _, body, _ = req("PATCH", path, h, with_copies(v["offer"], 1, "m"))
            out.append(status_str(st, body))
            if st is not None and st < 300:
                bad.append(f"PATCH {path} with If-Match: * by another identity -> {st}")
        flow, fwhy = ATT.flowing(["v-foreign"])
        if not flow:
            bad.append("victim's call stopped: " + fwhy)
        return {"http": ", ".join(out), "ok": not bad, "why": "; ".join(bad)}
    finally:
        ATT.cmd("drop v-foreign", 20)

def a_delete_foreign():
    v = new_victim("v-delete")
    try:
        pid = v.get("public_id") or v["location"].rsplit("/", 1)[-1]
        out, bad = [], []
        for who, tok in (("no token", None), ("mallory", mint(ATT.room, "mallory"))):
            st, _, body, _ = req("DELETE", f"/api/v1/rooms/{ATT.room}/participants/{pid}", auth(tok))
            out.append(f"{who}:{status_str(st, body)}")
            if st is not None and st < 300:
                bad.append(f"DELETE by {who} of the id the room sees -> {st}")
        flow, fwhy = ATT.flowing(["v-delete"])
        if not flow:
            bad.append("victim's call stopped: " + fwhy)
        if v.get("public_id") and v["location"].endswith("/" + v["public_id"]):
            bad.append("Location is the public id (not a capability)")
        return {"http": ", ".join(out), "ok": not bad, "why": "; ".join(bad)}
    finally:
        ATT.cmd("drop v-delete", 20)

# ------------------------------------------------------------------ second hardening round (issue 56)

# The drop counters a datagram the shard drops on arrival is counted in (one of them, once).
INGRESS_DROPS = ("dropped_malformed", "dropped_unknown_source", "dropped_by_stack",
                 "dropped_addr_limit", "dropped_unknown_stream")

def totals():
    """/api/v1/stats' total counters, or {}."""
    s = server.stats()
    return (s or {}).get("total", {})

def ingress_drops(total):
    return sum(total.get(k, 0) for k in INGRESS_DROPS)

def wait_totals(pred, within):
    """Polls the total counters until pred(totals) holds or `within` seconds pass; the last."""
    last = [totals()]
    def check():
        last[0] = totals()
        return pred(last[0])
    wait_for(check, within)
    return last[0]

def wait_for(f, within, every=0.2):
    """Polls f() until it returns something true or `within` seconds pass; its last value."""
    end = time.monotonic() + within
    while True:
        v = f()
        if v or time.monotonic() >= end:
            return v
        time.sleep(every)

# STUN attributes str0m's parser warns about, one log line each (before the fix).
STUN_ALTERNATE_SERVER, STUN_MAPPED_ADDRESS, STUN_UNKNOWN_ATTRIBUTES = 0x8023, 0x0001, 0x000A
STUN_BOMB_ATTRS = 14995  # empty attributes per bomb: a 60 KB datagram

def stun_bomb(attr, n=STUN_BOMB_ATTRS, tid=None):
    """A STUN binding request of n empty attributes of type attr."""
    a = struct.pack("!HH", attr, 0) * n
    return struct.pack("!HHI", 1, len(a), 0x2112A442) + (tid or os.urandom(12)) + a

def rfc4571(payload):
    """One ICE-TCP frame: a 16-bit length, then the packet."""
    return struct.pack("!H", len(payload)) + payload

def new_log_lines(data):
    """Lines of log output that count (DEBUG and TRACE are not rate-limited)."""
    return [l for l in data.decode("utf-8", "replace").splitlines()
            if l.strip() and " DEBUG " not in l and " TRACE " not in l]

def settled_log(within=8.0, quiet=1.0):
    """Waits until the server's log has not grown for `quiet` seconds (at most `within`)."""
    end = time.monotonic() + within
    last, since = server.log_bytes(), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.25)
        now = server.log_bytes()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last

STUN_BOMB_MAX_LINES = 20

def a_stun_bombs():
    """(56.1) 60 KB STUN datagrams of empty MAPPED-ADDRESS / UNKNOWN-ATTRIBUTES /
    ALTERNATE-SERVER attributes from a stranger: 10 at once, then 5 a second
    for 10 s, to every shard, plus 5 as ICE-TCP frames. Each wrote a line per
    attribute (15,000 per datagram); now at most a few lines in all."""
    kinds = (STUN_ALTERNATE_SERVER, STUN_MAPPED_ADDRESS, STUN_UNKNOWN_ATTRIBUTES)
    t0 = totals()
    log0 = server.log_bytes()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sent = 0
    start = time.monotonic()
    for i in range(10):
        sock.sendto(stun_bomb(kinds[i % 3]), ("127.0.0.1", UDP_BASE + i % SHARDS))
        sent += 1
    for i in range(50):  # 5 a second for 10 s
        due = start + 0.2 * (i + 1)
        time.sleep(max(0.0, due - time.monotonic()))
        sock.sendto(stun_bomb(kinds[i % 3]), ("127.0.0.1", UDP_BASE + i % SHARDS))
        sent += 1
    sock.close()
    tcp_sent = 0
    try:
        t = socket.create_connection(("127.0.0.1", UDP_BASE), timeout=5)
        for i in range(5):
            t.sendall(rfc4571(stun_bomb(kinds[i % 3])))
            tcp_sent += 1
        time.sleep(0.5)
        t.close()
    except OSError:
        pass
    t1 = wait_totals(lambda t: ingress_drops(t) >= ingress_drops(t0) + sent, 10.0)
    read = ingress_drops(t1) - ingress_drops(t0)
    log1 = settled_log()
    data = b""
    try:
        with open(server.log_path, "rb") as f:
            f.seek(log0)
            data = f.read(max(0, log1 - log0))
    except (OSError, TypeError):
        pass
    lines = new_log_lines(data)
    ok = read >= sent and len(lines) <= STUN_BOMB_MAX_LINES
    why = (f"{sent} bombs by UDP ({sent * len(stun_bomb(1)) // 1024} KiB, {sent * STUN_BOMB_ATTRS} attributes) "
           f"+ {tcp_sent} by ICE-TCP over {time.monotonic() - start:.1f}s; ingress drops +{read}; "
           f"log +{len(lines)} lines, {len(data)} bytes (at most {STUN_BOMB_MAX_LINES} lines)")
    if read < sent:
        why += "; the shards did not read them all"
    if len(lines) > STUN_BOMB_MAX_LINES:
        why += "; e.g. " + " | ".join(l[:120] for l in lines[:3])
    return {"http": f"log +{len(lines)} lines", "ok": ok, "why": why,
            "observed": {"lines": lines[:20], "read": read, "sent": sent}}

def a_channels():
    """(56.2) A participant opens 200 data channels with 60 KB labels on its own
    association: each refused (refused_channels), the server's RSS bounded,
    the participant's own channel still carries room events."""
    room, me, other = f"abuse-dc-{random.randint(1000, 9999)}", "chanabuser", "chanother"
    count, label = 200, 60000
    t0 = totals()
    args = ["channels", "--url", URL, "--room", room, "--name", me, "--other", other,
            "--count", str(count), "--label-bytes", str(label), "--server-pid", str(server.pid)]
    for who in (me, other):
        t = mint(room, who)
        if t:
            args += ["--token", t]
    r = run_attacker(args, 150)
    if "error" in r:
        return {"http": "-", "ok": False, "why": r["error"], "observed": r}
    t1 = wait_totals(lambda t: t.get("refused_channels", 0) - t0.get("refused_channels", 0) >= count,
                     5.0)
    refused = t1.get("refused_channels", 0) - t0.get("refused_channels", 0)
    b, a = r.get("rss_before_kib"), r.get("rss_after_kib")
    growth = None if a is None or b is None else (a - b) / 1024.0
    extra = [l for l in r.get("opened", []) if l != "events"]
    ok = (r.get("answered") and refused == count and not extra and r.get("roster_after")
          and growth is not None and growth < CHANNEL_RSS_MIB)
    why = (f"{count} channels with {label // 1000} KB labels: {r.get('closed')} reset, "
           f"{len(extra)} opened, all answered in {r.get('answered_secs', 0):.1f}s; "
           f"refused_channels +{refused}; server RSS "
           + (f"{b / 1024:.1f}->{a / 1024:.1f} MiB (+{growth:.1f}, bound {CHANNEL_RSS_MIB:.0f} MiB)"
              if growth is not None else "unknown")
           + f"; its events channel after: roster={'yes' if r.get('roster_after') else 'NO'}")
    if refused != count:
        why += f"; expected refused_channels +{count}"
    if extra:
        why += f"; the server opened {len(extra)} of them"
    return {"http": f"refused {refused}/{count}", "ok": ok, "why": why, "observed": r}

def closed_by_peer(s):
    """Whether the server closed socket s (EOF or a reset), without waiting;
    what it sent is read past (bounded)."""
    try:
        for _ in range(256):
            got = s.recv(65536, socket.MSG_DONTWAIT)
            if not got:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False

def a_ice_tcp():
    """(56.3) ICE-TCP connections that send an empty RFC 4571 frame every 200 ms
    and never a STUN check: closed at --ice-tcp-auth-timeout, descriptors back,
    and a genuine ICE-TCP join from the same address works afterwards."""
    per_ip = max(1, min(30, ICE_TCP_PER_IP - 2))
    addrs = ("127.0.0.2", "127.0.0.3")
    fds0 = server.fds()
    conns = []
    for ip in addrs:
        for shard in range(SHARDS):
            for _ in range(per_ip):
                try:
                    c = socket.create_connection(("127.0.0.1", UDP_BASE + shard), timeout=5,
                                                 source_address=(ip, 0))
                    c.setblocking(False)
                    conns.append(c)
                except OSError:
                    break
    start = time.monotonic()
    closed_at = {}
    max_fds = server.fds() or 0
    limit = ICE_TCP_AUTH + 10.0
    while len(closed_at) < len(conns) and time.monotonic() - start < limit:
        for i, c in enumerate(conns):
            if i in closed_at:
                continue
            try:
                c.send(b"\x00\x00")
            except BlockingIOError:
                pass
            except OSError:
                closed_at[i] = time.monotonic() - start
                continue
            if closed_by_peer(c):
                closed_at[i] = time.monotonic() - start
        max_fds = max(max_fds, server.fds() or 0)
        time.sleep(0.2)
    for c in conns:
        c.close()
    back = wait_for(lambda: (server.fds() or 1 << 30) <= fds0 + 3, 5.0)
    fds1 = server.fds()
    last = max(closed_at.values()) if closed_at else None
    first = min(closed_at.values()) if closed_at else None
    margin = 3.0
    # A genuine ICE-TCP participant from the first address, whose slots the squatters held.
    room, who = f"abuse-tcp-{random.randint(1000, 9999)}", "tcpgenuine"
    args = ["icetcp", "--url", URL, "--room", room, "--name", who,
            "--from", addrs[0], "--hold", "3"]
    tok = mint(room, who)
    if tok:
        args += ["--token", tok]
    g = run_attacker(args, 60)
    genuine = bool(g.get("connected")) and not g.get("lost")
    ok = (len(conns) == len(addrs) * SHARDS * per_ip and len(closed_at) == len(conns)
          and last is not None and last <= ICE_TCP_AUTH + margin and back and genuine)
    why = (f"{len(conns)} connections ({per_ip} per address per shard from {', '.join(addrs)}), "
           f"an empty frame each every 200 ms: {len(closed_at)} closed"
           + (f" after {first:.1f}-{last:.1f}s" if closed_at else "")
           + f" (auth deadline {ICE_TCP_AUTH:.0f}s + {margin:.0f}s); server fds {fds0}->{max_fds}->{fds1}"
           + ("" if back else " (not back)")
           + "; genuine ICE-TCP join from " + addrs[0] + ": "
           + (f"connected in {g.get('connect_secs', 0):.1f}s, held {g.get('held_secs', 0):.0f}s"
              if genuine else f"FAILED {g.get('error') or g.get('lost') or 'not connected'}"))
    return {"http": f"{len(closed_at)}/{len(conns)} closed", "ok": ok, "why": why,
            "fds": (fds0, fds1), "observed": {"closed_at": closed_at, "genuine": g}}

def pipelined_requests(path, n, host="127.0.0.1"):
    """n GET requests for path, back to back (HTTP/1.1 pipelining)."""
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n" * n).encode()

def a_http_never_read():
    """(56.4) HTTP clients (from 127.0.0.2 and .3) that pipeline 200 requests for
    /assets/app.js with a 2 KB receive buffer and never read: closed at
    --http-write-timeout, descriptors back; /healthz answers meanwhile."""
    per_ip = 30
    addrs = ("127.0.0.2", "127.0.0.3")
    body = pipelined_requests("/assets/app.js", 200)
    fds0 = server.fds()
    socks = []
    for ip in addrs:
        for _ in range(per_ip):
            try:
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
                c.bind((ip, 0))
                c.settimeout(5)
                c.connect(("127.0.0.1", HTTP_PORT))
                c.sendall(body)
                socks.append(c)
            except OSError:
                c.close()
                break
    start = time.monotonic()
    held = wait_for(lambda: (server.fds() or 0) >= fds0 + 0.8 * len(socks), 5.0)
    fds_held = server.fds()
    st, _, _, dt = req("GET", "/healthz", timeout=5)
    limit = WRITE_TIMEOUT + 8.0
    released = wait_for(lambda: (server.fds() or 1 << 30) <= fds0 + 3, limit, every=0.25)
    took = time.monotonic() - start
    fds1 = server.fds()
    closed = sum(closed_by_peer(c) for c in socks)
    for c in socks:
        c.close()
    ok = bool(held) and bool(released) and closed == len(socks) and st == 200 and len(socks) == 2 * per_ip
    why = (f"{len(socks)} clients ({per_ip} from each of {', '.join(addrs)}), 200 pipelined "
           f"requests each, SO_RCVBUF 2048, never read: server fds {fds0}->{fds_held}->{fds1} "
           + (f"back after {took:.1f}s" if released else f"NOT back within {limit:.0f}s")
           + f" (write timeout {WRITE_TIMEOUT:.0f}s); {closed}/{len(socks)} saw the close; "
           f"/healthz meanwhile {st} in {dt * 1000:.0f} ms")
    if not held:
        why += "; they were never held (not connected?)"
    return {"http": f"{closed}/{len(socks)} closed", "ok": ok, "why": why, "fds": (fds0, fds1)}

def room_members(room):
    st, _, body, _ = req("GET", f"/api/v1/rooms/{room}", auth(ADMIN), timeout=5)
    if st != 200:
        return None
    try:
        return json.loads(body).get("participants", [])
    except Exception:
        return None

def a_one_token():
    """(56.5) One token joins 100 times: each join replaces the last (one seat
    per identity), so the room never fills and another identity still joins."""
    room = f"abuse-seat-{random.randint(1000, 9999)}"
    tok = mint(room, "mallory")
    statuses, last = {}, None
    for _ in range(100):
        h = {"Content-Type": "application/sdp"}
        h.update(auth(tok))
        st, hs, body, _ = req("POST", f"/api/v1/rooms/{room}/participants?name=mallory", h,
                              BASE_OFFER, timeout=10)
        k = status_str(st, body)
        statuses[k] = statuses.get(k, 0) + 1
        if st == 201:
            last = hs.get("location")
    members = room_members(room) or []
    mallory = [m for m in members if m.get("identity") == "mallory" or m.get("name") == "mallory"]
    st2, hs2, body2, _ = post_offer(room, "bob", BASE_OFFER)
    after = room_members(room) or []
    cleanup(hs2.get("location") if st2 == 201 else None, room, "bob")
    if last:
        req("DELETE", last, auth(tok))
    ok = AUTH and len(mallory) == 1 and len(members) == 1 and st2 == 201 and len(after) == 2
    why = (f"100 joins with one token: {', '.join(f'{k}x{v}' for k, v in statuses.items())}; "
           f"room then holds {len(members)} ({len(mallory)} of mallory); another identity: "
           f"{status_str(st2, body2)}, room {len(after)}")
    if not AUTH:
        why += "; the server runs without --auth-secret (no identities)"
    return {"http": f"seats {len(mallory)}, bob {st2}", "ok": ok, "why": why}

def run_attacker(args, timeout):
    """Runs an attacker mode to its end; its last JSON line (or {"error": ...})."""
    try:
        p = subprocess.run([ATTACKER_BIN] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"attacker {args[0]}: no answer in {timeout} s"}
    return last_json(p.stdout) or {"error": f"attacker {args[0]}: no output; {p.stderr[-300:]}"}

def last_json(text):
    """The last line of text that is a JSON object, or None."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None

def a_dc_big():
    """(56.6) Ten valid 200 KB data-channel messages from a connected
    participant (a bare str0m client whose SCTP send buffer takes them): each
    is a request over the size limit (dropped_requests), none is counted in
    by_stack (SCTP acknowledging every other packet is not a refusal)."""
    n, size = 10, 200000
    room, who = f"abuse-big-{random.randint(1000, 9999)}", "bigsender"
    t0 = totals()
    args = ["bigmsg", "--url", URL, "--room", room, "--name", who, "--count", str(n),
            "--bytes", str(size)]
    tok = mint(room, who)
    if tok:
        args += ["--token", tok]
    r = run_attacker(args, 120)
    if "error" in r and r["error"]:
        return {"http": "-", "ok": False, "why": str(r["error"]), "observed": r}
    t1 = wait_totals(lambda t: t.get("dropped_requests", 0) - t0.get("dropped_requests", 0) >= n,
                     10.0)
    time.sleep(1.0)  # anything wrongly counted shows by now
    t2 = totals()
    req_d = t1.get("dropped_requests", 0) - t0.get("dropped_requests", 0)
    by_stack = t2.get("dropped_by_stack", 0) - t0.get("dropped_by_stack", 0)
    other = ingress_drops(t2) - ingress_drops(t0) - by_stack
    ok = r.get("sent") == n and r.get("drained") and req_d == n and by_stack == 0
    why = (f"{r.get('sent')} messages of {size // 1000} KB, delivered in {r.get('secs', 0):.1f}s "
           f"(drained={r.get('drained')}): dropped_requests +{req_d}, dropped_by_stack +{by_stack}, "
           f"other ingress drops +{other}")
    if req_d != n:
        why += f"; expected dropped_requests +{n}"
    if r.get("lost"):
        why += f"; sender lost: {r['lost']}"
    return {"http": f"by_stack +{by_stack}", "ok": ok, "why": why, "observed": r}

def a_srtcp():
    """(56.7) SRTCP garbage (RTCP headers, random bodies) from the abuser's own
    5-tuple: each counted once, in dropped_by_stack."""
    n = 40
    t0 = totals()
    r = ATT.cmd(f"garbage {n} 1 rtcp", 30)
    if "error" in r:
        return {"http": "-", "ok": False, "why": r["error"]}
    sent = r.get("sent", 0)
    wait_totals(lambda t: t.get("dropped_by_stack", 0) - t0.get("dropped_by_stack", 0) >= sent, 10.0)
    time.sleep(1.0)  # counted twice, or late elsewhere, shows by now
    t1 = totals()
    by_stack = t1.get("dropped_by_stack", 0) - t0.get("dropped_by_stack", 0)
    all_d = ingress_drops(t1) - ingress_drops(t0)
    flow, fwhy = ATT.flowing(["abuser", "partner1"])
    ok = sent == n and by_stack == sent and flow
    why = (f"{sent} SRTCP garbage datagrams from the abuser's address: dropped_by_stack +{by_stack}, "
           f"all ingress drops +{all_d}")
    if not flow:
        why += "; abuser's call stopped: " + fwhy
    return {"http": f"by_stack +{by_stack}/{sent}", "ok": ok, "why": why, "observed": r}

def a_sigterm():
    s = socket.create_connection(("127.0.0.1", HTTP_PORT), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Partial: ")
    time.sleep(0.5)
    t = time.monotonic()
    server.p.send_signal(signal.SIGTERM)
    limit = SHUTDOWN_DEADLINE + 1.0
    try:
        rc = server.p.wait(limit + 5)
    except subprocess.TimeoutExpired:
        rc = None
    dt = time.monotonic() - t
    s.close()
    if rc is None:
        server.p.kill()
        server.p.wait()
        return {"http": "-", "ok": False,
                "why": f"still running {dt:.1f}s after SIGTERM (deadline {SHUTDOWN_DEADLINE:.0f}s); killed"}
    ok = dt <= limit and rc == 0
    return {"http": f"exit {rc}", "ok": ok,
            "why": f"exited {dt:.1f}s after SIGTERM (deadline {SHUTDOWN_DEADLINE:.0f}s + 1s)"}

ROWS = [
    ("content-type-sdpXYZ", a_content_type),
    ("sdp-error-leak", a_parse_leak),
    ("room-dotdot", a_dotdot),
    ("trickle-unknown-id", a_trickle_unknown),
    ("body-10MB", a_body_10mb),
    ("list-without-token", a_list_noauth),
    ("cors-foreign-origin", a_cors),
    ("post-dup-pt", a_post_dup_pt),
    ("patch-dup-pt", a_patch_dup_pt),
    ("patch-ufrag+reordered", a_patch_ufrag),
    ("patch-reordered", a_patch_reorder),
    ("patch-8000-mlines", a_patch_8000),
    ("offer-16000-mlines", a_offer_16000),
    ("offer-flood-1000", a_offer_flood),
    ("slow-headers", a_slow_headers),
    ("garbage-14000", a_garbage),
    ("pin-flood-20000", a_pins),
    ("stun-many-sources", a_stun_sources),
    ("patch-foreign-if-match-*", a_patch_foreign),
    ("delete-foreign", a_delete_foreign),
    ("stun-attribute-bombs", a_stun_bombs),
    ("channels-200x60KB", a_channels),
    ("ice-tcp-unauthenticated", a_ice_tcp),
    ("http-never-read", a_http_never_read),
    ("one-token-100-joins", a_one_token),
    ("dc-messages-200KB", a_dc_big),
    ("srtcp-garbage", a_srtcp),
]
def row_cost(name):
    """Seconds a row takes beyond its quiet window (measured on the 2-vCPU
    machine), to size the legit call so that it outlasts the attacks."""
    fixed = {"patch-dup-pt": 5, "patch-ufrag+reordered": 10, "patch-reordered": 10,
             "patch-8000-mlines": 6, "offer-16000-mlines": 4,
             "offer-flood-1000": 15 + secs(CONNECT_TIMEOUT, 5), "slow-headers": SLOW_HOLD + 4,
             "garbage-14000": 9, "pin-flood-20000": 8, "stun-many-sources": 7,
             "patch-foreign-if-match-*": 3, "delete-foreign": 3,
             "stun-attribute-bombs": 14, "channels-200x60KB": 14,
             "ice-tcp-unauthenticated": ICE_TCP_AUTH + 10, "http-never-read": WRITE_TIMEOUT + 6,
             "one-token-100-joins": 4, "dc-messages-200KB": 6, "srtcp-garbage": 5}
    return fixed.get(name, 1.5)

def call_seconds(names, quiet):
    """How long the legit call must last to outlast these rows."""
    return sum(row_cost(n) + quiet for n in names) + 30

def start_all(call):
    """Server, legit call (corelay-bench) and attacker; returns when they run."""
    global server, bench, ATT
    server = Server()
    bench = Bench(call)
    BENCHES.append(bench)
    t = time.monotonic()
    while bench.active < 12 and time.monotonic() - t < 30 and bench.p.poll() is None:
        time.sleep(0.2)
    log(f"legit call: {bench.active} participants active")
    ATT = Attacker(f"abuse-{random.randint(1000, 9999)}")
    if "error" in ATT.info or not ATT.info.get("ready"):
        log(f"attacker not ready: {ATT.info.get('error') or 'media did not flow'}")

def restart(call):
    """After a row took the server down: a fresh server (new ports, so that the
    old call's packets do not reach it), call and attacker for the next rows.
    The old call runs to its end against the dead server and keeps its figures."""
    log("the server is down or wedged: restarting server, legit call and attacker")
    if ATT is not None and ATT.p.poll() is None:
        ATT.p.kill()
    server.stop(signal.SIGKILL)
    new_ports()
    PANICS_CAUGHT[0] = 0
    start_all(call)

BENCHES = []

# ------------------------------------------------------------------ verdicts and report (pure)

def hurt(q, a, loss_tol=None, p99_factor=None, p99_abs_ms=None, participants=12):
    """Why the legit call counts as hurt during the attack window `a` against
    the quiet window `q` (window() dicts): [] when it does not. Hurt: a
    participant dropped, loss grew by more than loss_tol, or P99 exceeds both
    p99_factor x and p99_abs_ms + the quiet value."""
    loss_tol = LOSS_TOL if loss_tol is None else loss_tol
    p99_factor = P99_FACTOR if p99_factor is None else p99_factor
    p99_abs_ms = P99_ABS_MS if p99_abs_ms is None else p99_abs_ms
    out = []
    if a["active"] < participants:
        out.append(f"legit participants {a['active']}/{participants}")
    if a["loss"] is not None and a["loss"] > (q["loss"] or 0) + loss_tol:
        out.append(f"legit loss {a['loss']:.1%}")
    if a["p99"] > max(p99_factor * q["p99"], q["p99"] + p99_abs_ms):
        out.append(f"legit P99 {a['p99']:.1f} ms")
    return out

def judge(r, q, a, **tol):
    """(ok, reason) of a row: its own check, whether the server stayed up
    (the sigterm row takes it down on purpose), and the legit call's windows."""
    reasons = []
    ok = bool(r.get("ok"))
    if r.get("why"):
        reasons.append(r["why"])
    if not r.get("up") and r["attack"] != "sigterm-partial-header":
        ok = False
        reasons.insert(0, "DOWN: " + (r.get("upwhy") or ""))
    if r.get("needs_call"):
        if not q or not a:
            reasons.append("no legit-call data for this window")
        else:
            h = hurt(q, a, **tol)
            if h:
                ok = False
                reasons.append("legit call hurt: " + ", ".join(h))
    return ok, "; ".join(x for x in reasons if x)

def fmt_pct(w):
    return "-" if not w or w.get("loss") is None else f"{w['loss'] * 100:.1f}%"

def fmt_ms(w):
    return "-" if not w or w.get("p99") is None else f"{w['p99']:.1f}"

def fmt_num(x, spec=".0f"):
    return "-" if x is None else format(x, spec)

def fmt_bytes(n):
    """Log growth: bytes, with a unit past 10 KiB."""
    if n is None:
        return "-"
    if n < 10 * 1024:
        return f"{n}"
    if n < 10 * 1048576:
        return f"{n / 1024:.0f}K"
    return f"{n / 1048576:.0f}M"

TABLE_HEAD = ["attack", "http", "up", "loss q->a", "P99ms q->a", "RSS MiB", "fds", "log B",
              "verdict"]

def table_row(r):
    upcol = "n/a" if r["attack"] == "sigterm-partial-header" else ("yes" if r["up"] else "NO")
    return [r["attack"], str(r["http"])[:38], upcol,
            f"{fmt_pct(r.get('legit_quiet'))}->{fmt_pct(r.get('legit_attack'))}",
            f"{fmt_ms(r.get('legit_quiet'))}->{fmt_ms(r.get('legit_attack'))}",
            f"{fmt_num(r.get('rss0'))}->{fmt_num(r.get('rss1'))}",
            f"{fmt_num(r.get('fds0'), 'd')}->{fmt_num(r.get('fds1'), 'd')}",
            fmt_bytes(r.get("log_bytes")), r["verdict"]]

def format_table(results):
    """The report's table (a header, a rule, one line per row) and a line
    per row with its verdict and reason, as a list of lines."""
    table = [table_row(r) for r in results]
    widths = [max(len(str(x[i])) for x in table + [TABLE_HEAD]) for i in range(len(TABLE_HEAD))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in [TABLE_HEAD] + table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for r in results:
        lines.append(f"{r['verdict']} {r['attack']}: {r.get('reason') or 'ok'}")
    return lines

def summary_line(results, failed, server_bin, built, commit, dirty, auth_on, shards, took, out):
    return (f"{len(results) - failed}/{len(results)} rows passed; server {server_bin} (built "
            f"{built}; tree at {commit}{' + uncommitted changes' if dirty else ''}), "
            f"{'auth on' if auth_on else 'no auth'}, {shards} shards; {took:.0f}s; "
            f"outputs in {out}")

def main():
    global server, ADMIN, BASE_OFFER, ATT, bench
    configure(os.environ)
    new_ports()
    rows = [r for r in ROWS if selected(r[0], ONLY)]
    call = float(os.environ.get("CALL_SECONDS") or call_seconds([n for n, _ in rows], QUIET))
    log(f"corelay {SERVER_BIN} ({'auth on' if AUTH else 'no auth'}), http {URL}, "
        f"udp {UDP_BASE}+{SHARDS}, outputs {OUT}; legit call {call:.0f}s")
    ADMIN = mint(None, "abuse-admin", admin=True)
    BASE_OFFER = offer("--video-send", "1", "--video-recv", "1")
    start_all(call)
    for i, (name, fn) in enumerate(rows):
        run_row(name, fn)
        if results and results[-1]["attack"] == name and not results[-1]["up"] and i + 1 < len(rows):
            restart(call_seconds([n for n, _ in rows[i + 1:]], QUIET))
    ATT.close()
    # The legit calls' figures exist once they have ended.
    for b in BENCHES:
        left = (b.offset or time.monotonic()) + b.seconds + 10 - time.monotonic()
        if b.p.poll() is None:
            log(f"waiting up to {max(0, left) + 30:.0f}s for the legit call to end")
            try:
                b.p.wait(max(0, left) + 30)
            except subprocess.TimeoutExpired:
                b.p.kill()
    if selected("sigterm-partial-header", ONLY):
        run_row("sigterm-partial-header", a_sigterm, needs_call=False)
    server.stop()

    failed = 0
    for r in results:
        b = r.pop("bench")
        q = window(b.rows(), b.offset, *r["quiet"])
        a = window(b.rows(), b.offset, *r["window"], whole=False)
        r["legit_quiet"], r["legit_attack"] = q, a
        ok, r["reason"] = judge(r, q, a)
        r["verdict"] = "PASS" if ok else "FAIL"
        failed += not ok
    lines = format_table(results)
    commit = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(SERVER_BIN)))
    lines.append("")
    lines.append(summary_line(results, failed, SERVER_BIN, built, commit, bool(dirty), AUTH,
                              SHARDS, time.monotonic() - T0, OUT))
    report = "\n".join(lines) + "\n"
    print(report)
    open(os.path.join(OUT, "report.txt"), "w").write(report)
    for r in results:
        r.pop("quiet"), r.pop("window")
    json.dump(results, open(os.path.join(OUT, "results.json"), "w"), indent=1, default=str)
    return 1 if failed else 0

def run():
    try:
        return main()
    finally:
        if server is not None and server.alive():
            server.stop(signal.SIGKILL)
        if ATT is not None and ATT.p.poll() is None:
            ATT.p.kill()
        for b in BENCHES:
            if b.p.poll() is None:
                b.p.kill()

if __name__ == "__main__":
    sys.exit(run())
