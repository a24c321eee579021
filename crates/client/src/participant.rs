//! A sans-I/O virtual participant: one str0m `Rtc` in RTP mode, a media
//! schedule, and receive-side verification. It never reads a clock (all time
//! is the `now` its driver passes; nanosecond stamps come from the
//! [`Clock`] mapping in its config), never touches a socket, never blocks and
//! never locks: it owns its [`Snapshot`]. A driver loop (see
//! [`crate::driver`], or corelay-sim's virtual network) feeds it datagrams
//! and timeouts, sends what it produces, and publishes copies of the
//! snapshot to readers ([`Participant::publish`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use str0m::change::{SdpAnswer, SdpOffer, SdpPendingOffer};
use str0m::channel::ChannelId;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, Mid, Pt, Rid, Simulcast, SimulcastLayer};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{
    AbsCaptureTime, Extension, ExtensionMap, ExtensionValues, RtpHeader, RtpPacket, RtpWrite, Ssrc,
};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc};

use crate::clock::{Clock, mono_to_system, system_to_mono};
use crate::fastpath::{FastPath, Rx};
use crate::media::{AUDIO_CLOCK, AudioSchedule, VIDEO_CLOCK, VideoSchedule, VideoSource};
use crate::payload::{self, LAYER_NONE, MAX_LAYER, PayloadCodec, Stamp};
use crate::simulcast::{self, RIDS};
use crate::stats::{Kind, Observer, Received, SlotStats, Snapshot};
use crate::stun::StunRtt;
use crate::svc::{Svc, SvcEncoder};

/// Room video codec: the server's own enum, so client and SFU cannot
/// disagree on the set (H.264 offers all of str0m's default profiles, with
/// packetization-mode 1 preferred).
pub use corelay_core::VideoCodec;

/// The extension id the client offers for abs-capture-time (the server's).
const ABS_CAPTURE_TIME_ID: u8 = corelay_core::offer::ABS_CAPTURE_TIME_ID;

/// Tolerance for abs-capture-time vs. payload capture time: the NTP
/// conversion goes through f64 seconds (~0.5 µs at these magnitudes).
const ABS_CAPTURE_TOLERANCE_NS: u64 = 20_000;
/// Cap on stored data-channel events / ICE RTT samples per participant.
const MAX_EVENTS: usize = 100_000;
const MAX_RTT_SAMPLES: usize = 100_000;
/// Packets of a stream the own media path sends with mid (and rid): the
/// server binds the SSRC from them (str0m stops once a receiver report
/// comes back; the own path cannot see those).
const BIND_PACKETS: u32 = 300;
/// Schedule lateness that counts as a slip.
const SLIP: Duration = Duration::from_millis(5);
/// Further behind than this, the schedule jumps instead of bursting.
const MAX_CATCH_UP: Duration = Duration::from_millis(200);
/// How long str0m's own timers may wait for the participant's next media
/// send, so that one wake-up serves both (one 30 fps frame interval).
/// Once connected they are RTCP and keepalives (receive-side NACK checks
/// every 33 ms while a packet is missing (str0m patch 18), TWCC feedback
/// every 50 ms, reports, ICE consent): TWCC
/// feedback then comes every 33 to 84 ms, within what libwebrtc sends
/// (50 to 250 ms), and its arrival times are the kernel's, so the
/// server's estimate is as exact, only later. The client uses no pacer,
/// and media is never delayed. Without this a publishing subscriber wakes
/// about 80 times a second (frames, NACK checks and feedback on separate
/// instants) instead of about 30.
const TIMER_SLACK: Duration = Duration::from_millis(34);

/// When to wake for str0m's `rtc_timeout` and the next media send
/// `media`: str0m's deadline moves onto the media send when that is at
/// most [`TIMER_SLACK`] later.
fn coalesce(rtc_timeout: Instant, media: Option<Instant>) -> Instant {
    match media {
        Some(m) if m > rtc_timeout && m - rtc_timeout <= TIMER_SLACK => m,
        Some(m) => m.min(rtc_timeout),
        None => rtc_timeout,
    }
}

/// Everything that shapes one participant.
#[derive(Debug, Clone)]
pub struct ParticipantConfig {
    /// Name (also stamped into every payload; at most 32 bytes are used).
    pub name: String,
    /// Room video codec to offer.
    pub codec: VideoCodec,
    /// Publish a video track.
    pub publish_video: bool,
    /// Publish an audio track.
    pub publish_audio: bool,
    /// recvonly video m-lines.
    pub video_slots: usize,
    /// recvonly audio m-lines.
    pub audio_slots: usize,
    /// Open the "events" data channel.
    pub data_channel: bool,
    /// Video frames.
    pub video: VideoSource,
    /// Simulcast: the sources of the layers, low to high (at most three,
    /// rids `q`, `h`, `f`; see [`crate::simulcast`]). Empty: one encoding,
    /// `video`. All layers start at `video_offset` and advance one frame
    /// per frame interval of the first, so recordings with the same frame
    /// count and keyframe interval keep their keyframes aligned.
    pub simulcast: Vec<VideoSource>,
    /// VP9 SVC ([`crate::svc`]): `video` as one scalable stream of this
    /// many spatial and temporal layers (codec VP9, no simulcast). None:
    /// one layer.
    pub svc: Option<Svc>,
    /// Emulate a downlink bottleneck of this many bits per second in front
    /// of the participant (applied by the [`crate::driver`]; see
    /// [`crate::shaper`]). None: no limit.
    pub downlink_limit_bps: Option<u64>,
    /// Where in the video source to start (frames).
    pub video_offset: u64,
    /// Audio is speech (level around -30 dBov) rather than silence.
    pub speaking: bool,
    /// While silent, send one packet per 400 ms (Opus DTX) instead of every 20 ms.
    pub dtx: bool,
    /// Latency samples kept per slot in the snapshot (counting goes on past it).
    pub keep_latency_samples: usize,
    /// Upper bound on the interval between STUN binding requests once connected.
    pub stun_interval: Duration,
    /// Seed for sizes/levels/offsets.
    pub seed: u64,
    /// Tag passed to [`Observer::first_media`].
    pub tag: u64,
    /// How `now` becomes the nanoseconds in capture stamps, abs-capture-time,
    /// receive times and ICE RTTs ([`Clock::monotonic`] by default).
    pub clock: Clock,
    /// Once connected, send and receive RTP media on the participant's own
    /// path instead of str0m's streams ([`crate::fastpath`]): a fraction of
    /// the CPU per packet; a loss is NACKed once, not every 33 ms. Off by
    /// default; the load generator turns it on.
    pub own_media_path: bool,
    /// Negotiate transport-wide congestion control (the `transport-cc`
    /// feedback and the transport-wide sequence number extension) and so
    /// send its feedback. On by default; off, the offer carries neither,
    /// as werift's, libdatachannel's and aiortc's do by default, and the
    /// server learns the downlink from receiver reports alone.
    pub twcc: bool,
}

impl ParticipantConfig {
    /// Defaults: publish video+audio, 3+3 slots, data channel, H.264, synthetic video.
    pub fn new(name: impl Into<String>) -> Self {
        ParticipantConfig {
            name: name.into(),
            codec: VideoCodec::H264,
            publish_video: true,
            publish_audio: true,
            video_slots: 3,
            audio_slots: 3,
            data_channel: true,
            video: VideoSource::default(),
            simulcast: Vec::new(),
            svc: None,
            downlink_limit_bps: None,
            video_offset: 0,
            speaking: true,
            dtx: false,
            keep_latency_samples: 100_000,
            stun_interval: Duration::from_millis(500),
            seed: fastrand::u64(..),
            tag: 0,
            clock: Clock::monotonic(),
            own_media_path: false,
            twcc: true,
        }
    }
}

struct VideoTx {
    mid: Mid,
    pt: Option<Pt>,
    /// Frame number of the next capture instant (shared by the layers).
    frame_no: u32,
    /// One encoding without simulcast; else one per rid, low to high.
    layers: Vec<LayerTx>,
    /// What the SFU's `layers` message asks for (bit i: `RIDS[i]`)...
    sfu_mask: u8,
    /// ...and what the encoder can send (a browser turns its top layers
    /// off on its own when its uplink or CPU cannot carry them): a layer
    /// is sent when both say so.
    encoder_mask: u8,
    /// The camera is off: frames keep their schedule, nothing is sent.
    off: bool,
    /// VP9 SVC: the picture state and each picture's packet plan.
    svc: Option<SvcEncoder>,
    start: Option<Instant>,
    next_at: Option<Instant>,
}

/// One encoding of the video track: its own RTP stream (SSRC, sequence
/// numbers, timestamps) and frame schedule.
struct LayerTx {
    rid: Option<Rid>,
    /// Stamped into payloads ([`LAYER_NONE`] without simulcast).
    layer: u8,
    seq: u64,
    ts_base: u32,
    sched: VideoSchedule,
    force_key: bool,
    /// Packets sent on the own media path (it attaches mid and rid to the
    /// first [`BIND_PACKETS`], as str0m does until the receiver reports).
    own_sent: u32,
    /// str0m's SSRC for this encoding, once looked up.
    ssrc: Option<Ssrc>,
    /// Sent (the SFU's `layers` message can pause it).
    active: bool,
}

struct AudioTx {
    mid: Mid,
    pt: Option<Pt>,
    seq: u64,
    ts_base: u32,
    frame_no: u32,
    sched: AudioSchedule,
    start: Option<Instant>,
    next_at: Option<Instant>,
    /// str0m's SSRC for the track, once looked up (own media path).
    ssrc: Option<Ssrc>,
}

struct RxSlot {
    mid: Mid,
    key: String,
    kind: Kind,
    /// Position of `key` among the snapshot's slot keys (its `BTreeMap`
    /// order; [`add_slot_figures`]), so a packet finds its figures without a
    /// string lookup.
    rank: usize,
}

impl RxSlot {
    fn new(mid: Mid, kind: Kind) -> Self {
        RxSlot {
            mid,
            key: mid.to_string(),
            kind,
            rank: 0,
        }
    }
}

/// Give every slot its figures in `snap` (empty, for a slot that has none
/// yet), then set every slot's [`RxSlot::rank`], as the keys may have moved.
fn add_slot_figures(slots: &mut [RxSlot], snap: &mut Snapshot) {
    for s in slots.iter() {
        snap.slots
            .entry(s.key.clone())
            .or_insert_with(|| SlotStats {
                kind: match s.kind {
                    Kind::Video => "video".into(),
                    Kind::Audio => "audio".into(),
                },
                ..Default::default()
            });
    }
    for (rank, key) in snap.slots.keys().enumerate() {
        if let Some(s) = slots.iter_mut().find(|s| s.key == *key) {
            s.rank = rank;
        }
    }
}

/// A virtual participant (sans-I/O).
pub struct Participant {
    rtc: Rtc,
    /// Built from a remote offer ([`Participant::answer`]): every media
    /// the offer adds is a receive slot.
    answerer: bool,
    cfg: ParticipantConfig,
    name: String,
    name_hash: u64,
    local: SocketAddr,
    remote: Option<SocketAddr>,
    pending: Option<SdpPendingOffer>,
    video: Option<VideoTx>,
    audio: Option<AudioTx>,
    slots: Vec<RxSlot>,
    ssrc_slots: Vec<(Ssrc, usize)>,
    channel: Option<ChannelId>,
    channel_open: bool,
    outbox: VecDeque<Vec<u8>>,
    /// What this participant observed (owned; updated per packet, no lock).
    snap: Snapshot,
    /// Where [`Participant::publish`] copies `snap` for other threads.
    published: Arc<Mutex<Snapshot>>,
    stun: StunRtt,
    /// DTLS is up and ICE has a path: media flows.
    connected: bool,
    /// DTLS came up once (str0m says `Connected` once): ICE back up after
    /// going down resumes the call.
    dtls_up: bool,
    dead: bool,
    saw_media: bool,
    sizes: Vec<usize>,
    buf: Vec<u8>,
    nacks: Vec<(Mid, u64)>,
    /// The own media path, once connected, when the config asks for it.
    fast: Option<Box<FastPath>>,
    /// With the own media path: str0m's deadline from its last poll, while
    /// nothing was handed to it since (every use of `rtc` but a poll
    /// clears it). Until then polling str0m finds nothing to do.
    rtc_idle_until: Option<Instant>,
    /// The server's ICE ufrag and password, from its latest answer (for
    /// [`Participant::nominating_check`]).
    remote_ice: Option<(String, String)>,
    /// Moved to a new address and no media received since
    /// ([`Participant::moved`]).
    await_recovery: bool,
    /// Transaction id of the last [`Participant::nominating_check`], until
    /// the server answers it.
    check_tid: Option<[u8; 12]>,
}

/// The session-level or first `a=ice-ufrag` and `a=ice-pwd` of an SDP.
fn ice_credentials(sdp: &str) -> Option<(String, String)> {
    let find = |key: &str| {
        sdp.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
    };
    Some((find("a=ice-ufrag:")?, find("a=ice-pwd:")?))
}

fn ticks_to_dur(ticks: u64, clock: u32) -> Duration {
    Duration::from_nanos((u128::from(ticks) * 1_000_000_000 / u128::from(clock)) as u64)
}

impl Participant {
    /// Build the str0m instance and the SDP offer. `local` is the address
    /// of the UDP socket the driver will use for this participant.
    pub fn new(
        cfg: ParticipantConfig,
        local: SocketAddr,
        now: Instant,
    ) -> Result<(Participant, String), String> {
        let mut rtc = build_rtc(&cfg, local, now)?;
        let mut api = rtc.sdp_api();
        let name = payload::clamp_name(&cfg.name).to_string();
        let stream_id = format!("{name}-stream");
        if cfg.simulcast.len() > RIDS.len() {
            return Err(format!(
                "at most {} simulcast layers, not {}",
                RIDS.len(),
                cfg.simulcast.len()
            ));
        }
        if let Some(m) = cfg.svc
            && (cfg.codec != VideoCodec::Vp9 || !cfg.simulcast.is_empty() || m.spatial > MAX_LAYER)
        {
            return Err(format!(
                "SVC {m} takes codec VP9, no simulcast and at most {MAX_LAYER} spatial layers"
            ));
        }
        let sim = (!cfg.simulcast.is_empty()).then(|| {
            let mut sim = Simulcast::new();
            for rid in &RIDS[..cfg.simulcast.len()] {
                sim.add_send_layer(SimulcastLayer::new(rid));
            }
            sim
        });
        let vmid = cfg.publish_video.then(|| {
            api.add_media(
                MediaKind::Video,
                Direction::SendOnly,
                Some(stream_id.clone()),
                None,
                sim,
            )
        });
        let amid = cfg.publish_audio.then(|| {
            api.add_media(
                MediaKind::Audio,
                Direction::SendOnly,
                Some(stream_id.clone()),
                None,
                None,
            )
        });
        let mut slots = Vec::new();
        for _ in 0..cfg.video_slots {
            let mid = api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
            slots.push(RxSlot::new(mid, Kind::Video));
        }
        for _ in 0..cfg.audio_slots {
            let mid = api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
            slots.push(RxSlot::new(mid, Kind::Audio));
        }
        let channel = cfg
            .data_channel
            .then(|| api.add_channel("events".to_string()));
        let Some((offer, pending)) = api.apply() else {
            return Err("nothing to offer (no tracks, slots or data channel)".into());
        };
        let offer_sdp = offer.to_sdp_string();

        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let video = vmid.map(|mid| {
            let sources: Vec<(Option<Rid>, u8, &VideoSource)> = if cfg.simulcast.is_empty() {
                vec![(None, LAYER_NONE, &cfg.video)]
            } else {
                cfg.simulcast
                    .iter()
                    .enumerate()
                    .map(|(i, src)| (Some(Rid::from(RIDS[i])), simulcast::layer_of(i), src))
                    .collect()
            };
            // Each layer is its own RTP stream: own sequence numbers and
            // timestamp base (an SFU must rewrite both when it switches).
            let layers = sources
                .into_iter()
                .map(|(rid, layer, src)| LayerTx {
                    rid,
                    layer,
                    seq: u64::from(rng.u16(1..30_000)),
                    ts_base: rng.u32(..),
                    sched: VideoSchedule::new(src.clone(), cfg.video_offset, rng.u64(..)),
                    force_key: true,
                    active: true,
                    own_sent: 0,
                    ssrc: None,
                })
                .collect();
            VideoTx {
                mid,
                pt: None,
                frame_no: 0,
                layers,
                sfu_mask: u8::MAX,
                encoder_mask: u8::MAX,
                off: false,
                svc: cfg.svc.map(|m| SvcEncoder::new(m, rng.u16(..))),
                start: None,
                next_at: None,
            }
        });
        let audio = amid.map(|mid| AudioTx {
            mid,
            pt: None,
            seq: u64::from(rng.u16(1..30_000)),
            ts_base: rng.u32(..),
            frame_no: 0,
            sched: AudioSchedule::new(rng.u64(..)),
            start: None,
            next_at: None,
            ssrc: None,
        });

        let mut snap = Snapshot {
            layers_active: match cfg.simulcast.len() {
                0 => 0,
                n => (1u8 << n) - 1,
            },
            video_mids: vmid.iter().map(|m| m.to_string()).collect(),
            audio_mids: amid.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        };
        add_slot_figures(&mut slots, &mut snap);

        let name_hash = payload::name_hash(&name);
        Ok((
            Participant {
                rtc,
                answerer: false,
                cfg,
                name,
                name_hash,
                local,
                remote: None,
                pending: Some(pending),
                video,
                audio,
                slots,
                ssrc_slots: Vec::new(),
                channel,
                channel_open: false,
                outbox: VecDeque::new(),
                published: Arc::new(Mutex::new(snap.clone())),
                snap,
                stun: StunRtt::default(),
                connected: false,
                dtls_up: false,
                dead: false,
                saw_media: false,
                sizes: Vec::with_capacity(16),
                buf: Vec::with_capacity(1500),
                nacks: Vec::new(),
                fast: None,
                rtc_idle_until: None,
                remote_ice: None,
                await_recovery: false,
                check_tid: None,
            },
            offer_sdp,
        ))
    }

    /// Build a receive-only participant from the server's SDP offer (an SFU
    /// that offers, like Janus's subscriber handles): returns it and the
    /// SDP answer. Publishing, slots and data channel in `cfg` are ignored:
    /// every audio or video m-line of the offer becomes a receive slot
    /// (keyed by its mid) on the first [`poll_output`](Self::poll_output),
    /// and so do those of later offers ([`accept_offer`](Self::accept_offer)).
    pub fn answer(
        mut cfg: ParticipantConfig,
        local: SocketAddr,
        now: Instant,
        offer_sdp: &str,
    ) -> Result<(Participant, String), String> {
        cfg.publish_video = false;
        cfg.publish_audio = false;
        cfg.video_slots = 0;
        cfg.audio_slots = 0;
        cfg.data_channel = false;
        cfg.simulcast.clear();
        let mut rtc = build_rtc(&cfg, local, now)?;
        let offer = SdpOffer::from_sdp_string(offer_sdp)
            .map_err(|e| format!("unparsable SDP offer: {e}"))?;
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| format!("offer rejected: {e}"))?;
        let name = payload::clamp_name(&cfg.name).to_string();
        let snap = Snapshot::default();
        let name_hash = payload::name_hash(&name);
        Ok((
            Participant {
                rtc,
                answerer: true,
                cfg,
                name,
                name_hash,
                local,
                remote: None,
                pending: None,
                video: None,
                audio: None,
                slots: Vec::new(),
                ssrc_slots: Vec::new(),
                channel: None,
                channel_open: false,
                outbox: VecDeque::new(),
                published: Arc::new(Mutex::new(snap.clone())),
                snap,
                stun: StunRtt::default(),
                connected: false,
                dtls_up: false,
                dead: false,
                saw_media: false,
                sizes: Vec::with_capacity(16),
                buf: Vec::with_capacity(1500),
                nacks: Vec::new(),
                fast: None,
                rtc_idle_until: None,
                remote_ice: None,
                await_recovery: false,
                check_tid: None,
            },
            answer.to_sdp_string(),
        ))
    }

    /// Apply a renegotiation offer from the server (an answerer built with
    /// [`answer`](Self::answer)); returns the SDP answer. New m-lines become
    /// receive slots.
    pub fn accept_offer(&mut self, offer_sdp: &str) -> Result<String, String> {
        self.rtc_idle_until = None;
        let offer = SdpOffer::from_sdp_string(offer_sdp)
            .map_err(|e| format!("unparsable SDP offer: {e}"))?;
        let answer = self
            .rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| format!("offer rejected: {e}"))?;
        Ok(answer.to_sdp_string())
    }

    /// Apply the server's SDP answer.
    pub fn accept_answer(&mut self, answer_sdp: &str) -> Result<(), String> {
        self.rtc_idle_until = None;
        let answer = SdpAnswer::from_sdp_string(answer_sdp)
            .map_err(|e| format!("unparsable SDP answer: {e}"))?;
        let pending = self.pending.take().ok_or("answer already applied")?;
        self.rtc
            .sdp_api()
            .accept_answer(pending, answer)
            .map_err(|e| format!("answer rejected: {e}"))?;
        if let Some(ice) = ice_credentials(answer_sdp) {
            self.remote_ice = Some(ice);
        }
        // The answer names the payload types the server kept for our tracks.
        let vcodec = self.cfg.codec.codec();
        if let Some(v) = &mut self.video {
            v.pt = pick_pt(&self.rtc, v.mid, vcodec);
        }
        if let Some(a) = &mut self.audio {
            a.pt = pick_pt(&self.rtc, a.mid, Codec::Opus);
        }
        Ok(())
    }

    /// Everything observed so far (the live value; no copy, no lock).
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The handle other threads read: a copy of [`snapshot`](Self::snapshot)
    /// as of the last [`publish`](Self::publish) (the driver publishes every
    /// ~50 ms, on request and when it stops driving the participant).
    pub fn shared(&self) -> Arc<Mutex<Snapshot>> {
        self.published.clone()
    }

    /// Copy the snapshot into the [`shared`](Self::shared) handle (the one
    /// lock this type takes; drivers call it, never per packet). Only what
    /// was appended since the last publication is copied of the long lists.
    pub fn publish(&self) {
        let mut g = self.published.lock().unwrap_or_else(|e| e.into_inner());
        g.update_from(&self.snap);
    }

    /// The clock mapping stamps are made with.
    pub fn clock(&self) -> Clock {
        self.cfg.clock
    }

    /// Our socket address (the host candidate).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The server's media address, once str0m has sent anything to it.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// Name as stamped into payloads.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether str0m is still alive.
    pub fn is_alive(&self) -> bool {
        !self.dead && self.rtc.is_alive()
    }

    /// Queue a text message for the data channel (sent once it is open).
    pub fn send_event(&mut self, text: &str) {
        if self.outbox.len() < 10_000 {
            self.outbox.push_back(text.as_bytes().to_vec());
        }
    }

    /// Switch between speech and silence.
    pub fn set_speaking(&mut self, speaking: bool) {
        self.cfg.speaking = speaking;
    }

    /// Switch Opus DTX on or off.
    pub fn set_dtx(&mut self, dtx: bool) {
        self.cfg.dtx = dtx;
    }

    /// Request a keyframe on the next video frame (every layer).
    pub fn force_keyframe(&mut self) {
        if let Some(v) = &mut self.video {
            for l in &mut v.layers {
                l.force_key = true;
            }
        }
    }

    /// Which simulcast layers to send, a bit mask over
    /// [`simulcast::RIDS`] (what the SFU's `layers` message says). A layer
    /// that resumes starts with a keyframe. No effect without simulcast.
    pub fn set_active_layers(&mut self, mask: u8) {
        let Some(v) = &mut self.video else { return };
        v.sfu_mask = mask;
        self.apply_layers();
    }

    /// Turns the camera off (no video is sent; its schedule goes on) or
    /// back on (with a keyframe on every layer).
    pub fn set_camera(&mut self, on: bool) {
        let Some(v) = &mut self.video else { return };
        if v.off && on {
            for l in &mut v.layers {
                l.force_key = true;
            }
        }
        v.off = !on;
    }

    /// Which simulcast layers the encoder can send, whatever the SFU asks
    /// (a bit mask over [`simulcast::RIDS`]): what a browser does when its
    /// uplink estimate or its CPU no longer carries its top layers. No
    /// effect without simulcast.
    pub fn set_encoder_layers(&mut self, mask: u8) {
        let Some(v) = &mut self.video else { return };
        v.encoder_mask = mask;
        self.apply_layers();
    }

    fn apply_layers(&mut self) {
        let Some(v) = &mut self.video else { return };
        let mask = v.sfu_mask & v.encoder_mask;
        let mut now_active = 0u8;
        for (i, l) in v.layers.iter_mut().enumerate() {
            if l.rid.is_none() {
                return;
            }
            let on = mask & (1 << i) != 0;
            if on && !l.active {
                l.force_key = true;
            }
            l.active = on;
            if on {
                now_active |= 1 << i;
            }
        }
        self.snap.layers_active = now_active;
    }

    /// Record the downlink bottleneck's counters in the snapshot (the
    /// driver that applies it calls this).
    pub fn set_downlink_stats(&mut self, st: crate::shaper::ShaperStats) {
        self.snap.downlink = Some(st);
    }

    /// The config it was built with.
    pub fn config(&self) -> &ParticipantConfig {
        &self.cfg
    }

    /// Ask the server for a keyframe on receive slot `slot_mid` (a PLI, as a
    /// decoder that lost its picture would). False if there is no such slot
    /// or nothing has arrived on it yet.
    pub fn request_keyframe(&mut self, slot_mid: &str) -> bool {
        self.rtc_idle_until = None;
        let Some(mid) = self.slots.iter().find(|s| s.key == slot_mid).map(|s| s.mid) else {
            return false;
        };
        let mut api = self.rtc.direct_api();
        match api.stream_rx_by_mid(mid, None) {
            Some(rx) => {
                rx.request_keyframe(str0m::media::KeyframeRequestKind::Pli);
                true
            }
            None => false,
        }
    }

    /// Renegotiation: add recvonly slots and return the new SDP offer (apply
    /// the server's answer with [`accept_answer`](Self::accept_answer)).
    /// The new slots appear in the snapshot at once.
    pub fn add_slots(&mut self, video: usize, audio: usize) -> Result<String, String> {
        self.rtc_idle_until = None;
        if self.pending.is_some() {
            return Err("an offer is already pending".into());
        }
        let mut api = self.rtc.sdp_api();
        let mut added = Vec::new();
        for (kind, n) in [(MediaKind::Video, video), (MediaKind::Audio, audio)] {
            for _ in 0..n {
                added.push((
                    api.add_media(kind, Direction::RecvOnly, None, None, None),
                    kind,
                ));
            }
        }
        let Some((offer, pending)) = api.apply() else {
            return Err("nothing to offer".into());
        };
        self.pending = Some(pending);
        for (mid, kind) in added {
            self.push_slot(mid, kind);
        }
        Ok(offer.to_sdp_string())
    }

    /// Start an ICE restart: new local ICE credentials (the candidates
    /// kept), in a new SDP offer returned to send to the server; apply the
    /// server's answer with [`accept_answer`](Self::accept_answer). Media
    /// goes on over the current path meanwhile.
    pub fn restart_ice(&mut self) -> Result<String, String> {
        self.rtc_idle_until = None;
        if self.pending.is_some() {
            return Err("an offer is already pending".into());
        }
        let mut api = self.rtc.sdp_api();
        api.ice_restart(true);
        let Some((offer, pending)) = api.apply() else {
            return Err("nothing to offer".into());
        };
        self.pending = Some(pending);
        Ok(offer.to_sdp_string())
    }

    /// It moved to local address `to` at `now` (its driver sends from a
    /// new socket from now on): the snapshot's
    /// [`ReachStats`](crate::stats::ReachStats) records when, and when the
    /// first media packet arrives after it.
    pub fn moved(&mut self, now: Instant, to: SocketAddr) {
        let r = &mut self.snap.reach;
        r.moved_at_ns = Some(self.cfg.clock.ns(now));
        r.moved_to = Some(to);
        r.recovered_at_ns = None;
        r.check_answered_ns = None;
        self.await_recovery = true;
    }

    /// Its TURN relay's figures, for the snapshot
    /// ([`ReachStats`](crate::stats::ReachStats)).
    pub fn set_relay_stats(
        &mut self,
        relayed: SocketAddr,
        server_saw: Option<SocketAddr>,
        refreshes: u64,
        errors: u64,
    ) {
        let r = &mut self.snap.reach;
        r.relayed = Some(relayed);
        r.server_saw = server_saw;
        r.turn_refreshes = refreshes;
        r.turn_errors = errors;
    }

    /// A connectivity check that nominates (USE-CANDIDATE), as str0m's
    /// controlling agent sends on its nominated pair, to send to the
    /// server's media address now: a client whose address changed sends
    /// one at once, and the server moves the media path at the first one
    /// from the new address (corelay-core's engine/rebind.rs), instead of
    /// at str0m's next scheduled check. None before an answer was applied
    /// or anything was sent.
    pub fn nominating_check(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        let dest = self.remote?;
        let (ufrag, pwd) = self.remote_ice.as_ref()?;
        let local = self.rtc.direct_api().local_ice_credentials();
        let username = format!("{ufrag}:{}", local.ufrag);
        // A peer-reflexive candidate's priority (RFC 8445 5.1.2: type
        // preference 110, local preference 65535, component 1).
        let prio = (110u32 << 24) | (65535 << 8) | 255;
        let msg = str0m::ice::StunMessage::binding_request(
            &username,
            str0m::ice::TransId::new(),
            true,
            fastrand::u64(..),
            prio,
            true,
        );
        // OpenSSL's HMAC (turn.rs): str0m has no process-wide crypto
        // provider here (the client never installs one), only its Rtc's.
        let failed = std::cell::Cell::new(false);
        let hmac = |key: &[u8], parts: &[&[u8]]| {
            crate::turn::hmac_sha1(key, parts).unwrap_or_else(|_| {
                failed.set(true);
                [0; 20]
            })
        };
        let mut buf = vec![0u8; 256];
        let n = msg.to_bytes(Some(pwd.as_bytes()), &mut buf, hmac).ok()?;
        if failed.get() {
            return None;
        }
        buf.truncate(n);
        let mut tid = [0u8; 12];
        if let Some(t) = buf.get(8..20) {
            tid.copy_from_slice(t);
        }
        self.check_tid = Some(tid);
        self.stun.on_send(&buf, self.cfg.clock.ns(Instant::now()));
        Some((dest, buf))
    }

    /// Give up on the participant: `why` goes into its snapshot's
    /// `failed`, it is closed, and the snapshot is published.
    pub fn fail(&mut self, why: impl Into<String>) {
        self.snap.failed = Some(why.into());
        self.snap.connected = false;
        self.close();
        self.publish();
    }

    /// Close the str0m instance (no more output but a final poll).
    pub fn close(&mut self) {
        self.rtc_idle_until = None;
        self.rtc.disconnect();
        self.dead = true;
    }

    /// Feed one received datagram that arrived at `now` (its receive time
    /// for latency and ICE RTT, through the config's [`Clock`]). A driver
    /// may feed a batch before it calls [`poll_output`](Self::poll_output):
    /// str0m (patched) holds up to 64 received RTP packets, each with its
    /// own receive time.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        source: SocketAddr,
        data: &[u8],
        obs: &mut dyn Observer,
    ) {
        if self.dead {
            return;
        }
        // Only what comes from the server's address: anything else goes to
        // str0m, which knows the ICE pair.
        let from_server = self.remote == Some(source);
        if let Some(mut fast) = self.fast.take_if(|_| from_server) {
            let nacks_before = fast.nacks_sent();
            let done = match fast.receive(data, now) {
                Rx::NotOurs => false,
                Rx::Dropped => {
                    self.snap.bad_datagrams += 1;
                    true
                }
                Rx::Padding => true,
                Rx::Feedback => {
                    self.snap.feedback_ignored += 1;
                    true
                }
                Rx::Media(m) => {
                    self.snap.own_path_packets += 1;
                    self.on_media(m.slot, m.header, m.seq, m.payload, now, obs);
                    true
                }
            };
            let nacked = fast.nacks_sent() != nacks_before;
            self.fast = Some(fast);
            if nacked {
                self.count_nacks();
            }
            if done {
                return;
            }
        }
        self.rtc_idle_until = None;
        let rx_ns = self.cfg.clock.ns(now);
        if let Some(tid) = self.check_tid {
            // The server's success response to our nominating check.
            if data.get(..2) == Some(&[0x01, 0x01]) && data.get(8..20) == Some(&tid[..]) {
                self.check_tid = None;
                self.snap.reach.check_answered_ns = Some(rx_ns);
            }
        }
        if let Some(rtt) = self.stun.on_recv(data, rx_ns) {
            let us = rtt / 1000;
            obs.ice_rtt(us);
            let s = &mut self.snap;
            if s.ice_rtt_us.len() < MAX_RTT_SAMPLES {
                s.ice_rtt_us.push(us);
            }
        }
        let recv = match Receive::new(Protocol::Udp, source, self.local, data) {
            Ok(r) => r,
            Err(_) => {
                self.snap.bad_datagrams += 1;
                return;
            }
        };
        if let Err(e) = self.rtc.handle_input(Input::Receive(now, recv)) {
            let s = &mut self.snap;
            s.bad_datagrams += 1;
            if !self.rtc.is_alive() {
                s.failed = Some(format!("handle_input: {e}"));
                s.connected = false;
                self.dead = true;
            }
        }
    }

    /// Advance time: str0m timers and the media schedule.
    pub fn handle_timeout(&mut self, now: Instant, obs: &mut dyn Observer) {
        if self.dead {
            return;
        }
        if let Some(fast) = &mut self.fast {
            if fast.feedback_due(now) {
                fast.send_feedback();
            }
            if fast.notes_due(now) {
                fast.report_notes(&mut self.rtc);
                self.rtc_idle_until = None;
            }
        }
        // With the own media path str0m is fed the time only when it asked
        // for it or was handed something (its next poll then runs).
        let rtc_due = self.rtc_idle_until.is_none_or(|d| now >= d)
            || (!self.outbox.is_empty() && self.channel_open);
        if rtc_due {
            self.rtc_idle_until = None;
        }
        if rtc_due && let Err(e) = self.rtc.handle_input(Input::Timeout(now)) {
            let s = &mut self.snap;
            s.failed = Some(format!("timeout: {e}"));
            s.connected = false;
            self.dead = true;
            return;
        }
        if self.connected {
            self.send_due_media(now, obs);
        }
        self.flush_outbox();
    }

    /// Drain str0m's output: transmit datagrams through `transmit` and
    /// process events. Returns when the participant next wants
    /// [`handle_timeout`](Self::handle_timeout).
    pub fn poll_output(
        &mut self,
        now: Instant,
        obs: &mut dyn Observer,
        transmit: &mut dyn FnMut(SocketAddr, &[u8]),
    ) -> Instant {
        if let Some(fast) = &mut self.fast {
            if let Some(dest) = self.remote {
                for d in fast.drain_out() {
                    transmit(dest, &d);
                }
            }
            // Nothing was handed to str0m since it last said when it next
            // wants the time: it has nothing to say before then.
            if let Some(deadline) = self.rtc_idle_until {
                return self.next_wake(deadline, now);
            }
        }
        // Bounded: str0m returns a Timeout after a finite amount of output;
        // the cap only guards against a bug turning this into a busy loop.
        for _ in 0..100_000 {
            if self.dead && !self.rtc.is_alive() {
                return now + Duration::from_secs(3600);
            }
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => {
                    if self.fast.is_some() {
                        self.rtc_idle_until = Some(t);
                    }
                    return self.next_wake(t, now);
                }
                Ok(Output::Transmit(t)) => {
                    self.remote = Some(t.destination);
                    self.stun.on_send(&t.contents, self.cfg.clock.ns(now));
                    transmit(t.destination, &t.contents);
                }
                Ok(Output::Event(e)) => self.on_event(e, now, obs),
                Err(e) => {
                    let s = &mut self.snap;
                    s.failed = Some(format!("poll_output: {e}"));
                    s.connected = false;
                    self.dead = true;
                    return now + Duration::from_secs(3600);
                }
            }
        }
        now + Duration::from_millis(1)
    }

    fn next_wake(&self, rtc_timeout: Instant, now: Instant) -> Instant {
        // The own media path's feedback and notes for str0m.
        let rtc_timeout = match self.fast.as_ref().and_then(|f| f.next_at()) {
            Some(r) => rtc_timeout.min(r),
            None => rtc_timeout,
        };
        let media = if self.connected {
            let video = self.video.as_ref().and_then(|v| v.next_at);
            let audio = self.audio.as_ref().and_then(|a| a.next_at);
            video.into_iter().chain(audio).min()
        } else {
            None
        };
        let mut t = coalesce(rtc_timeout, media);
        if !self.outbox.is_empty() && self.channel_open {
            t = t.min(now + Duration::from_millis(5));
        }
        t
    }

    fn flush_outbox(&mut self) {
        if !self.channel_open {
            return;
        }
        let Some(id) = self.channel else { return };
        if !self.outbox.is_empty() {
            self.rtc_idle_until = None;
        }
        while let Some(msg) = self.outbox.front() {
            let Some(mut ch) = self.rtc.channel(id) else {
                return;
            };
            match ch.write(false, msg) {
                Ok(true) => {
                    self.outbox.pop_front();
                }
                // Buffer full (false) or error: try again on the next timeout.
                _ => return,
            }
        }
    }

    fn on_event(&mut self, e: Event, now: Instant, obs: &mut dyn Observer) {
        match e {
            Event::Connected => {
                self.connected = true;
                self.dtls_up = true;
                self.snap.connected = true;
                // Before any media: str0m must not have sent on the
                // streams (or transport-wide numbers) the path takes over.
                if self.cfg.own_media_path && self.fast.is_none() {
                    self.fast = FastPath::of(&mut self.rtc).map(Box::new);
                }
                // Readers wait on this (a Janus subscription on its
                // publisher): published at once, not at the next interval.
                self.publish();
                obs.connected(self.cfg.tag, self.cfg.clock.ns(now));
                // Media starts now, on the publisher's own schedule.
                if let Some(v) = &mut self.video {
                    v.start = Some(now);
                    v.next_at = Some(now);
                }
                if let Some(a) = &mut self.audio {
                    a.start = Some(now);
                    a.next_at = Some(now);
                }
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.connected = false;
                self.snap.connected = false;
                self.publish();
            }
            // Back after it went down (an ICE restart, a path that came
            // back): the call goes on where it was.
            Event::IceConnectionStateChange(
                IceConnectionState::Connected | IceConnectionState::Completed,
            ) if self.dtls_up && !self.connected => {
                self.connected = true;
                self.snap.connected = true;
                self.publish();
            }
            Event::ChannelOpen(id, _label) => {
                if Some(id) == self.channel || self.channel.is_none() {
                    self.channel = Some(id);
                    self.channel_open = true;
                    self.snap.channel_open = true;
                    self.publish();
                    self.flush_outbox();
                }
            }
            Event::ChannelClose(id) => {
                if Some(id) == self.channel {
                    self.channel_open = false;
                    self.snap.channel_open = false;
                    self.publish();
                }
            }
            Event::ChannelData(d) => {
                let v = if d.binary {
                    serde_json::Value::String(format!("<{} binary bytes>", d.data.len()))
                } else {
                    match serde_json::from_slice::<serde_json::Value>(&d.data) {
                        Ok(v) => v,
                        Err(_) => {
                            serde_json::Value::String(String::from_utf8_lossy(&d.data).into_owned())
                        }
                    }
                };
                if let Some(mid) = self.video.as_ref().map(|v| v.mid) {
                    if let Some(mask) = simulcast::active_mask(&v, &mid) {
                        self.snap.layer_messages += 1;
                        self.set_active_layers(mask);
                    }
                }
                let s = &mut self.snap;
                if s.events.len() < MAX_EVENTS {
                    s.events.push(v);
                }
            }
            Event::KeyframeRequest(req) => {
                self.snap.keyframe_requests += 1;
                if let Some(v) = &mut self.video {
                    if v.mid == req.mid {
                        // A request for one rid makes a keyframe on that
                        // encoding only; one without a rid, on all.
                        for l in &mut v.layers {
                            if req.rid.is_none() || l.rid == req.rid {
                                l.force_key = true;
                            }
                        }
                    }
                }
            }
            Event::MediaIngressStats(st) => {
                if let Some(e) = self.nacks.iter_mut().find(|(m, _)| *m == st.mid) {
                    e.1 = e.1.max(st.nacks);
                } else {
                    self.nacks.push((st.mid, st.nacks));
                }
                self.count_nacks();
            }
            Event::RtpPacket(p) => self.on_rtp(&p, obs),
            Event::MediaAdded(m) if self.answerer => self.add_offered_slot(m.mid, m.kind),
            _ => {}
        }
    }

    /// NACKs sent: str0m's (its ingress stats, per mid) and the own media
    /// path's.
    fn count_nacks(&mut self) {
        let str0m: u64 = self.nacks.iter().map(|(_, n)| n).sum();
        let own = self.fast.as_ref().map_or(0, |f| f.nacks_sent());
        self.snap.nacks_sent = str0m + own;
    }

    /// A media the server's offer added (answerer only): a receive slot.
    fn add_offered_slot(&mut self, mid: Mid, kind: MediaKind) {
        if self.slots.iter().any(|s| s.mid == mid) {
            return;
        }
        self.push_slot(mid, kind);
    }

    /// A new receive slot and its figures.
    fn push_slot(&mut self, mid: Mid, kind: MediaKind) {
        let kind = if kind == MediaKind::Video {
            Kind::Video
        } else {
            Kind::Audio
        };
        self.slots.push(RxSlot::new(mid, kind));
        add_slot_figures(&mut self.slots, &mut self.snap);
    }

    fn slot_of(&mut self, p: &RtpPacket) -> Option<usize> {
        let ssrc = p.header.ssrc;
        if let Some((_, i)) = self.ssrc_slots.iter().find(|(s, _)| *s == ssrc) {
            return Some(*i);
        }
        let mid = self
            .rtc
            .direct_api()
            .stream_rx(&ssrc)
            .map(|s| s.mid())
            .or(p.header.ext_vals.mid)?;
        let i = self.slots.iter().position(|s| s.mid == mid)?;
        self.ssrc_slots.push((ssrc, i));
        Some(i)
    }

    fn on_rtp(&mut self, p: &RtpPacket, obs: &mut dyn Observer) {
        let Some(i) = self.slot_of(p) else {
            self.snap.unknown_packets += 1;
            return;
        };
        // From here on the own media path takes the stream's packets
        // (`p` is the main stream's even when it came as a resend).
        if let Some(fast) = &mut self.fast {
            let video = self.slots.get(i).is_some_and(|s| s.kind == Kind::Video);
            let pt = p.header.payload_type;
            let clock = self
                .rtc
                .codec_config()
                .find(|c| c.pt() == pt)
                .map_or(if video { 90_000 } else { 48_000 }, |c| {
                    c.spec().clock_rate.get()
                });
            if fast.adopt(p.header.ssrc, pt, clock, video, i, *p.seq_no, p.timestamp) {
                // From now on str0m learns of its packets only when they
                // are noted, up to 50 ms late: its NACK checks (every
                // 33 ms) would ask for packets that did arrive. The own
                // path NACKs instead.
                if let Some(rx) = self.rtc.direct_api().stream_rx(&p.header.ssrc) {
                    rx.suppress_nack(true);
                }
            }
        }
        // Its receive time: str0m stamps each packet with the time of the
        // datagram that carried it (a driver may feed several before it
        // polls).
        self.on_media(i, &p.header, *p.seq_no, &p.payload, p.timestamp, obs);
    }

    /// A media packet for slot `i`: `seq` extended, `payload` decrypted,
    /// received at `at`.
    fn on_media(
        &mut self,
        i: usize,
        header: &RtpHeader,
        seq: u64,
        payload: &[u8],
        at: Instant,
        obs: &mut dyn Observer,
    ) {
        let rx_ns = self.cfg.clock.ns(at);
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        let kind = slot.kind;
        let codec = match kind {
            Kind::Video => PayloadCodec::from(self.cfg.codec),
            Kind::Audio => PayloadCodec::Opus,
        };
        let verified = payload::verify(codec, payload);
        obs.packet(kind, payload.len(), verified.is_ok());
        let first_media = !self.saw_media;
        self.saw_media = true;
        if self.await_recovery {
            self.await_recovery = false;
            self.snap.reach.recovered_at_ns = Some(rx_ns);
        }
        if first_media {
            obs.first_media(self.cfg.tag, rx_ns);
        }

        let Some((_key, st)) = self.snap.slots.iter_mut().nth(self.slots[i].rank) else {
            return;
        };
        debug_assert_eq!(_key, &self.slots[i].key);
        st.packets += 1;
        st.bytes += payload.len() as u64;
        if st.first_packet_ns.is_none() {
            st.first_packet_ns = Some(rx_ns);
        }
        let ssrc: u32 = *header.ssrc;
        if !st.ssrcs.contains(&ssrc) {
            st.ssrcs.push(ssrc);
        }
        if let Some(last) = st.last_seq {
            if seq < last {
                st.out_of_order += 1;
            } else if seq > last + 1 {
                st.seq_gaps += 1;
                st.seq_missing += seq - last - 1;
            }
        }
        if st.last_seq.is_none_or(|l| seq > l) {
            st.last_seq = Some(seq);
        }
        let ts = header.timestamp;
        if let Some(last) = st.last_ts {
            if (ts.wrapping_sub(last) as i32) < 0 {
                st.ts_backwards += 1;
            }
        }
        st.last_ts = Some(ts);

        obs.received(&Received {
            slot: &self.slots[i].key,
            kind,
            seq,
            timestamp: ts,
            ssrc,
            source: verified.as_ref().ok().map(|v| v.stamp.name),
            keyframe: verified
                .as_ref()
                .is_ok_and(|v| v.keyframe == Some(true) && v.stamp.index == 0),
            frame: verified.as_ref().map_or(0, |v| v.stamp.frame),
            index: verified.as_ref().map_or(0, |v| v.stamp.index),
            layer: verified.as_ref().map_or(0, |v| v.stamp.layer),
        });
        let v = match verified {
            Ok(v) => v,
            Err(_) => {
                st.corrupt += 1;
                return;
            }
        };
        let stamp = v.stamp;
        if v.keyframe == Some(true) && stamp.index == 0 {
            st.keyframes += 1;
        }
        // Every last source is in `sources`: only a change of source can
        // add one.
        if st.last_source.as_deref() != Some(stamp.name) {
            st.last_source = Some(stamp.name.to_string());
            if !st.sources.iter().any(|s| s == stamp.name) {
                st.sources.push(stamp.name.to_string());
            }
        }
        let mut capture = stamp.capture_ns;
        if kind == Kind::Video {
            match header
                .ext_vals
                .abs_capture_time
                .and_then(|a| system_to_mono(a.capture_time))
            {
                Some(ns) => {
                    if ns.abs_diff(stamp.capture_ns) > ABS_CAPTURE_TOLERANCE_NS {
                        st.abs_capture_mismatch += 1;
                    }
                    // Latency is measured from the header extension, like the article.
                    capture = ns;
                }
                None => st.abs_capture_missing += 1,
            }
        }
        // An SVC picture is complete at its marker (the SFU sets it on the
        // last packet of the top spatial layer it forwards): a frame, on
        // that layer.
        let frame_end = match v.spatial {
            Some(_) => header.marker,
            None => stamp.index + 1 == stamp.count,
        };
        if frame_end {
            st.frames += 1;
            if let Some(n) = st.frames_by_source.get_mut(stamp.name) {
                *n += 1;
            } else {
                st.frames_by_source.insert(stamp.name.to_string(), 1);
            }
            if kind == Kind::Video {
                st.video_frame(stamp.name, stamp.layer, rx_ns);
            }
            st.frame_complete(stamp.name, stamp.frame, rx_ns);
            let lat_us = rx_ns.saturating_sub(capture) / 1000;
            st.latency_count += 1;
            if st.latency_us.len() < self.cfg.keep_latency_samples {
                st.latency_us.push(lat_us);
            }
            obs.frame(kind, lat_us);
            obs.frame_from(self.cfg.tag, stamp.name, kind, lat_us);
        }
    }

    fn send_due_media(&mut self, now: Instant, obs: &mut dyn Observer) {
        // Video: all packets of a frame at its capture instant.
        for _ in 0..8 {
            let Some(v) = &self.video else { break };
            let Some(at) = v.next_at else { break };
            if at > now {
                break;
            }
            let late = now - at;
            if late > SLIP {
                obs.send_slip(late.as_micros() as u64);
                self.snap.send_slips += 1;
            }
            if late > MAX_CATCH_UP {
                // Resynchronise instead of bursting a backlog.
                if let Some(v) = &mut self.video {
                    let ticks = v.layers[0].sched.next_ticks();
                    v.start = Some(now - ticks_to_dur(ticks, VIDEO_CLOCK));
                }
            }
            self.send_video_frame(now, obs);
        }
        for _ in 0..16 {
            let Some(a) = &self.audio else { break };
            let Some(at) = a.next_at else { break };
            if at > now {
                break;
            }
            let late = now - at;
            if late > MAX_CATCH_UP {
                if let Some(a) = &mut self.audio {
                    let ticks = a.sched.next_ticks();
                    a.start = Some(now - ticks_to_dur(ticks, AUDIO_CLOCK));
                }
            }
            self.send_audio_frame(now, obs);
        }
    }

    fn send_video_frame(&mut self, now: Instant, obs: &mut dyn Observer) {
        let codec = PayloadCodec::from(self.cfg.codec);
        let capture = self.cfg.clock.ns(now);
        // Disjoint borrows: the layers, str0m and the scratch buffers.
        let Participant {
            rtc,
            video,
            sizes,
            buf,
            name,
            name_hash,
            snap,
            fast,
            rtc_idle_until,
            ..
        } = self;
        let Some(v) = video else { return };
        let frame_no = v.frame_no;
        v.frame_no = v.frame_no.wrapping_add(1);
        let start = v.start.unwrap_or(now);
        let off = v.off;
        let mut sent = 0u64;
        // Every layer advances one frame per capture instant, sent or not,
        // so their schedules (and keyframes) stay aligned.
        for l in &mut v.layers {
            let force = l.active && std::mem::take(&mut l.force_key);
            let f = l.sched.next_frame(force, sizes);
            if !l.active || off {
                continue;
            }
            let Some(pt) = v.pt else { continue };
            let ts = l.ts_base.wrapping_add(f.ticks as u32);
            let count = sizes.len().min(u16::MAX as usize) as u16;
            // str0m's stream: to write to, or (the own media path) for its
            // SSRC, once.
            let mut api;
            let mut tx = None;
            if fast.is_none() || l.ssrc.is_none() {
                *rtc_idle_until = None;
                api = rtc.direct_api();
                let Some(t) = api.stream_tx_by_mid(v.mid, l.rid) else {
                    continue;
                };
                l.ssrc = Some(t.ssrc());
                tx = Some(t);
            }
            let Some(ssrc) = l.ssrc else { continue };
            // SVC: the picture's layer frames, one after another.
            let packets = match &mut v.svc {
                Some(e) => {
                    e.plan(f.keyframe, sizes);
                    e.packets.len()
                }
                None => usize::from(count),
            };
            for i in 0..packets {
                buf.clear();
                let mut stamp = Stamp {
                    name: name.as_str(),
                    layer: l.layer,
                    frame: frame_no,
                    index: i as u16,
                    count,
                    capture_ns: capture,
                };
                let mut marker = i + 1 == usize::from(count);
                if let Some(p) = v.svc.as_ref().and_then(|e| e.packets.get(i)) {
                    (stamp.layer, stamp.index, stamp.count) = (p.spatial + 1, p.index, p.count);
                    marker = p.marker;
                    payload::write_payload_with_header(buf, p.header(), &stamp, *name_hash, p.size);
                } else {
                    let size = sizes.get(i).copied().unwrap_or_default();
                    payload::write_payload(buf, codec, f.keyframe, &stamp, *name_hash, size);
                }
                let mut exts = ExtensionValues {
                    abs_capture_time: Some(AbsCaptureTime {
                        capture_time: mono_to_system(capture),
                        clock_offset: None,
                    }),
                    ..Default::default()
                };
                if let Some(fast) = fast {
                    if l.own_sent < BIND_PACKETS {
                        l.own_sent += 1;
                        exts.mid = Some(v.mid);
                        exts.rid = l.rid;
                    }
                    if !fast.send(ssrc, pt, l.seq, ts, marker, exts, buf) {
                        snap.send_refused += 1;
                        continue;
                    }
                } else if let Some(tx) = tx.as_mut() {
                    tx.write_rtp(
                        RtpWrite::new(pt, l.seq.into(), ts, now, &buf[..])
                            .marker(marker)
                            .ext_vals(exts)
                            .nackable(true),
                    );
                }
                l.seq += 1;
                sent += 1;
            }
            snap.sent_video_frames += 1;
            let li = usize::from(l.layer).min(snap.sent_frames_by_layer.len() - 1);
            snap.sent_frames_by_layer[li] += 1;
            if f.keyframe {
                snap.sent_keyframes += 1;
                snap.sent_keyframes_by_layer[li] += 1;
            }
        }
        v.next_at = Some(start + ticks_to_dur(v.layers[0].sched.next_ticks(), VIDEO_CLOCK));
        obs.sent(Kind::Video, sent);
        snap.sent_packets += sent;
    }

    fn send_audio_frame(&mut self, now: Instant, obs: &mut dyn Observer) {
        let (speaking, dtx) = (self.cfg.speaking, self.cfg.dtx);
        let Some(a) = &mut self.audio else { return };
        let planned = a.sched.next_frame(speaking, dtx);
        let start = a.start.unwrap_or(now);
        a.next_at = Some(start + ticks_to_dur(a.sched.next_ticks(), AUDIO_CLOCK));
        let Some(planned) = planned else { return };
        let frame_no = a.frame_no;
        a.frame_no = a.frame_no.wrapping_add(1);
        let Some(pt) = a.pt else { return };
        let mid = a.mid;
        let ts = a.ts_base.wrapping_add(planned.ticks as u32);
        let seq = a.seq;
        a.seq += 1;
        self.buf.clear();
        let stamp = Stamp {
            name: &self.name,
            layer: LAYER_NONE,
            frame: frame_no,
            index: 0,
            count: 1,
            capture_ns: self.cfg.clock.ns(now),
        };
        payload::write_payload(
            &mut self.buf,
            PayloadCodec::Opus,
            false,
            &stamp,
            self.name_hash,
            planned.size,
        );
        let mut exts = ExtensionValues {
            audio_level: Some(planned.level),
            voice_activity: Some(planned.voice),
            ..Default::default()
        };
        if self.fast.is_some() && a.ssrc.is_none() {
            self.rtc_idle_until = None;
            a.ssrc = (self.rtc.direct_api())
                .stream_tx_by_mid(mid, None)
                .map(|t| t.ssrc());
        }
        if let Some(fast) = &mut self.fast {
            let Some(ssrc) = a.ssrc else { return };
            if frame_no < BIND_PACKETS {
                exts.mid = Some(mid);
            }
            if !fast.send(ssrc, pt, seq, ts, false, exts, &self.buf) {
                self.snap.send_refused += 1;
                return;
            }
        } else {
            self.rtc_idle_until = None;
            let mut api = self.rtc.direct_api();
            let Some(tx) = api.stream_tx_by_mid(mid, None) else {
                return;
            };
            tx.write_rtp(
                RtpWrite::new(pt, seq.into(), ts, now, &self.buf[..])
                    .ext_vals(exts)
                    .nackable(false),
            );
        }
        obs.sent(Kind::Audio, 1);
        let s = &mut self.snap;
        s.sent_packets += 1;
        s.sent_audio_packets += 1;
    }
}

/// str0m in RTP mode with the client's codecs and extensions, and one
/// host candidate at `local`.
fn build_rtc(cfg: &ParticipantConfig, local: SocketAddr, now: Instant) -> Result<Rtc, String> {
    let mut exts = ExtensionMap::standard();
    exts.set(ABS_CAPTURE_TIME_ID, Extension::AbsoluteCaptureTime);
    let mut b = Rtc::builder()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_opus(true, false)
        .set_stats_interval(Some(Duration::from_secs(1)));
    b = match cfg.codec {
        VideoCodec::H264 => b.enable_h264(true),
        VideoCodec::Vp8 => b.enable_vp8(true),
        VideoCodec::Vp9 => b.enable_vp9(true),
        VideoCodec::Av1 => b.enable_av1(true),
    };
    if !cfg.twcc {
        // Neither the feedback nor the sequence numbers it reports on.
        let mut kept = ExtensionMap::empty();
        for (id, ext) in exts.iter() {
            if *ext != Extension::TransportSequenceNumber {
                kept.set(id, ext.clone());
            }
        }
        exts = kept;
        let params = b
            .codec_config()
            .params()
            .iter()
            .cloned()
            .map(|mut p| {
                p.set_fb_transport_cc(false);
                p
            })
            .collect();
        *b.codec_config() = str0m::format::CodecConfig::new_from_payload_params(params);
    }
    *b.extension_map() = exts;
    b.set_max_stun_rto(cfg.stun_interval);
    let mut rtc = b.build(now);
    let cand = Candidate::host(local, "udp").map_err(|e| format!("host candidate {local}: {e}"))?;
    rtc.add_local_candidate(cand);
    Ok(rtc)
}

/// The payload type the answer kept for `mid` with `codec` (H.264:
/// packetization-mode 1 preferred).
fn pick_pt(rtc: &Rtc, mid: Mid, codec: Codec) -> Option<Pt> {
    let media = rtc.media(mid)?;
    let cfg = rtc.codec_config();
    let mut best: Option<(i32, Pt)> = None;
    for pt in media.remote_pts() {
        let Some(p) = cfg.params().iter().find(|p| p.pt() == *pt) else {
            continue;
        };
        let spec = p.spec();
        if spec.codec != codec {
            continue;
        }
        let mut score = 1;
        if codec == Codec::H264 && spec.format.packetization_mode == Some(1) {
            score += 2;
        }
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, *pt));
        }
    }
    best.map(|(_, pt)| pt)
}

#[allow(dead_code)]
fn assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Participant>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str0m_timers_wait_for_a_close_media_send_and_never_delay_media() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Not publishing (or not connected): str0m's deadline as it is.
        assert_eq!(coalesce(t0, None), t0);
        // A frame 20 ms after a NACK check: one wake at the frame.
        assert_eq!(coalesce(t0, Some(t0 + ms(20))), t0 + ms(20));
        assert_eq!(coalesce(t0, Some(t0 + TIMER_SLACK)), t0 + TIMER_SLACK);
        // Further than the slack: str0m's deadline first.
        assert_eq!(coalesce(t0, Some(t0 + TIMER_SLACK + ms(1))), t0);
        // Media due first is never moved.
        assert_eq!(coalesce(t0 + ms(10), Some(t0)), t0);
        assert_eq!(coalesce(t0, Some(t0)), t0);
    }
}
