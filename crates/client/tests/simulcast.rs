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
    /// Every verified packet with its rid, for a forwarding test to take.
    raw: Vec<(Option<String>, str0m::rtp::RtpPacket)>,
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
                raw: Vec::new(),
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
            let mut events = Vec::new();
            exchange(
                self.now,
                (&mut self.publisher, addr(PUB)),
                (&mut self.sfu, addr(SFU)),
                &mut events,
            );
            for e in events {
                self.on_event(e);
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
                        rid: rid.clone(),
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
                self.raw.push((rid, *p));
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

/// A subscriber's end of a stand-in SFU: the subscriber's offer (one video
/// slot) answered by a bare str0m that sends on that slot one stream made
/// of the publisher's layers, switching at keyframes and rewriting SSRC,
/// sequence numbers and timestamps as an SFU must.
struct Forward {
    rtc: Rtc,
    sub: Participant,
    slot: Mid,
    ssrc: str0m::rtp::Ssrc,
    pt: str0m::media::Pt,
    /// Layer (rid index) being forwarded, and the one wanted.
    cur: Option<usize>,
    want: usize,
    seq: u64,
    /// Added to the current layer's timestamps.
    ts_offset: u32,
    last_ts: u32,
    switches: u64,
}

const SUB: &str = "127.0.0.1:40001";
const SFU_B: &str = "127.0.0.1:50001";

impl Forward {
    fn new(t0: Instant) -> Forward {
        let mut cfg = ParticipantConfig::new("sub");
        cfg.publish_audio = false;
        cfg.publish_video = false;
        cfg.video_slots = 1;
        cfg.audio_slots = 0;
        cfg.data_channel = false;
        cfg.seed = 9;
        cfg.clock = Clock::fixed(t0, 1_000_000_000);
        let (mut sub, offer) = Participant::new(cfg, addr(SUB), t0).unwrap();
        let mut exts = ExtensionMap::standard();
        exts.set(9, Extension::AbsoluteCaptureTime);
        let mut b = Rtc::builder()
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_h264(true);
        *b.extension_map() = exts;
        let mut rtc = b.build(t0);
        rtc.add_local_candidate(Candidate::host(addr(SFU_B), "udp").unwrap());
        let answer = rtc
            .sdp_api()
            .accept_offer(SdpOffer::from_sdp_string(&offer).unwrap())
            .unwrap();
        sub.accept_answer(&answer.to_sdp_string()).unwrap();
        let slot: Mid = sub.snapshot().slots.keys().next().unwrap().as_str().into();
        // H.264 packetization-mode 1, as the publisher sends.
        let pt = {
            let media = rtc.media(slot).unwrap();
            let cfg = rtc.codec_config();
            *media
                .remote_pts()
                .iter()
                .find(|pt| {
                    cfg.params().iter().any(|p| {
                        p.pt() == **pt
                            && p.spec().codec == str0m::format::Codec::H264
                            && p.spec().format.packetization_mode == Some(1)
                    })
                })
                .unwrap()
        };
        // The send stream str0m made for the slot when it answered (its
        // SSRC is in the answer): one stable SSRC whatever layer is sent.
        let ssrc = rtc
            .direct_api()
            .stream_tx_by_mid(slot, None)
            .unwrap()
            .ssrc();
        Forward {
            rtc,
            sub,
            slot,
            ssrc,
            pt,
            cur: None,
            want: 0,
            seq: 1000,
            ts_offset: 0,
            last_ts: 0,
            switches: 0,
        }
    }

    /// A packet from the publisher on layer `layer`: forward it if it is on
    /// the current layer, or switch to the wanted one at its keyframe.
    fn on_packet(&mut self, layer: usize, p: &str0m::rtp::RtpPacket, now: Instant) {
        if !self.rtc.is_connected() {
            // As an SFU: nothing goes to a subscriber before its DTLS is up.
            return;
        }
        let v = payload::verify(PayloadCodec::H264, &p.payload).unwrap();
        let key_start = v.keyframe == Some(true) && v.stamp.index == 0;
        if layer == self.want && self.cur != Some(layer) && key_start {
            if self.cur.is_some() {
                self.switches += 1;
            }
            self.cur = Some(layer);
            // Continue the slot's timestamps one frame after the last.
            self.ts_offset = self
                .last_ts
                .wrapping_add(3000)
                .wrapping_sub(p.header.timestamp);
        }
        if self.cur != Some(layer) {
            return;
        }
        let ts = p.header.timestamp.wrapping_add(self.ts_offset);
        self.last_ts = ts;
        let exts = str0m::rtp::ExtensionValues {
            abs_capture_time: p.header.ext_vals.abs_capture_time,
            ..Default::default()
        };
        let mut api = self.rtc.direct_api();
        let tx = api.stream_tx(&self.ssrc).unwrap();
        tx.write_rtp(
            str0m::rtp::RtpWrite::new(self.pt, self.seq.into(), ts, now, &p.payload[..])
                .marker(p.header.marker)
                .ext_vals(exts),
        );
        self.seq += 1;
    }

    fn run_step(&mut self, now: Instant) {
        let mut events = Vec::new();
        exchange(
            now,
            (&mut self.sub, addr(SUB)),
            (&mut self.rtc, addr(SFU_B)),
            &mut events,
        );
    }
}

/// One virtual instant between a client and a bare str0m `Rtc` standing in
/// for the SFU: both handle their timers, then datagrams go both ways until
/// both are quiet (bounded). Each end is drained after every datagram
/// (str0m's RTP mode holds one received packet at a time); the `Rtc`'s
/// events are kept in `events`.
fn exchange(
    now: Instant,
    (client, client_addr): (&mut Participant, SocketAddr),
    (rtc, rtc_addr): (&mut Rtc, SocketAddr),
    events: &mut Vec<Event>,
) {
    fn drain(rtc: &mut Rtc, out: &mut Vec<Vec<u8>>, events: &mut Vec<Event>) {
        loop {
            match rtc.poll_output().unwrap() {
                Output::Timeout(_) => break,
                Output::Transmit(t) => out.push(t.contents.to_vec()),
                Output::Event(e) => events.push(e),
            }
        }
    }
    let mut obs = NoObserver;
    client.handle_timeout(now, &mut obs);
    rtc.handle_input(Input::Timeout(now)).unwrap();
    let mut to_rtc = Vec::new();
    client.poll_output(now, &mut obs, &mut |_, d| to_rtc.push(d.to_vec()));
    let mut to_client = Vec::new();
    drain(rtc, &mut to_client, events);
    for _ in 0..1000 {
        if to_rtc.is_empty() && to_client.is_empty() {
            break;
        }
        for d in std::mem::take(&mut to_rtc) {
            let r = Receive::new(Protocol::Udp, client_addr, rtc_addr, &d).unwrap();
            rtc.handle_input(Input::Receive(now, r)).unwrap();
            drain(rtc, &mut to_client, events);
        }
        for d in std::mem::take(&mut to_client) {
            client.handle_datagram(now, rtc_addr, &d, &mut obs);
            client.poll_output(now, &mut obs, &mut |_, d| to_rtc.push(d.to_vec()));
        }
    }
}

#[test]
fn a_subscriber_slot_switching_layers_counts_switches_not_loss() {
    let (mut h, _) = Harness::new(vec![synthetic(150), synthetic(400), synthetic(1500)]);
    let mut fw = Forward::new(h.t0);
    // h, f, q, h: the stand-in SFU asks the publisher for a keyframe on the
    // wanted rid and switches there.
    let plan = [(0u64, 1usize), (1500, 2), (3000, 0), (4500, 1)];
    let mut forwarded = 0;
    let mut step = 0u64;
    let end = Duration::from_millis(6000);
    let mut asked_first = false;
    while h.now - h.t0 < end {
        let at_ms = (h.now - h.t0).as_millis() as u64;
        let first = !asked_first && fw.rtc.is_connected() && fw.sub.snapshot().connected;
        if first {
            // The subscriber is up: a keyframe on the first layer to start.
            asked_first = true;
            let mid = h.mid;
            if let Some(rx) = h
                .sfu
                .direct_api()
                .stream_rx_by_mid(mid, Some(Rid::from(RIDS[plan[0].1])))
            {
                rx.request_keyframe(KeyframeRequestKind::Pli);
            }
        }
        for &(ms, layer) in &plan {
            if ms == at_ms && step > 0 {
                fw.want = layer;
                let mid = h.mid;
                if let Some(rx) = h
                    .sfu
                    .direct_api()
                    .stream_rx_by_mid(mid, Some(Rid::from(RIDS[layer])))
                {
                    rx.request_keyframe(KeyframeRequestKind::Pli);
                }
            }
        }
        if step == 0 {
            fw.want = plan[0].1;
        }
        step += 1;
        h.run(Duration::from_millis(1));
        let now = h.now;
        // Forward what the publisher sent in this step (packets keep the
        // publisher's RtpPacket; re-verify to find their layer).
        for p in std::mem::take(&mut h.raw) {
            let layer = RIDS
                .iter()
                .position(|r| Some(*r) == p.0.as_deref())
                .unwrap();
            fw.on_packet(layer, &p.1, now);
            forwarded += 1;
        }
        fw.run_step(now);
    }
    assert!(forwarded > 500);
    assert_eq!(fw.switches, 3);
    let s = fw.sub.snapshot();
    let st = &s.slots[&fw.slot.to_string()];
    eprintln!(
        "DBG frames {} by layer {:?} switches {} keyframes {} seq_missing {} frames_missing {}",
        st.frames,
        st.frames_by_layer,
        st.layer_switches,
        st.keyframes,
        st.seq_missing,
        st.frames_missing
    );
    assert_eq!(st.corrupt, 0);
    assert_eq!(st.sources, vec!["pub".to_string()]);
    // Every layer was seen, the switches are counted as such...
    assert!(st.frames_by_layer[1] > 0 && st.frames_by_layer[2] > 0 && st.frames_by_layer[3] > 0);
    assert_eq!(st.frames_by_layer[0], 0);
    assert_eq!(st.layer_switches, 3);
    // ...and none of them is loss, reordering or a freeze.
    assert_eq!(st.seq_missing, 0);
    assert_eq!(st.out_of_order, 0);
    assert_eq!(st.ts_backwards, 0);
    assert_eq!(st.frames_missing, 0);
    assert_eq!(st.freezes, 0);
    assert_eq!(st.ssrcs.len(), 1);
    assert_eq!(st.last_layer, Some(2));
}
