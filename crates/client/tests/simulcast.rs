//! A simulcast publisher against a bare str0m answerer standing in for an
//! SFU, in virtual time, in-process (no sockets, no clock): what the
//! publisher offers, what it sends on each rid, and how it answers the
//! SFU's `layers` messages and per-rid keyframe requests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelay_client::payload::{self, PayloadCodec};
use corelay_client::simulcast::{RIDS, layer_of};
use corelay_client::{Clock, NoObserver, Participant, ParticipantConfig, Recording, VideoSource};
use str0m::change::SdpOffer;
use str0m::channel::ChannelId;
use str0m::media::{KeyframeRequestKind, Mid, Rid};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, ExtensionMap};
use str0m::{Candidate, Event, Input, Output, Rtc};

const PUB: &str = "127.0.0.1:40000";
const SFU: &str = "127.0.0.1:50000";

/// One received video packet, as the stand-in SFU saw it.
#[derive(Debug, Clone)]
struct Got {
    at: Duration,
    rid: Option<String>,
    ssrc: u32,
    seq: u64,
    layer: u8,
    frame: u32,
    keyframe: bool,
    last: bool,
    abs_capture: bool,
}

struct Harness {
    t0: Instant,
    now: Instant,
    publisher: Participant,
    sfu: Rtc,
    mid: Mid,
    channel: Option<ChannelId>,
    got: Vec<Got>,
    corrupt: usize,
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

impl Harness {
    fn new(layers: Vec<VideoSource>) -> (Harness, String) {
        let t0 = Instant::now();
        let mut cfg = ParticipantConfig::new("pub");
        cfg.publish_audio = false;
        cfg.video_slots = 0;
        cfg.audio_slots = 0;
        cfg.simulcast = layers;
        cfg.video_offset = 0;
        cfg.seed = 7;
        cfg.clock = Clock::fixed(t0, 1_000_000_000);
        let (mut publisher, offer) = Participant::new(cfg, addr(PUB), t0).unwrap();

        // The server's extension map: str0m's standard one (mid 4, rid 10,
        // repaired rid 11) plus abs-capture-time at 9.
        let mut exts = ExtensionMap::standard();
        exts.set(9, Extension::AbsoluteCaptureTime);
        let mut b = Rtc::builder()
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_h264(true);
        *b.extension_map() = exts;
        let mut sfu = b.build(t0);
        sfu.add_local_candidate(Candidate::host(addr(SFU), "udp").unwrap());
        let answer = sfu
            .sdp_api()
            .accept_offer(SdpOffer::from_sdp_string(&offer).unwrap())
            .unwrap();
        publisher.accept_answer(&answer.to_sdp_string()).unwrap();
        let mid = publisher.snapshot().video_mids[0].as_str().into();
        (
            Harness {
                t0,
                now: t0,
                publisher,
                sfu,
                mid,
                channel: None,
                got: Vec::new(),
                corrupt: 0,
            },
            offer,
        )
    }

    /// Run both ends for `d` in 1 ms steps, delivering datagrams at once.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now += Duration::from_millis(1);
            let now = self.now;
            let mut obs = NoObserver;
            self.publisher.handle_timeout(now, &mut obs);
            self.sfu.handle_input(Input::Timeout(now)).unwrap();
            // Ping-pong until both are quiet (bounded). Each end's output is
            // drained after every datagram (str0m's RTP mode holds one
            // received packet at a time).
            let mut to_sfu = Vec::new();
            self.publisher
                .poll_output(now, &mut obs, &mut |_, d| to_sfu.push(d.to_vec()));
            let mut to_pub = Vec::new();
            self.drain_sfu(&mut to_pub);
            for _ in 0..1000 {
                if to_sfu.is_empty() && to_pub.is_empty() {
                    break;
                }
                for d in std::mem::take(&mut to_sfu) {
                    let r = Receive::new(Protocol::Udp, addr(PUB), addr(SFU), &d).unwrap();
                    self.sfu.handle_input(Input::Receive(now, r)).unwrap();
                    self.drain_sfu(&mut to_pub);
                }
                for d in std::mem::take(&mut to_pub) {
                    self.publisher.handle_datagram(now, addr(SFU), &d, &mut obs);
                    self.publisher
                        .poll_output(now, &mut obs, &mut |_, d| to_sfu.push(d.to_vec()));
                }
            }
        }
    }

    fn drain_sfu(&mut self, to_pub: &mut Vec<Vec<u8>>) {
        loop {
            match self.sfu.poll_output().unwrap() {
                Output::Timeout(_) => break,
                Output::Transmit(t) => to_pub.push(t.contents.to_vec()),
                Output::Event(e) => self.on_event(e),
            }
        }
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::ChannelOpen(id, _) => self.channel = Some(id),
            Event::RtpPacket(p) => {
                let ssrc = p.header.ssrc;
                let rid = self
                    .sfu
                    .direct_api()
                    .stream_rx(&ssrc)
                    .and_then(|s| s.rid())
                    .map(|r| r.to_string());
                match payload::verify(PayloadCodec::H264, &p.payload) {
                    Ok(v) => self.got.push(Got {
                        at: self.now - self.t0,
                        rid,
                        ssrc: *ssrc,
                        seq: *p.seq_no,
                        layer: v.stamp.layer,
                        frame: v.stamp.frame,
                        keyframe: v.keyframe == Some(true),
                        last: v.stamp.index + 1 == v.stamp.count,
                        abs_capture: p.header.ext_vals.abs_capture_time.is_some(),
                    }),
                    Err(_) => self.corrupt += 1,
                }
            }
            _ => {}
        }
    }

    fn send_layers(&mut self, active: &[&str]) {
        let msg =
            serde_json::json!({"type": "layers", "mid": self.mid.to_string(), "active": active});
        let id = self.channel.expect("data channel open");
        let mut ch = self.sfu.channel(id).unwrap();
        assert!(ch.write(false, msg.to_string().as_bytes()).unwrap());
    }

    fn since(&self, at: Duration) -> impl Iterator<Item = &Got> {
        self.got.iter().filter(move |g| g.at > at)
    }

    /// Frame numbers of complete keyframes on `rid` after `at`.
    fn keyframes(&self, rid: &str, at: Duration) -> Vec<u32> {
        self.since(at)
            .filter(|g| g.rid.as_deref() == Some(rid) && g.keyframe && g.last)
            .map(|g| g.frame)
            .collect()
    }

    fn frames(&self, rid: &str, at: Duration) -> Vec<u32> {
        self.since(at)
            .filter(|g| g.rid.as_deref() == Some(rid) && g.last)
            .map(|g| g.frame)
            .collect()
    }
}

fn asset(name: &str) -> VideoSource {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/media")
        .join(name);
    VideoSource::Recorded(Arc::new(Recording::load(&p).unwrap()))
}

fn synthetic(kbps: u32) -> VideoSource {
    // No periodic keyframes within the test: every keyframe after the
    // first is one the test asked for.
    VideoSource::Synthetic {
        bitrate_bps: kbps * 1000,
        fps: 30,
        keyframe_interval: 100_000,
    }
}

#[test]
fn offers_three_rids_and_sends_each_layer_on_its_own_stream() {
    let (mut h, offer) = Harness::new(vec![
        asset("video-180p30.frames"),
        asset("video-360p30.frames"),
        asset("video-720p30.frames"),
    ]);
    assert!(offer.contains("a=simulcast:send q;h;f"), "{offer}");
    for rid in RIDS {
        assert!(offer.contains(&format!("a=rid:{rid} send")), "{offer}");
    }
    assert!(
        offer.contains("urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"),
        "{offer}"
    );
    assert!(
        offer.contains("urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id"),
        "{offer}"
    );

    h.run(Duration::from_secs(7));
    assert_eq!(h.corrupt, 0);
    let mut ssrcs = Vec::new();
    for (i, rid) in RIDS.iter().enumerate() {
        let on: Vec<&Got> = h
            .got
            .iter()
            .filter(|g| g.rid.as_deref() == Some(rid))
            .collect();
        assert!(!on.is_empty(), "nothing on rid {rid}");
        // The stamp names the layer the packet was sent on.
        assert!(on.iter().all(|g| g.layer == layer_of(i)), "rid {rid}");
        assert!(on.iter().all(|g| g.abs_capture));
        // One SSRC per layer, its own gapless sequence numbers.
        assert!(on.iter().all(|g| g.ssrc == on[0].ssrc));
        assert!(on.windows(2).all(|w| w[1].seq == w[0].seq + 1), "rid {rid}");
        ssrcs.push(on[0].ssrc);
    }
    ssrcs.dedup();
    assert_eq!(ssrcs.len(), 3);
    // Every capture instant on every layer, shared frame numbers, starting
    // with a keyframe, keyframes on the same frames (the recordings' IDRs
    // every 90 frames).
    let q = h.frames("q", Duration::ZERO);
    assert!(q.len() > 150, "{}", q.len());
    assert_eq!(q, h.frames("h", Duration::ZERO));
    assert_eq!(q, h.frames("f", Duration::ZERO));
    assert_eq!(q[0], 0);
    let kq = h.keyframes("q", Duration::ZERO);
    assert_eq!(kq, vec![0, 90, 180]);
    assert_eq!(kq, h.keyframes("h", Duration::ZERO));
    assert_eq!(kq, h.keyframes("f", Duration::ZERO));
    // The higher layers are bigger.
    let packets = |rid: &str| {
        h.got
            .iter()
            .filter(|g| g.rid.as_deref() == Some(rid))
            .count()
    };
    assert!(packets("q") < packets("h") && packets("h") < packets("f"));
    let s = h.publisher.snapshot();
    assert_eq!(s.layers_active, 0b111);
    assert_eq!(s.sent_frames_by_layer[0], 0);
    assert!(s.sent_frames_by_layer[1] == s.sent_frames_by_layer[3]);
}

#[test]
fn layers_message_pauses_and_resumes_with_a_keyframe() {
    let (mut h, _) = Harness::new(vec![synthetic(150), synthetic(400), synthetic(1500)]);
    h.run(Duration::from_secs(2));
    assert!(h.channel.is_some());
    assert_eq!(h.keyframes("f", Duration::ZERO), vec![0]);
    assert_eq!(h.keyframes("h", Duration::ZERO), vec![0]);

    // Pause f (and a message for another track changes nothing).
    let msg = serde_json::json!({"type": "layers", "mid": "nope", "active": []});
    let id = h.channel.unwrap();
    h.sfu
        .channel(id)
        .unwrap()
        .write(false, msg.to_string().as_bytes())
        .unwrap();
    h.send_layers(&["q", "h"]);
    h.run(Duration::from_millis(200));
    let paused_at = h.now - h.t0;
    assert_eq!(h.publisher.snapshot().layers_active, 0b011);
    assert_eq!(h.publisher.snapshot().layer_messages, 1);
    h.run(Duration::from_secs(1));
    assert!(h.frames("f", paused_at).is_empty(), "f still sent");
    assert!(h.frames("q", paused_at).len() >= 29);
    assert!(h.frames("h", paused_at).len() >= 29);
    assert!(h.keyframes("q", paused_at).is_empty());

    // Resume: f starts again with a keyframe, the others go on as they were.
    let before = h.now - h.t0;
    h.send_layers(&["q", "h", "f"]);
    h.run(Duration::from_secs(1));
    let f = h.frames("f", before);
    assert!(f.len() >= 29, "{}", f.len());
    let kf = h.keyframes("f", before);
    assert_eq!(kf, vec![f[0]], "resumed f must start with a keyframe");
    assert!(h.keyframes("q", before).is_empty());
    assert!(h.keyframes("h", before).is_empty());
    // Frame numbers kept counting while f was paused: it resumes at the
    // frame the other layers are at.
    assert!(h.frames("q", before).contains(&f[0]));
    assert_eq!(h.publisher.snapshot().layers_active, 0b111);
}

#[test]
fn keyframe_request_for_one_rid_makes_a_keyframe_on_that_rid_only() {
    let (mut h, _) = Harness::new(vec![synthetic(150), synthetic(400), synthetic(1500)]);
    h.run(Duration::from_secs(2));
    let before = h.now - h.t0;
    let mid = h.mid;
    {
        let mut api = h.sfu.direct_api();
        let rx = api
            .stream_rx_by_mid(mid, Some(Rid::from("h")))
            .expect("rx stream for rid h");
        rx.request_keyframe(KeyframeRequestKind::Pli);
    }
    h.run(Duration::from_millis(500));
    assert_eq!(h.keyframes("h", before).len(), 1);
    assert!(h.keyframes("q", before).is_empty());
    assert!(h.keyframes("f", before).is_empty());
    assert_eq!(h.publisher.snapshot().sent_keyframes_by_layer, [0, 1, 2, 1]);
}
