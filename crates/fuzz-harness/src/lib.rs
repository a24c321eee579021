//! The harness the fuzz targets share: an [`Engine`] with participants that
//! are really connected (ICE, DTLS, SCTP done with str0m clients under a
//! virtual clock), plus the fixed offers of the offer and renegotiation
//! targets.
//!
//! Owns the session ([`Live`]: which participants, their fixed offers,
//! seeding, what a fuzz input does to it and when it counts as broken) and
//! the str0m client side ([`Client`]). Must not: drive the engine itself:
//! the clock, the timers and delivery both ways are corelay-sim's
//! [`Driver`] (the loop the simulation runs; the harness's clients are its
//! [`Endpoint`]s, on links without delay or loss); the targets that build a
//! bare engine per input only empty its outputs ([`discard_outputs`]).
//!
//! Reproducible: str0m draws ICE credentials and mids from fastrand's
//! thread-local generator, which [`Live::connect`] seeds, so every session
//! has the same ufrags, passwords and mids (the server's too: the harness
//! leaves them to str0m through `accept_offer_with_ice`, where the server's
//! `accept_offer` takes them from the OS). A STUN request recorded in one
//! session (fuzz/seeds/datagram) is valid, integrity included, in the next.
//! Only DTLS keys differ (they come from the crypto provider). The driver
//! draws nothing from that generator (its network's generators are its own
//! and decide nothing on links without loss or jitter), so it does not shift
//! str0m's draws.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use corelay_core::offer::accept_offer_with_ice;
use corelay_core::room::{MemberInfo, RoomUpdate};
use corelay_core::{Engine, ParticipantId, RoomId, RtcSettings, ShardEvent, VideoCodec};
use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::channel::{ChannelConfig, ChannelId};
use str0m::media::{Direction, MediaKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, ExtensionMap, RtpWrite, SeqNo};
use str0m::{Candidate, Event, Input, Output, Rtc};

use corelay_sim::{Driver, Endpoint, LinkParams, Net, OnEvent};

/// The first byte of a `datachannel` fuzz input that opens channels instead
/// of sending a message (no JSON text starts with it): [`OpenChannels`].
pub const OPEN_CHANNELS: u8 = 0x01;

/// The most channels one such input opens.
pub const MAX_OPEN_PER_INPUT: usize = 16;

/// Steps of the clock after opening channels: 200 ms, enough for SCTP to
/// carry 16 DCEP opens of 64 KiB (its window opens on acknowledgements).
pub const OPEN_STEPS: usize = 100;

/// A `datachannel` fuzz input that opens channels: `[OPEN_CHANNELS, count,
/// label length (u16, big-endian), fill...]`. `count` (modulo
/// [`MAX_OPEN_PER_INPUT`] + 1) channels are opened, each with a label of
/// that many bytes: `fill` repeated, as printable ASCII ("x" when empty).
#[derive(Debug, Clone, Copy)]
pub struct OpenChannels<'a> {
    pub count: usize,
    pub label_len: usize,
    pub fill: &'a [u8],
}

impl<'a> OpenChannels<'a> {
    /// The input as one, when it starts with [`OPEN_CHANNELS`].
    pub fn decode(data: &'a [u8]) -> Option<OpenChannels<'a>> {
        let [OPEN_CHANNELS, count, hi, lo, fill @ ..] = data else {
            return None;
        };
        Some(OpenChannels {
            count: usize::from(*count) % (MAX_OPEN_PER_INPUT + 1),
            label_len: usize::from(u16::from_be_bytes([*hi, *lo])),
            fill,
        })
    }

    /// The label each channel carries.
    pub fn label(&self) -> String {
        let fill: &[u8] = if self.fill.is_empty() {
            b"x"
        } else {
            self.fill
        };
        fill.iter()
            .cycle()
            .take(self.label_len)
            .map(|b| char::from(b'!' + b % 94))
            .collect()
    }
}

/// The shard's socket as clients see it.
pub const SERVER: &str = "127.0.0.1:3478";
/// Where the fuzzed participants send from.
pub const CLIENT_ADDRS: [&str; 2] = ["127.0.0.1:5001", "127.0.0.1:5002"];
/// A source no participant uses.
pub const STRANGER: &str = "192.0.2.7:40000";
/// The seed of str0m's generator for every session the harness builds.
pub const RNG_SEED: u64 = 0xC0DE_1A7E;
/// A str0m client's offer (video+audio sendonly, one video slot, data
/// channel): the first offer of the renegotiation target.
pub const BASE_OFFER: &str = include_str!("../../../fuzz/fixtures/base-offer.sdp");

/// Virtual time that one fuzz input takes.
pub const STEP: Duration = Duration::from_millis(2);
/// Inputs one session takes before [`with_session`] builds a fresh one
/// (100 virtual seconds): what an input can leave behind stays bounded, and
/// the handshake costs under 1% of the time.
pub const INPUTS_PER_SESSION: u64 = 50_000;

/// Settings of a server forwarding H.264 only (`--video-codecs h264`,
/// default limits): what the control thread accepts offers with.
pub fn settings() -> RtcSettings {
    RtcSettings {
        video_codecs: vec![VideoCodec::H264],
        ..RtcSettings::default()
    }
}

/// The live session's engine settings: the defaults, but a data-channel
/// request budget that a fuzz input every 2 virtual ms never exhausts, so
/// that every request reaches the engine's handling.
pub fn live_settings() -> RtcSettings {
    let mut s = settings();
    s.participant.requests_per_second = 1_000_000;
    if std::env::var_os("CORELAY_FUZZ_NO_BWE").is_some() {
        s.bwe_initial_bps = None;
    }
    s
}

/// How panics inside corelay's fault boundary (`corelay_core::guard`, which
/// turns them into a refused offer or an evicted participant) are treated.
/// By default like any panic: a crash, libFuzzer stops and saves the input.
/// With `CORELAY_FUZZ_ISOLATED=tolerate` they are reported on stderr (once
/// per source location) and fuzzing goes on; a panic outside the boundary
/// is a crash either way. Call at the start of every input (cheap).
pub fn panic_policy() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var("CORELAY_FUZZ_ISOLATED").as_deref() != Ok("tolerate") {
            return;
        }
        let seen = std::sync::Mutex::new(std::collections::HashSet::<String>::new());
        // libFuzzer's hook (installed before the first input) aborts.
        let crash = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !corelay_core::guard::active() {
                return crash(info);
            }
            let at = info.location().map(|l| l.to_string()).unwrap_or_default();
            corelay_core::guard::note_location(at.clone());
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.insert(at.clone()) {
                eprintln!("corelay-fuzz: isolated panic (tolerated) at {at}: {info}");
            }
        }));
    });
}

pub fn server_addr() -> SocketAddr {
    SERVER.parse().expect("literal address")
}

pub fn stranger_addr() -> SocketAddr {
    STRANGER.parse().expect("literal address")
}

/// The clock origin of every target: one process-wide `Instant`.
pub fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// A roster of one room with `members`, all on shard 0.
pub fn roster(room: RoomId, members: &[MemberInfo]) -> RoomUpdate {
    RoomUpdate {
        room,
        name: "fuzz".into(),
        members: members.to_vec(),
        departed: Vec::new(),
    }
}

/// Empties everything the engine produced (the shard would send it away).
pub fn discard_outputs(engine: &mut Engine) {
    engine.finish_batch();
    let out = engine.outputs();
    out.transmits.clear();
    out.forwarded.clear();
    out.peers.clear();
    out.control.clear();
}

/// A plain str0m client with what a corelay participant offers: published
/// video and audio, one video receive slot, the "events" data channel.
pub struct ClientOffer {
    pub rtc: Rtc,
    pub offer: String,
    pub pending: SdpPendingOffer,
    pub video_mid: Mid,
    pub audio_mid: Mid,
    pub slot_mid: Mid,
}

pub fn client_offer(addr: SocketAddr, now: Instant) -> ClientOffer {
    let cfg = Rtc::builder()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_opus(true, false)
        .enable_h264(true);
    let mut exts = ExtensionMap::standard();
    exts.set(9, Extension::AbsoluteCaptureTime);
    let mut rtc = cfg.set_extension_map(exts).build(now);
    rtc.add_local_candidate(Candidate::host(addr, "udp").expect("host candidate"));
    let mut api = rtc.sdp_api();
    let video_mid = api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
    let audio_mid = api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
    let slot_mid = api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    api.add_channel("events".into());
    let (offer, pending) = api.apply().expect("the client has changes to offer");
    ClientOffer {
        rtc,
        offer: offer.to_sdp_string(),
        pending,
        video_mid,
        audio_mid,
        slot_mid,
    }
}

/// One connected participant's client side: a plain str0m client that
/// the session's [`Driver`] runs.
pub struct Client {
    pub id: ParticipantId,
    pub addr: SocketAddr,
    pub rtc: Rtc,
    pub video_mid: Mid,
    pub audio_mid: Mid,
    pub slot_mid: Mid,
    pub channel: Option<ChannelId>,
    pub connected: bool,
    /// The engine's welcome arrived on the data channel.
    pub welcomed: bool,
    pub rtp_received: u64,
    pub messages_received: u64,
    /// str0m refused the time or failed to say what to send: the session
    /// is broken ([`Live::healthy`]).
    pub failed: bool,
}

impl Client {
    fn on_event(&mut self, e: Event) {
        match e {
            Event::Connected => self.connected = true,
            // The "events" channel; others the fuzz input opened
            // ([`Live::open_channels`]) do not replace it.
            Event::ChannelOpen(cid, label) if label == "events" => self.channel = Some(cid),
            Event::ChannelData(d) => {
                self.messages_received += 1;
                if d.data.windows(9).any(|w| w == b"\"welcome\"") {
                    self.welcomed = true;
                }
            }
            Event::RtpPacket(_) => self.rtp_received += 1,
            _ => {}
        }
    }
}

impl Endpoint for Client {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn receive(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let Ok(contents) = data.try_into() else {
            return;
        };
        let input = Input::Receive(
            now,
            Receive {
                proto: Protocol::Udp,
                source: from,
                destination: self.addr,
                contents,
            },
        );
        // A client that refuses what the engine sent is not the engine's
        // failure; a dead one is, and `healthy` sees it.
        let _ = self.rtc.handle_input(input);
    }

    fn timeout(&mut self, now: Instant) {
        if self.rtc.handle_input(Input::Timeout(now)).is_err() {
            self.failed = true;
        }
    }

    fn poll(&mut self, _now: Instant, send: &mut dyn FnMut(SocketAddr, &[u8])) -> Option<Instant> {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return Some(t),
                Ok(Output::Transmit(t)) => send(t.destination, &t.contents),
                Ok(Output::Event(e)) => self.on_event(e),
                Err(_) => {
                    self.failed = true;
                    return None;
                }
            }
        }
    }
}

/// An engine with two connected participants in one room, under a virtual
/// clock: corelay-sim's [`Driver`] runs them (one shard at [`SERVER`], the
/// clients on links without delay or loss, so that what one side sends
/// reaches the other at the same virtual instant). Participant 0 is the one
/// the targets feed; participant 1 publishes to it and subscribes to it, so
/// that its traffic has somewhere to go.
pub struct Live {
    /// The clock, the engine (shard 0), the clients, the network.
    pub driver: Driver<Client>,
    pub room: RoomId,
    pub members: Vec<MemberInfo>,
    /// A participant left (its shard said so): rebuild before the next input.
    pub broken: bool,
    /// Fuzz inputs fed to this session.
    pub inputs: u64,
}

/// Runs `f` on this thread's live session: built on first use, and built
/// again when the last input broke it or it has taken
/// [`INPUTS_PER_SESSION`] inputs.
pub fn with_session(f: impl FnOnce(&mut Live)) {
    thread_local! {
        static LIVE: std::cell::RefCell<Option<Live>> = const { std::cell::RefCell::new(None) };
    }
    LIVE.with(|cell| {
        let mut live = cell.borrow_mut();
        let live = match live.as_mut() {
            Some(l) if l.healthy() && l.inputs < INPUTS_PER_SESSION => l,
            _ => live.insert(Live::connect()),
        };
        live.inputs += 1;
        f(live);
    });
}

impl Live {
    /// Builds the session and runs it until both participants are connected
    /// and welcomed on their data channels. Panics if that fails: a harness
    /// that cannot connect would fuzz nothing.
    pub fn connect() -> Live {
        Self::connect_with(false)
    }

    /// As [`Live::connect`], recording every datagram a client sends
    /// ([`Live::recorded`]; the seed generator).
    pub fn connect_recording() -> Live {
        Self::connect_with(true)
    }

    fn connect_with(record: bool) -> Live {
        fastrand::seed(RNG_SEED);
        let start = origin();
        let server = server_addr();
        let settings = live_settings();
        let engine = Engine::new(corelay_core::ShardId(0), settings.clone());
        // The network draws from generators of its own, never fastrand's:
        // str0m's draws below (credentials, mids) repeat in every session.
        let mut driver = Driver::new(start, vec![(engine, server)], Net::new(RNG_SEED));
        let instant = LinkParams {
            delay: Duration::ZERO,
            ..LinkParams::default()
        };
        let room = RoomId(1);
        let mut members = Vec::new();
        for (i, addr) in CLIENT_ADDRS.iter().enumerate() {
            let addr: SocketAddr = addr.parse().expect("literal address");
            let mut c = client_offer(addr, start);
            // str0m's own server credentials, from the seeded generator, not
            // from the OS as a server's are.
            let acc = accept_offer_with_ice(&settings, start, &c.offer, server, None, None)
                .expect("the harness's offer is accepted");
            let answer = SdpAnswer::from_sdp_string(&acc.answer).expect("the answer parses");
            c.rtc
                .sdp_api()
                .accept_answer(c.pending, answer)
                .expect("the client accepts the answer");
            let id = ParticipantId(i as u64 + 1);
            let name = format!("fuzz{i}");
            members.push(MemberInfo {
                id,
                name: name.clone(),
                shard: corelay_core::ShardId(0),
                tracks: acc.tracks.clone(),
                viewer: false,
                states: Vec::new(),
            });
            driver.shards[0].engine.add_participant(
                start,
                id,
                room,
                name,
                acc,
                roster(room, &members),
            );
            let link = driver.net.link_mut(addr);
            link.up.params = instant.clone();
            link.down.params = instant.clone();
            if record {
                link.up.tap = Some(Vec::new());
            }
            driver.add_client(Client {
                id,
                addr,
                rtc: c.rtc,
                video_mid: c.video_mid,
                audio_mid: c.audio_mid,
                slot_mid: c.slot_mid,
                channel: None,
                connected: false,
                welcomed: false,
                rtp_received: 0,
                messages_received: 0,
                failed: false,
            });
        }
        let mut live = Live {
            driver,
            room,
            members,
            broken: false,
            inputs: 0,
        };
        for _ in 0..10_000 {
            if live.clients().iter().all(|c| c.connected && c.welcomed) {
                break;
            }
            live.advance(Duration::from_millis(1));
        }
        assert!(
            live.healthy(),
            "the harness's participants did not connect (broken: {})",
            live.broken
        );
        live
    }

    /// Virtual now.
    pub fn now(&self) -> Instant {
        self.driver.now
    }

    /// The engine (the session's one shard).
    pub fn engine(&self) -> &Engine {
        &self.driver.shards[0].engine
    }

    /// The engine, to feed it by hand (what it says goes out at the next
    /// [`advance`](Self::advance)).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.driver.shards[0].engine
    }

    /// The participants' clients, by index.
    pub fn clients(&self) -> &[Client] {
        self.driver.clients()
    }

    /// Every datagram client `i` sent, in order, when the session records
    /// ([`Live::connect_recording`]; the first [`corelay_sim::net::TAP_MAX`]).
    pub fn recorded(&self, i: usize) -> &[Vec<u8>] {
        self.clients()
            .get(i)
            .and_then(|c| self.driver.net.link(c.addr))
            .and_then(|l| l.up.tap.as_deref())
            .unwrap_or(&[])
    }

    /// Both participants are on the engine, connected, with open channels.
    pub fn healthy(&self) -> bool {
        !self.broken
            && self.engine().participant_count() == self.clients().len()
            && self
                .clients()
                .iter()
                .all(|c| c.connected && c.welcomed && !c.failed && c.rtc.is_alive())
    }

    /// Runs `f` with the driver and where its shard events go: a
    /// participant that left breaks the session.
    fn drive(&mut self, f: impl FnOnce(&mut Driver<Client>, OnEvent<'_, Client>)) {
        let broken = &mut self.broken;
        f(&mut self.driver, &mut |_, _, ev| {
            if let ShardEvent::Left { .. } = ev {
                *broken = true;
            }
        });
    }

    /// Routes what the engine said since it was last run, then moves the
    /// clock by `dt`, running every timer and delivering every datagram
    /// that falls due on the way.
    pub fn advance(&mut self, dt: Duration) {
        self.drive(|d, on_event| {
            d.settle(&mut *on_event);
            d.run_for(dt, on_event);
        });
    }

    /// One fuzz input as a datagram to the shard's socket, from participant
    /// 0's own address and from a stranger's, then one step of the clock.
    pub fn feed_datagram(&mut self, data: &[u8]) {
        let own = self.clients().first().map(|c| c.addr);
        // A kernel receive stamp as the shard passes it for media packets.
        let stamp = Some(Duration::from_secs(1_700_000_000));
        self.drive(|d, on_event| {
            let own = own.unwrap_or(d.shards[0].addr);
            d.inject(0, stamp, own, data, &mut *on_event);
            d.inject(0, None, stranger_addr(), data, &mut *on_event);
            d.run_for(STEP, on_event);
        });
    }

    /// A fuzz input that opens data channels ([`OpenChannels`]): participant
    /// 0's client opens them in-band (DCEP), then the clock moves
    /// [`OPEN_STEPS`] steps while SCTP carries them to the engine, which
    /// keeps those within its limits and refuses (resets) the rest.
    pub fn open_channels(&mut self, open: &OpenChannels<'_>) {
        if let Some(c) = self.driver.clients_mut().first_mut() {
            let label = open.label();
            for _ in 0..open.count {
                c.rtc.direct_api().create_data_channel(ChannelConfig {
                    label: label.clone(),
                    ..Default::default()
                });
            }
            self.driver.wake(0);
        }
        for _ in 0..OPEN_STEPS {
            self.advance(STEP);
        }
    }

    /// One fuzz input as a text message participant 0 sends on its data
    /// channel, then one step of the clock (the engine gets it via SCTP).
    pub fn send_on_channel(&mut self, data: &[u8]) {
        if let Some(c) = self.driver.clients_mut().first_mut()
            && let Some(cid) = c.channel
            && let Some(mut ch) = c.rtc.channel(cid)
        {
            let _ = ch.write(false, data);
            self.driver.wake(0);
        }
        self.advance(STEP);
    }

    /// Participant `i` publishes one RTP packet on its video (or audio)
    /// m-line: valid SRTP, what the seed generator records. Delivered (and
    /// whatever it causes) at the current instant.
    pub fn publish(&mut self, i: usize, video: bool, seq: u64, payload: Vec<u8>) {
        let now = self.now();
        let Some(c) = self.driver.clients_mut().get_mut(i) else {
            return;
        };
        let mid = if video { c.video_mid } else { c.audio_mid };
        let Some(pt) = c
            .rtc
            .media(mid)
            .and_then(|m| m.remote_pts().first().copied())
        else {
            return;
        };
        let clock = if video { 3000 } else { 960 };
        let mut api = c.rtc.direct_api();
        if let Some(tx) = api.stream_tx_by_mid(mid, None) {
            tx.write_rtp(
                RtpWrite::new(pt, SeqNo::from(seq), (seq * clock) as u32, now, payload)
                    .marker(true),
            );
        }
        self.driver.wake(i);
        self.drive(|d, on_event| d.run_until_time(now, on_event));
    }
}
