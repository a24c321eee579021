#!/usr/bin/env bash
# Regenerates the media the benchmark replays (run from anywhere):
#
#   assets/media/video-360p30.frames   packetized H.264 frame file (sizes, types, timestamps)
#
# Source: ffmpeg's synthetic testsrc2 pattern (moving objects, scrolling
# gradient, a clock) with temporal grain so it behaves like a camera rather
# than a static slide, 640x360 at 30 fps, 10 s. Encoded with x264
# constrained baseline, no B-frames, tune=zerolatency, ~400 kbps CBR
# (nal-hrd=cbr), an IDR every 3 s (keyint 90, no scene-cut IDRs). Then
# `corelay-bench packetize` splits it into RTP payloads the way libwebrtc
# does (STAP-A for SPS/PPS, FU-A at 1200 bytes) and writes one line per
# frame. Only the frame file is checked in (the .h264 is a temporary).
#
# Needs: ffmpeg with libx264 (Debian: apt-get install -y ffmpeg), cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

ffmpeg -hide_banner -loglevel error -y \
  -f lavfi -i "testsrc2=size=640x360:rate=30:duration=10,noise=alls=10:allf=t+u:all_seed=42,format=yuv420p" \
  -c:v libx264 -profile:v baseline -level 3.0 -preset veryfast -tune zerolatency \
  -b:v 400k -minrate 400k -maxrate 400k -bufsize 200k -bf 0 \
  -threads 1 -filter_threads 1 -x264-params "threads=1:keyint=90:min-keyint=90:scenecut=0:nal-hrd=cbr:force-cfr=1:aud=1:repeat-headers=1" \
  -f h264 "$tmp/video-360p30.h264"

cd "$root"
cargo run -q --release -p corelay-bench -- packetize \
  --input "$tmp/video-360p30.h264" --output "$here/video-360p30.frames" --fps 30 --mtu 1200
ls -l "$here/video-360p30.frames"
