#!/usr/bin/env bash
# Regenerates the media the benchmark replays (run from anywhere):
#
#   assets/media/video-360p30.frames   640x360,  ~400 kbps  (the article's stream; simulcast rid "h")
#   assets/media/video-180p30.frames   320x180,  ~150 kbps  (simulcast rid "q")
#   assets/media/video-720p30.frames   1280x720, ~1500 kbps (simulcast rid "f")
#
# Source: ffmpeg's synthetic testsrc2 pattern (moving objects, scrolling
# gradient, a clock) with temporal grain so it behaves like a camera rather
# than a static slide, 30 fps, 10 s, drawn at each size from the same
# generator and noise seed. Encoded with x264 constrained baseline, no
# B-frames, tune=zerolatency, CBR (nal-hrd=cbr, VBV buffer half a second),
# an IDR every 3 s (keyint 90, no scene-cut IDRs): the three layers have
# the same frame count and their keyframes fall on the same frames, as a
# simulcast encoder's do. Then `corelay-bench packetize` splits each into
# RTP payloads the way libwebrtc does (STAP-A for SPS/PPS, FU-A at 1200
# bytes) and writes one line per frame. Only the frame files are checked in
# (the .h264 files are temporaries).
#
# Usage: make-assets.sh [360|180|720 ...]   (default: all three)
# BENCH_BIN=path/to/corelay-bench uses that binary to packetize instead of
# `cargo run --release`.
#
# Needs: ffmpeg with libx264 (Debian: apt-get install -y ffmpeg), cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# encode HEIGHT WIDTH KBPS LEVEL
encode() {
  local h=$1 w=$2 kbps=$3 level=$4
  local name="video-${h}p30"
  ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i "testsrc2=size=${w}x${h}:rate=30:duration=10,noise=alls=10:allf=t+u:all_seed=42,format=yuv420p" \
    -c:v libx264 -profile:v baseline -level "$level" -preset veryfast -tune zerolatency \
    -b:v "${kbps}k" -minrate "${kbps}k" -maxrate "${kbps}k" -bufsize "$((kbps / 2))k" -bf 0 \
    -threads 1 -filter_threads 1 -x264-params "threads=1:keyint=90:min-keyint=90:scenecut=0:nal-hrd=cbr:force-cfr=1:aud=1:repeat-headers=1" \
    -f h264 "$tmp/$name.h264"
  if [ -n "${BENCH_BIN:-}" ]; then
    "$BENCH_BIN" packetize --input "$tmp/$name.h264" --output "$here/$name.frames" --fps 30 --mtu 1200
  else
    (cd "$root" && cargo run -q --release -p corelay-bench -- packetize \
      --input "$tmp/$name.h264" --output "$here/$name.frames" --fps 30 --mtu 1200)
  fi
  ls -l "$here/$name.frames"
}

layers=("$@")
[ ${#layers[@]} -gt 0 ] || layers=(360 180 720)
for l in "${layers[@]}"; do
  case "$l" in
    360) encode 360 640 400 3.0 ;;
    180) encode 180 320 150 3.0 ;;
    720) encode 720 1280 1500 3.1 ;;
    *) echo "unknown layer $l (360, 180 or 720)" >&2; exit 2 ;;
  esac
done
