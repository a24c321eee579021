#!/usr/bin/env python3
"""aiortc peer for the corelay interop tests.

  publish    POST one sendonly video (+ sendonly audio) and an `events` data
             channel to /api/v1/rooms/{room}/participants, send a moving test
             pattern for --seconds.
  subscribe  POST --slots recvonly video + one recvonly audio + the data
             channel, decode whatever the server puts in the slots and report
             decoded frame counts per slot mid.
  whep       POST one recvonly video + one recvonly audio (no data channel) to
             /whep/{room}, the way a WHEP player does; report decoded video
             frames and audio frames per mid.

Everything it has to say goes to stdout as JSON lines, e.g.
  {"event": "joined", "participant": "p1", "location": "...", "answer": "..."}
  {"event": "dc", "message": {...room event...}}
  {"event": "frames", "mid": "1", "count": 42, "width": 320, "height": 240}
  {"event": "audio", "mid": "2", "count": 150, "sample_rate": 48000}
  {"event": "done"}
"""

import argparse
import array
import asyncio
import fractions
import json
import logging
import math
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import aioice.ice
from aiortc import (
    AudioStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpHeaderExtensionParameters,
    RTCRtpSender,
    RTCSessionDescription,
    VideoStreamTrack,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame, VideoFrame

# aioice never offers 127.0.0.1 as a host candidate; in the loopback-only
# namespace of the tests that is the only address there is.
_orig_get_host_addresses = aioice.ice.get_host_addresses


def _host_addresses(use_ipv4, use_ipv6):
    addrs = _orig_get_host_addresses(use_ipv4, use_ipv6)
    return addrs if addrs else (["127.0.0.1"] if use_ipv4 else [])


aioice.ice.get_host_addresses = _host_addresses


def emit(**obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class PatternTrack(VideoStreamTrack):
    """A moving pattern (a flat frame compresses to nothing). No numpy needed."""

    def __init__(self, width=320, height=240):
        super().__init__()
        self.width, self.height = width, height
        # Rows twice as wide as the frame; a frame is a window sliding along them.
        self.rows = [bytes(((x * 2) ^ (y * 2)) & 0xFF for x in range(2 * width)) for y in range(height)]
        self.n = 0

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        self.n += 1
        w, h = self.width, self.height
        frame = VideoFrame(width=w, height=h, format="yuv420p")
        shift = (self.n * 4) % w
        y_plane = frame.planes[0]
        pad = bytes(y_plane.line_size - w)
        y_plane.update(b"".join(row[shift:shift + w] + pad for row in self.rows))
        for i, value in ((1, (self.n * 3) % 256), (2, 255 - (self.n * 5) % 256)):
            plane = frame.planes[i]
            plane.update(bytes([value]) * (plane.line_size * (h // 2)))
        frame.pts, frame.time_base = pts, time_base
        return frame


class ToneTrack(AudioStreamTrack):
    """A 400 Hz tone, 20 ms frames at 48 kHz (so the audio level is not zero)."""

    RATE, SAMPLES = 48000, 960

    def __init__(self):
        super().__init__()
        tone = array.array("h", (int(8000 * math.sin(2 * math.pi * 400 * i / self.RATE)) for i in range(self.SAMPLES)))
        if sys.byteorder != "little":
            tone.byteswap()
        self.pcm = tone.tobytes()

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        if hasattr(self, "_start"):
            self._timestamp += self.SAMPLES
            wait = self._start + (self._timestamp / self.RATE) - time.time()
            await asyncio.sleep(wait)
        else:
            self._start = time.time()
            self._timestamp = 0
        frame = AudioFrame(format="s16", layout="mono", samples=self.SAMPLES)
        frame.planes[0].update(self.pcm)
        frame.sample_rate = self.RATE
        frame.pts = self._timestamp
        frame.time_base = fractions.Fraction(1, self.RATE)
        return frame


def http(method, url, body=None, content_type=None):
    req = urllib.request.Request(url, data=body.encode() if body is not None else None, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, dict(res.headers), res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()
    except OSError as e:
        return 0, {}, f"{type(e).__name__}: {e}"


def copy_candidates(sdp):
    """Diagnostic workaround: repeat the answer's a=candidate lines in every
    m-section. aiortc takes a shared transport's remote candidates from the
    *last* m-section using it, and an answer with candidates only in the first
    bundled m-section then leaves it with none."""
    lines = sdp.replace("\r\n", "\n").split("\n")
    cands = [l for l in lines if l.startswith("a=candidate:")]
    out, in_media, has = [], False, False
    for l in lines:
        if l.startswith("m="):
            if in_media and not has:
                out.extend(cands)
            in_media, has = True, False
        if l.startswith("a=candidate:"):
            has = True
        if l:
            out.append(l)
    if in_media and not has:
        out.extend(cands)
    return "\r\n".join(out) + "\r\n"


ABS_SEND_TIME = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"


def legacy_extmap_ids():
    """Number the header extensions as aiortc < 1.8 did: abs-send-time on
    video at id 2, which ssrc-audio-level has on audio. A server that echoes
    both in its answer makes aiortc read the 1-byte audio level as a 3-byte
    abs-send-time: RTP parsing fails and nothing is received (aiortc 1.8 moved
    abs-send-time to id 3)."""
    from aiortc.codecs import HEADER_EXTENSIONS

    # The dict itself is shared with rtcpeerconnection: change it in place.
    HEADER_EXTENSIONS["video"] = [
        RTCRtpHeaderExtensionParameters(id=2 if e.uri == ABS_SEND_TIME else e.id, uri=e.uri)
        for e in HEADER_EXTENSIONS["video"]
    ]


def prefer_codec(transceiver, codec):
    caps = RTCRtpSender.getCapabilities(transceiver.kind)
    wanted = [c for c in caps.codecs if c.mimeType.lower() == f"{transceiver.kind}/{codec}"]
    rtx = [c for c in caps.codecs if c.mimeType.lower().endswith("/rtx")]
    if wanted:
        transceiver.setCodecPreferences(wanted + rtx)


async def run(args):
    if args.legacy_extmap_ids:
        legacy_extmap_ids()
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    counts = {}
    tasks = []

    @pc.on("connectionstatechange")
    def on_state():
        emit(event="connection", state=pc.connectionState)

    if args.mode == "publish":
        vt = pc.addTransceiver(PatternTrack(), direction="sendonly")
        if args.codec:
            prefer_codec(vt, args.codec)
        if args.audio:
            pc.addTransceiver(ToneTrack(), direction="sendonly")
    else:
        for _ in range(1 if args.mode == "whep" else args.slots):
            t = pc.addTransceiver("video", direction="recvonly")
            if args.codec:
                prefer_codec(t, args.codec)
        pc.addTransceiver("audio", direction="recvonly")

    if args.mode != "whep":
        dc = pc.createDataChannel("events")

        @dc.on("message")
        def on_message(msg):
            try:
                emit(event="dc", message=json.loads(msg))
            except ValueError:
                emit(event="dc-raw", message=str(msg))

    async def consume(transceiver, track):
        mid = transceiver.mid
        last_report = 0.0
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            c = counts.setdefault(mid, 0) + 1
            counts[mid] = c
            now = time.time()
            if now - last_report > 0.5:
                last_report = now
                if track.kind == "video":
                    emit(event="frames", mid=mid, count=c, width=frame.width, height=frame.height)
                else:
                    emit(event="audio", mid=mid, count=c, sample_rate=frame.sample_rate)

    @pc.on("track")
    def on_track(track):
        transceiver = next((t for t in pc.getTransceivers() if t.receiver.track is track), None)
        if transceiver is not None:
            tasks.append(asyncio.ensure_future(consume(transceiver, track)))

    # aiortc gathers all candidates in setLocalDescription: no trickle.
    await pc.setLocalDescription(await pc.createOffer())
    if args.mode == "whep":
        url = f"{args.base}/whep/{urllib.parse.quote(args.room)}"
    else:
        url = f"{args.base}/api/v1/rooms/{urllib.parse.quote(args.room)}/participants?name={urllib.parse.quote(args.name)}"
    status, headers, body = await asyncio.to_thread(http, "POST", url, pc.localDescription.sdp, "application/sdp")
    if status != 201:
        emit(event="error", status=status, body=body, offer=pc.localDescription.sdp)
        await pc.close()
        return 1
    location = headers.get("Location") or headers.get("location")
    # The public id; the Location's last segment is a secret capability.
    participant = headers.get("Participant-Id") or headers.get("participant-id")
    emit(event="joined", participant=participant, location=location,
         offer=pc.localDescription.sdp, answer=body)
    if args.copy_candidates:
        body = copy_candidates(body)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))

    deadline = time.time() + args.seconds
    while time.time() < deadline and pc.connectionState not in ("failed", "closed"):
        await asyncio.sleep(0.2)
    emit(event="summary", frames=counts, connection=pc.connectionState)
    status, _, _ = await asyncio.to_thread(http, "DELETE", urllib.parse.urljoin(args.base, location))
    emit(event="deleted", status=status)
    for t in tasks:
        t.cancel()
    await pc.close()
    emit(event="done")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["publish", "subscribe", "whep"])
    p.add_argument("--base", required=True, help="http://127.0.0.1:PORT")
    p.add_argument("--room", required=True)
    p.add_argument("--name", default="aiortc")
    p.add_argument("--codec", choices=["h264", "vp8"], help="prefer this video codec in the offer")
    p.add_argument("--slots", type=int, default=3)
    p.add_argument("--audio", action="store_true", help="publish: also send a tone")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--copy-candidates", action="store_true",
                   help="repeat the answer's candidates in every m-section (works around aiortc's bundle handling)")
    p.add_argument("--legacy-extmap-ids", action="store_true",
                   help="offer abs-send-time (video) and ssrc-audio-level (audio) both at id 2, as aiortc < 1.8")
    p.add_argument("--debug", action="store_true", help="aiortc/aioice debug logging to stderr")
    args = p.parse_args()
    if args.debug:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
