//! Turning an SDP offer into a configured str0m `Rtc` and an answer.
//!
//! Parsing and validation run on the control thread (it owns signaling): a
//! first offer becomes an `Rtc` that is handed to a shard as a value; a
//! renegotiation is validated against a shadow `Rtc` ([`check_renegotiation`])
//! and the shard's engine only applies the prepared [`SdpOffer`] with
//! [`apply_prepared`], the one function here that runs on a shard. Owns the offer rules: size and m-line
//! limits, payload types that str0m would assert on, and the codec policy (a
//! room has one video codec plus Opus, so the answer only ever contains
//! those, and a client that cannot send or receive them is refused with a
//! clear error). Every str0m call on an offer runs under [`guard::isolate`]:
//! an offer that still makes str0m panic is a 400, not a dead thread.
//! Must not: touch sockets or media packets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use str0m::crypto::dtls::DtlsCert;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, Mid};
use str0m::net::TcpType;
use str0m::rtp::{Extension, ExtensionMap};
use str0m::{Candidate, IceCreds, Output, Rtc};

use crate::faults::Faults;
use crate::guard;
use crate::ids::{ParticipantId, ShardId};

/// Extension id we offer for abs-capture-time when the client did not pick one.
pub const ABS_CAPTURE_TIME_ID: u8 = 9;

/// Extension id we offer for the dependency descriptor when the client did
/// not pick one.
pub const DD_EXT_ID: u8 = 12;

/// A room's video codec: the one codec enum of the workspace (server flags,
/// the load client and the bench parse it with [`FromStr`](std::str::FromStr)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VideoCodec {
    #[default]
    H264,
    Vp8,
    /// VP9, profile 0 or 2, with spatial/temporal SVC or simulcast.
    Vp9,
    /// AV1, with SVC read from the dependency descriptor, or simulcast.
    Av1,
}

impl std::str::FromStr for VideoCodec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "h264" => Ok(VideoCodec::H264),
            "vp8" => Ok(VideoCodec::Vp8),
            "vp9" => Ok(VideoCodec::Vp9),
            "av1" => Ok(VideoCodec::Av1),
            other => Err(format!(
                "unknown video codec {other:?} (vp8, h264, vp9 or av1)"
            )),
        }
    }
}

impl std::fmt::Display for VideoCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VideoCodec::H264 => "h264",
            VideoCodec::Vp8 => "vp8",
            VideoCodec::Vp9 => "vp9",
            VideoCodec::Av1 => "av1",
        })
    }
}

impl VideoCodec {
    pub fn codec(self) -> Codec {
        match self {
            VideoCodec::H264 => Codec::H264,
            VideoCodec::Vp8 => Codec::Vp8,
            VideoCodec::Vp9 => Codec::Vp9,
            VideoCodec::Av1 => Codec::Av1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            VideoCodec::H264 => "H264",
            VideoCodec::Vp8 => "VP8",
            VideoCodec::Vp9 => "VP9",
            VideoCodec::Av1 => "AV1",
        }
    }
}

/// Server-wide settings applied to every participant's `Rtc`.
#[derive(Clone, Debug)]
pub struct RtcSettings {
    /// The video codecs this server forwards, most preferred first. A room
    /// uses one: the first of these that its first video publisher offers.
    pub video_codecs: Vec<VideoCodec>,
    pub offer: OfferLimits,
    pub participant: ParticipantLimits,
    /// Also offer a passive ICE-TCP candidate (RFC 6544) on the same address
    /// and port, after the UDP one: for clients whose network blocks UDP.
    /// The shard must listen on that TCP port.
    pub ice_tcp: bool,
    /// Estimate each participant's downlink from its TWCC feedback (str0m's
    /// send-side BWE, with probing and pacing), starting from this many
    /// bits per second; `None`: no estimate, every slot gets the best layer
    /// its view allows.
    pub bwe_initial_bps: Option<u64>,
    /// The DTLS certificate every participant's `Rtc` presents; `None`:
    /// str0m makes one per `Rtc` (a key generation per join).
    pub dtls_identity: Option<DtlsIdentity>,
    /// The tests' injected faults: empty but in a `fault-injection` build.
    pub faults: Faults,
    /// `Some(n)`: this node's `n` shards share one UDP port (`SO_REUSEPORT`:
    /// the kernel picks a shard's socket by the 4-tuple's hash, not by who
    /// owns the flow), so a shard hands a datagram for a participant of
    /// another shard over to it. `None`: a port per shard.
    pub shared_port: Option<usize>,
}

/// A server's DTLS certificate and key: one for all its participants (its
/// fingerprint is in every answer), made at startup. The DTLS provider
/// builds its OpenSSL context for it once, so a join costs no key
/// generation and no context.
#[derive(Clone)]
pub struct DtlsIdentity(pub DtlsCert);

impl std::fmt::Debug for DtlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DtlsIdentity(..)")
    }
}

impl Default for RtcSettings {
    fn default() -> Self {
        RtcSettings {
            video_codecs: vec![VideoCodec::Vp8, VideoCodec::H264],
            offer: OfferLimits::default(),
            participant: ParticipantLimits::default(),
            ice_tcp: false,
            bwe_initial_bps: Some(DEFAULT_BWE_INITIAL_BPS),
            dtls_identity: None,
            faults: Faults::none(),
            shared_port: None,
        }
    }
}

/// Where a participant's downlink estimate starts (it probes upward from
/// there within seconds on a good link). libwebrtc's start value: an
/// estimate that starts higher is believed until traffic reaches it, and a
/// slow link's slots climb onto layers it cannot carry meanwhile.
pub const DEFAULT_BWE_INITIAL_BPS: u64 = 300_000;

/// What one offer may hold. Checked before str0m parses anything, so a huge
/// offer costs a line scan, not a parse tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfferLimits {
    pub max_sdp_bytes: usize,
    pub max_mlines: usize,
}

impl Default for OfferLimits {
    fn default() -> Self {
        OfferLimits {
            max_sdp_bytes: 64 * 1024,
            max_mlines: 64,
        }
    }
}

/// What one participant may make its shard hold or do.
#[derive(Clone, Debug, PartialEq)]
pub struct ParticipantLimits {
    /// ICE and DTLS must be up this long after the join, or the participant is removed.
    pub connect_timeout: Duration,
    /// A connected participant whose ICE went down (consent failed: nothing
    /// from the client for about 14 s) keeps its place this long before it
    /// is removed; zero removes it at once. Back within it (an ICE restart,
    /// a check from a new address), nothing of its call changed.
    pub reconnect_grace: Duration,
    /// Remote addresses (ICE-verified 5-tuples) one participant may use.
    pub max_addrs: usize,
    /// Data-channel requests per second (token bucket; bursts of twice that).
    pub requests_per_second: u32,
    /// The largest application message (its whole request), bytes.
    pub max_message_bytes: usize,
}

impl Default for ParticipantLimits {
    fn default() -> Self {
        ParticipantLimits {
            connect_timeout: Duration::from_secs(15),
            reconnect_grace: Duration::from_secs(10),
            max_addrs: 8,
            requests_per_second: 20,
            max_message_bytes: 16 * 1024,
        }
    }
}

/// Why an offer was refused. [`OfferError::code`] is the stable error code
/// of the HTTP API; the message (`Display`) says what to fix, without parser
/// internals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OfferError {
    /// Malformed or inconsistent SDP, or an offer str0m refused.
    Bad(String),
    /// Larger than `--max-sdp-bytes`.
    TooLarge { bytes: usize, limit: usize },
    /// More m-lines than `--max-mlines`.
    TooManyLines { limit: usize },
    /// A video m-line without the server's codec.
    CodecMismatch(String),
    /// The participant is not on this shard (it left meanwhile).
    UnknownParticipant(ParticipantId),
    /// str0m refused a rehearsed renegotiation on the shard: the participant
    /// was removed.
    RenegotiationFailed,
    /// The operating system gave no randomness for the ICE credentials.
    NoRandomness,
}

impl OfferError {
    fn bad(message: impl Into<String>) -> Self {
        OfferError::Bad(message.into())
    }

    /// The error code of the HTTP API.
    pub fn code(&self) -> &'static str {
        match self {
            OfferError::Bad(_) => "bad_offer",
            OfferError::TooLarge { .. } => "offer_too_large",
            OfferError::TooManyLines { .. } => "too_many_mlines",
            OfferError::CodecMismatch(_) => "codec_mismatch",
            OfferError::UnknownParticipant(_) => "not_found",
            OfferError::RenegotiationFailed => "renegotiation_failed",
            OfferError::NoRandomness => "internal",
        }
    }
}

impl std::fmt::Display for OfferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OfferError::Bad(m) | OfferError::CodecMismatch(m) => f.write_str(m),
            OfferError::TooLarge { bytes, limit } => write!(
                f,
                "the SDP offer is {bytes} bytes; this server takes at most {limit} (--max-sdp-bytes)"
            ),
            OfferError::TooManyLines { limit } => write!(
                f,
                "the SDP offer has more than {limit} m-lines (--max-mlines)"
            ),
            OfferError::UnknownParticipant(id) => {
                write!(f, "participant {id} is not on this shard")
            }
            OfferError::RenegotiationFailed => {
                f.write_str("the renegotiation could not be applied; the participant was removed")
            }
            OfferError::NoRandomness => f.write_str("no randomness available"),
        }
    }
}

impl std::error::Error for OfferError {}

/// Most simulcast encodings (rids) one m-line may declare: an offer with
/// more is refused here, and the engine sizes its per-layer state by it
/// (`engine::MAX_LAYERS` is this constant).
pub const MAX_LAYERS: usize = 4;

/// A media line as the SFU sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaLine {
    pub mid: Mid,
    pub kind: MediaKind,
}

/// The outcome of a successful offer.
pub struct Accepted {
    pub rtc: Rtc,
    pub answer: String,
    /// Our ICE ufrag: how the shard recognises this participant's first STUN request.
    pub ufrag: String,
    /// m-lines the participant sends on (its published tracks).
    pub tracks: Vec<MediaLine>,
    /// m-lines the participant receives on (receive slots).
    pub slots: Vec<MediaLine>,
    /// The video codecs its session negotiated (what a renegotiation of it
    /// is rehearsed with): the room's, or for a participant that publishes
    /// no video in a room without a codec yet, every one both sides have.
    pub codecs: Vec<VideoCodec>,
    /// The codec this join gives its room: set when the room had none and
    /// the offer publishes video.
    pub room_codec: Option<VideoCodec>,
    /// It may send application messages (the token's `publish_data`; true
    /// unless the control thread says otherwise).
    pub publish_data: bool,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted")
            .field("ufrag", &self.ufrag)
            .field("tracks", &self.tracks)
            .field("slots", &self.slots)
            .field("codecs", &self.codecs)
            .field("room_codec", &self.room_codec)
            .finish_non_exhaustive()
    }
}

/// Data channels one participant's association keeps at a time (str0m patch
/// 26). A participant uses one, "events"; 4 leaves room for a client that
/// opens a second of its own or replaces one while the old is still
/// closing. Beyond it a channel the client opens is refused (reset, never
/// kept) and counted in `refused_channels`: without a bound a client could
/// open 65,535 streams, each keeping its label (132 KiB per channel with a
/// 60 KB label was measured, issue 56.2).
pub const MAX_DATA_CHANNELS: usize = 4;

/// Bytes of label and protocol, together, that a data channel a client
/// opens may carry (str0m patch 26); "events" needs 6. A longer DCEP open
/// is refused and counted in `refused_channels`, its label never kept.
pub const MAX_CHANNEL_LABEL_BYTES: usize = 1024;

/// Builds the `Rtc` for one participant: ICE-lite, RTP mode, Opus and only
/// the video `codecs` given (the room's), the send-side bandwidth estimate
/// when `settings.bwe_initial_bps` is set, the server's DTLS identity, and
/// `ice` as its ICE credentials (str0m's own when `None`).
pub fn build_rtc(
    codecs: &[VideoCodec],
    settings: &RtcSettings,
    now: Instant,
    ice: Option<IceCreds>,
) -> Rtc {
    let bwe_initial_bps = settings.bwe_initial_bps;
    let mut cfg = Rtc::builder()
        // Per-participant loss/jitter/RTT for /api/v1/stats, once a second.
        .set_stats_interval(Some(std::time::Duration::from_secs(1)))
        .set_ice_lite(true)
        .set_rtp_mode(true)
        .set_sctp_max_channels(MAX_DATA_CHANNELS)
        .set_sctp_max_label_len(MAX_CHANNEL_LABEL_BYTES)
        .clear_codecs()
        .enable_opus(true, false)
        .enable_bwe(bwe_initial_bps.map(str0m::bwe::Bitrate::bps));
    for codec in codecs {
        cfg = match codec {
            VideoCodec::H264 => cfg.enable_h264(true),
            VideoCodec::Vp8 => cfg.enable_vp8(true),
            VideoCodec::Vp9 => cfg.enable_vp9(true),
            VideoCodec::Av1 => cfg.enable_av1(true),
        };
    }
    if let Some(DtlsIdentity(cert)) = &settings.dtls_identity {
        cfg = cfg.set_dtls_cert(cert.clone());
    }
    if let Some(ice) = ice {
        cfg = cfg.set_local_ice_credentials(ice);
    }
    // str0m's standard map. The RTP stream id extensions (rid, repaired rid)
    // name simulcast layers; str0m maps an unseen SSRC with a rid before it
    // checks the packet's SRTP tag, so the engine bounds which such packets
    // reach it (engine/streams.rs, fuzz/examples/rid_flood.rs) and an offer
    // may declare at most `MAX_LAYERS` rids per m-line.
    let mut exts = ExtensionMap::empty();
    exts.set(1, Extension::AudioLevel);
    exts.set(2, Extension::AbsoluteSendTime);
    exts.set(3, Extension::TransportSequenceNumber);
    exts.set(4, Extension::RtpMid);
    exts.set(10, Extension::RtpStreamId);
    exts.set(11, Extension::RepairedRtpStreamId);
    exts.set(13, Extension::VideoOrientation);
    exts.set(ABS_CAPTURE_TIME_ID, Extension::AbsoluteCaptureTime);
    // AV1's (and Chromium's VP9's) layers: read on the publisher's shard,
    // passed to subscribers unchanged (crate::svc::dd).
    exts.set(DD_EXT_ID, crate::svc::dd::DdExtension::extension());
    cfg.set_extension_map(exts).build(now)
}

/// One of the 64 ICE characters (RFC 8839, `ice-char`) for the low six
/// bits of `x`, so that a random byte picks one evenly.
fn ice_char(x: u8) -> char {
    let v = x & 63;
    char::from(match v {
        0..=25 => b'A' + v,
        26..=51 => b'a' + (v - 26),
        52..=61 => b'0' + (v - 52),
        62 => b'+',
        _ => b'/',
    })
}

/// The value (0..64) of an ICE character ([`ice_char`]'s inverse).
fn ice_value(c: u8) -> Option<usize> {
    Some(usize::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    }))
}

/// Shards a ufrag can name ([`ufrag_shard`]): two ICE characters.
pub const UFRAG_SHARDS: usize = 64 * 64;

/// The shard a server ufrag was drawn for: its first two characters name
/// it ([`ice_credentials`]), so that a shard sharing its UDP port with the
/// others can tell whose a STUN binding request is before anything of the
/// participant is known there.
pub fn ufrag_shard(ufrag: &str) -> Option<ShardId> {
    match ufrag.as_bytes() {
        [a, b, ..] => Some(ShardId(ice_value(*a)? * 64 + ice_value(*b)?)),
        _ => None,
    }
}

/// Unguessable ICE credentials for a participant of `shard` from the
/// operating system's CSPRNG: a 16-character ufrag, the shard in its first
/// two characters ([`ufrag_shard`]; no secret) and 84 random bits in the
/// rest, and a 24-character password (144 bits); RFC 8445 asks for at
/// least 24 and 128 random bits. str0m's own come from fastrand, a fast
/// generator that is not made to be unpredictable, and anyone who joins
/// reads a ufrag and a password in their answer: one who could work out the
/// next participant's password could answer that participant's
/// connectivity checks from another address.
pub fn ice_credentials(shard: ShardId) -> Result<IceCreds, OfferError> {
    let mut bytes = [0u8; 40];
    getrandom::fill(&mut bytes).map_err(|_| OfferError::NoRandomness)?;
    let text = |b: &[u8]| b.iter().map(|&x| ice_char(x)).collect::<String>();
    let (ufrag, pass) = bytes.split_at(16);
    let tag = shard.0 % UFRAG_SHARDS;
    let mut ufrag = text(ufrag);
    ufrag.replace_range(
        ..2,
        &[ice_char((tag / 64) as u8), ice_char((tag % 64) as u8)]
            .iter()
            .collect::<String>(),
    );
    Ok(IceCreds {
        ufrag,
        pass: text(pass),
    })
}

/// Where a participant's media arrives: its shard (its ICE ufrag names it)
/// and the addresses of its UDP and ICE-TCP candidates (the same port
/// unless the shards share one UDP port and ICE-TCP keeps one per shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaAt {
    pub shard: ShardId,
    pub udp: SocketAddr,
    pub tcp: SocketAddr,
}

impl From<SocketAddr> for MediaAt {
    /// Shard 0's, UDP and TCP on `addr`.
    fn from(addr: SocketAddr) -> Self {
        MediaAt {
            shard: ShardId(0),
            udp: addr,
            tcp: addr,
        }
    }
}

/// Accepts `sdp` for a participant whose media will arrive at `candidate`
/// (the shard's socket address as the client must see it), in a room whose
/// video codec is `room` (`None` while no one has published video there:
/// then an offer that publishes video picks it, see [`Accepted::room_codec`]).
pub fn accept_offer(
    settings: &RtcSettings,
    now: Instant,
    sdp: &str,
    candidate: SocketAddr,
    room: Option<VideoCodec>,
) -> Result<Accepted, OfferError> {
    accept_offer_on(settings, now, sdp, candidate.into(), room)
}

/// [`accept_offer`] for a participant of `at.shard` (its ufrag names it),
/// with its candidates at `at`.
pub fn accept_offer_on(
    settings: &RtcSettings,
    now: Instant,
    sdp: &str,
    at: MediaAt,
    room: Option<VideoCodec>,
) -> Result<Accepted, OfferError> {
    let ice = ice_credentials(at.shard)?;
    accept_offer_with_ice(settings, now, sdp, at, room, Some(ice))
}

/// [`accept_offer`] with the ICE credentials `ice`, or str0m's own when
/// `None` (drawn from the thread's fastrand generator, so predictable): for
/// a harness that seeds that generator to replay traffic recorded in an
/// earlier session (the fuzz targets' seeds), never for a server.
pub fn accept_offer_with_ice(
    settings: &RtcSettings,
    now: Instant,
    sdp: &str,
    at: impl Into<MediaAt>,
    room: Option<VideoCodec>,
    ice: Option<IceCreds>,
) -> Result<Accepted, OfferError> {
    let at = at.into();
    let offer = parse_offer(settings, sdp)?;
    let (codecs, room_codec) = choose_codecs(&settings.video_codecs, room, sdp)?;
    let unusable = |_| OfferError::bad("the server's media address is not usable");
    let udp = Candidate::host(at.udp, "udp").map_err(unusable)?;
    let tcp = if settings.ice_tcp {
        let c = Candidate::builder()
            .tcp()
            .host(at.tcp)
            .tcptype(TcpType::Passive)
            .build()
            .map_err(unusable)?;
        Some(c)
    } else {
        None
    };
    let accepted = guard::isolate(|| {
        let mut rtc = build_rtc(&codecs, settings, now, ice);
        // UDP first: a client pairs it when it can (lower priority for TCP,
        // RFC 6544 §4.2 and str0m's type preference, does the rest).
        rtc.add_local_candidate(udp);
        if let Some(tcp) = tcp {
            rtc.add_local_candidate(tcp);
        }
        let answer = apply_offer(&mut rtc, offer)?;
        let answer = unbundle_answer(sdp, candidates_everywhere(&answer));
        let lines = initial_lines(&mut rtc, &answer)?;
        let ufrag = rtc.direct_api().local_ice_credentials().ufrag;
        Ok(Accepted {
            rtc,
            answer,
            ufrag,
            tracks: lines.tracks,
            slots: lines.slots,
            codecs,
            room_codec,
            publish_data: true,
        })
    });
    accepted.map_err(refused_by_panic)?
}

/// Validates a renegotiation offer from a participant whose last accepted
/// offer was `previous`, by applying both to a shadow `Rtc` here. str0m
/// checks a renegotiation against the session state and may apply part of an
/// offer before refusing it: only a rehearsal shows whether the real one
/// would apply whole. `codecs` are the video codecs the participant's
/// session negotiated ([`Accepted::codecs`]): the new offer must keep one of
/// them on every video m-line. Returns the parsed offer for the
/// participant's shard.
pub fn check_renegotiation(
    settings: &RtcSettings,
    now: Instant,
    previous: &str,
    sdp: &str,
    codecs: &[VideoCodec],
) -> Result<SdpOffer, OfferError> {
    let prepared = parse_offer(settings, sdp)?;
    choose_codecs(codecs, None, sdp)?;
    let rehearsal = parse_offer(settings, sdp)?;
    let before = parse_offer(settings, previous)?;
    let shadow = guard::isolate(|| {
        // A shadow never on the wire: str0m's own credentials do.
        let mut rtc = build_rtc(codecs, settings, now, None);
        apply_offer(&mut rtc, before)?;
        settle(&mut rtc)?;
        apply_offer(&mut rtc, rehearsal)?;
        settle(&mut rtc)
    });
    shadow.map_err(refused_by_panic)??;
    Ok(prepared)
}

/// Applies an offer prepared by [`check_renegotiation`] to the participant's
/// own `Rtc` (on its shard) and returns the answer. The caller runs it under
/// [`guard::isolate`] and drains the `Rtc` afterwards.
///
/// An offer with new ICE credentials restarts ICE (str0m resets its agent
/// and draws new local credentials): those come from str0m's fastrand, so
/// they are replaced here by unguessable ones ([`ice_credentials`]), as a
/// join's are. Every answer's ufrag, password and candidates' `ufrag` then
/// name the credentials in force.
pub fn apply_prepared(rtc: &mut Rtc, offer: SdpOffer) -> Result<String, OfferError> {
    let before = rtc.direct_api().local_ice_credentials();
    let answer = apply_offer(rtc, offer)?;
    let mut ice = rtc.direct_api().local_ice_credentials();
    if ice != before {
        // The same shard's: its first ufrag names it.
        let shard = ufrag_shard(&before.ufrag).unwrap_or(ShardId(0));
        ice = ice_credentials(shard)?;
        rtc.direct_api().set_local_ice_credentials(ice.clone());
    }
    Ok(with_ice_credentials(&candidates_everywhere(&answer), &ice))
}

/// `sdp` with every `a=ice-ufrag`/`a=ice-pwd` line naming `ice`, and every
/// candidate's `ufrag` extension too (a client drops a candidate whose
/// ufrag is not the one in force).
fn with_ice_credentials(sdp: &str, ice: &IceCreds) -> String {
    let mut out = String::with_capacity(sdp.len() + 64);
    for line in sdp.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("a=ice-ufrag:") {
            out.push_str("a=ice-ufrag:");
            out.push_str(&ice.ufrag);
        } else if line.starts_with("a=ice-pwd:") {
            out.push_str("a=ice-pwd:");
            out.push_str(&ice.pass);
        } else if line.starts_with("a=candidate:") {
            // Extensions are name/value pairs after the 8 fixed fields.
            let mut words: Vec<&str> = line.split(' ').collect();
            for pair in words.get_mut(8..).unwrap_or_default().chunks_mut(2) {
                if let [name, value] = pair
                    && *name == "ufrag"
                {
                    *value = &ice.ufrag;
                }
            }
            out.push_str(&words.join(" "));
        } else {
            out.push_str(line);
        }
        out.push_str("\r\n");
    }
    out
}

/// A panic inside str0m while it handled an offer: the offer is refused.
fn refused_by_panic(caught: guard::Caught) -> OfferError {
    tracing::warn!("an SDP offer made str0m panic and was refused: {caught}");
    OfferError::bad(
        "the SDP offer could not be processed (inconsistent payload types or attributes)",
    )
}

/// Checks `sdp` against the limits and str0m's assumptions, then parses it.
fn parse_offer(settings: &RtcSettings, sdp: &str) -> Result<SdpOffer, OfferError> {
    let sdp = sdp.trim_start_matches('\u{feff}');
    if sdp.len() > settings.offer.max_sdp_bytes {
        return Err(OfferError::TooLarge {
            bytes: sdp.len(),
            limit: settings.offer.max_sdp_bytes,
        });
    }
    if sdp.trim().is_empty() {
        return Err(OfferError::bad("the SDP offer is empty"));
    }
    if !sdp.trim_start().starts_with("v=") {
        return Err(OfferError::bad("the SDP offer must start with \"v=0\""));
    }
    if !sdp.contains("\nm=") {
        return Err(OfferError::bad("the SDP offer has no m-line"));
    }
    validate_lines(sdp, &settings.offer)?;
    check_opus(sdp)?;
    // str0m's parse errors quote its parser's internals (stream positions):
    // say what is wrong without them.
    let sdp = bundle_safe_extmaps(sdp);
    let sdp = bundle_a_single_mline(&sdp)?;
    let offer = SdpOffer::from_sdp_string(&sdp).map_err(|e| {
        let text = e.to_string();
        match text.strip_prefix("SDP inconsistent: ") {
            Some(m) => OfferError::bad(format!("the SDP offer is inconsistent: {}", clean(&m))),
            None => {
                OfferError::bad("the SDP offer does not parse (see RFC 8866 for the line syntax)")
            }
        }
    })?;
    Ok(offer)
}

/// An offer without `a=group:BUNDLE` is fine when it has one m-line (a
/// video-only WHIP publisher with bundle-policy none, e.g. simple-whip-client):
/// one m-line is one transport either way, so it gets the group str0m needs
/// (and the answer loses it again, [`unbundle_answer`]). Several m-lines
/// without it would want a transport each, which corelay does not do: that
/// is a clear 400.
fn bundle_a_single_mline(sdp: &str) -> Result<std::borrow::Cow<'_, str>, OfferError> {
    if sdp.contains("a=group:BUNDLE") {
        return Ok(std::borrow::Cow::Borrowed(sdp));
    }
    let mlines = sdp.lines().filter(|l| l.starts_with("m=")).count();
    let mid = sdp
        .lines()
        .find_map(|l| l.trim_end_matches('\r').strip_prefix("a=mid:"));
    match (mlines, mid) {
        (1, Some(mid)) => {
            let at = sdp.find("\nm=").map_or(0, |i| i + 1);
            let (head, tail) = sdp.split_at(at);
            Ok(std::borrow::Cow::Owned(format!(
                "{head}a=group:BUNDLE {mid}\r\n{tail}"
            )))
        }
        (1, None) => Err(OfferError::bad("the SDP offer's m-line has no a=mid")),
        (n, _) => Err(OfferError::bad(format!(
            "the SDP offer has {n} m-lines and no a=group:BUNDLE: corelay carries a participant's media on one transport (use bundle-policy max-bundle or balanced)"
        ))),
    }
}

/// The answer to an offer that had no BUNDLE group has none either
/// (RFC 8843 §7.2), whatever str0m wrote.
fn unbundle_answer(offer: &str, answer: String) -> String {
    if offer.contains("a=group:BUNDLE") {
        return answer;
    }
    answer
        .split_inclusive('\n')
        .filter(|l| !l.starts_with("a=group:BUNDLE"))
        .collect()
}

/// str0m's `accept_offer`, and the answer as text. The caller drains.
fn apply_offer(rtc: &mut Rtc, offer: SdpOffer) -> Result<String, OfferError> {
    let answer = rtc
        .sdp_api()
        .accept_offer(offer)
        .map_err(|e| OfferError::bad(format!("the SDP offer was refused: {}", clean(&e))))?;
    Ok(answer.to_sdp_string())
}

/// An error text fit for a client: str0m's own messages, bounded, without
/// anything that looks like an address or a debug dump.
fn clean(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    if text.contains("0x") || text.contains('{') || text.len() > 200 {
        return "it is inconsistent with the session".to_string();
    }
    text
}

/// Drains a freshly negotiated `Rtc` to its first timeout (str0m's invariant
/// after a mutation).
fn settle(rtc: &mut Rtc) -> Result<(), OfferError> {
    for _ in 0..10_000 {
        match rtc.poll_output() {
            Ok(Output::Timeout(_)) => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                return Err(OfferError::bad(format!(
                    "negotiation failed: {}",
                    clean(&e)
                )));
            }
        }
    }
    Ok(())
}

/// The line-level rules str0m relies on, checked before it parses: at most
/// `max_mlines` m-lines (counted before anything is built), payload types
/// 0-127 (str0m indexes a 128-entry table with them), and one meaning per
/// payload type across the bundle (str0m asserts that a payload type is
/// claimed once: the same number with another codec or other format
/// parameters in a second m-line panics it).
fn validate_lines(sdp: &str, limits: &OfferLimits) -> Result<(), OfferError> {
    /// What one payload type means: its rtpmap and fmtp values.
    #[derive(Default, Clone, PartialEq)]
    struct PtDef {
        rtpmap: Option<String>,
        fmtp: Option<String>,
    }
    fn merge(
        section: &mut HashMap<u8, PtDef>,
        bundle: &mut HashMap<u8, (PtDef, usize)>,
        index: usize,
    ) -> Result<(), OfferError> {
        for (pt, def) in section.drain() {
            if def.rtpmap.is_none() {
                continue;
            }
            match bundle.get(&pt) {
                Some((seen, first)) if *seen != def => {
                    return Err(OfferError::bad(format!(
                        "payload type {pt} has one rtpmap/fmtp in m-line {first} and another in m-line {index}; within a bundle a payload type keeps one meaning"
                    )));
                }
                Some(_) => {}
                None => {
                    bundle.insert(pt, (def, index));
                }
            }
        }
        Ok(())
    }
    fn pt_of(text: &str) -> Result<u8, OfferError> {
        match text.parse::<u8>() {
            Ok(pt) if pt <= 127 => Ok(pt),
            _ => Err(OfferError::bad(format!(
                "payload type {:?} is not a number from 0 to 127",
                text.chars().take(16).collect::<String>()
            ))),
        }
    }
    let mut mlines = 0usize;
    let mut rids = 0usize;
    let mut bundle: HashMap<u8, (PtDef, usize)> = HashMap::new();
    let mut section: HashMap<u8, PtDef> = HashMap::new();
    for line in sdp.lines() {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("m=") {
            merge(&mut section, &mut bundle, mlines)?;
            mlines += 1;
            if mlines > limits.max_mlines {
                return Err(OfferError::TooManyLines {
                    limit: limits.max_mlines,
                });
            }
            rids = 0;
            let mut it = rest.split_whitespace();
            if matches!(it.next(), Some("audio" | "video")) {
                for pt in it.skip(2) {
                    pt_of(pt)?;
                }
            }
            continue;
        }
        if mlines == 0 {
            continue;
        }
        if line.starts_with("a=rid:") {
            rids += 1;
            if rids > MAX_LAYERS {
                return Err(OfferError::bad(format!(
                    "m-line {mlines} declares more than {MAX_LAYERS} simulcast encodings (a=rid)"
                )));
            }
            continue;
        }
        let (is_rtpmap, value) = if let Some(v) = line.strip_prefix("a=rtpmap:") {
            (true, v)
        } else if let Some(v) = line.strip_prefix("a=fmtp:") {
            (false, v)
        } else {
            if let Some(v) = line.strip_prefix("a=rtcp-fb:") {
                let pt = v.split(' ').next().unwrap_or(v);
                if pt != "*" {
                    pt_of(pt)?;
                }
            }
            continue;
        };
        let (pt, rest) = value.split_once(' ').unwrap_or((value, ""));
        let pt = pt_of(pt)?;
        let def = section.entry(pt).or_default();
        let slot = if is_rtpmap {
            &mut def.rtpmap
        } else {
            &mut def.fmtp
        };
        let mut params: Vec<&str> = rest.split(';').map(str::trim).collect();
        params.sort_unstable();
        let value = params.join(";").to_ascii_lowercase();
        if slot.as_ref().is_some_and(|v| *v != value) {
            return Err(OfferError::bad(format!(
                "payload type {pt} has two different a={} lines in m-line {mlines}",
                if is_rtpmap { "rtpmap" } else { "fmtp" }
            )));
        }
        *slot = Some(value);
    }
    merge(&mut section, &mut bundle, mlines)
}

/// Media lines of a negotiation.
#[derive(Default, Debug)]
pub struct NewLines {
    pub tracks: Vec<MediaLine>,
    pub slots: Vec<MediaLine>,
}

/// Repeats the answer's candidates, and `a=end-of-candidates`, in every
/// m-section. str0m writes them in the first section only, which is enough
/// under BUNDLE for browsers, but some stacks (aiortc) read a bundled
/// transport's candidates from another section and would find none.
fn candidates_everywhere(sdp: &str) -> String {
    let candidates: Vec<&str> = sdp
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .collect();
    let mut out = String::with_capacity(sdp.len() + 512);
    let mut section: Vec<&str> = Vec::new();
    let mut in_media = false;
    let flush = |out: &mut String, section: &mut Vec<&str>, media: bool| {
        let has_cand = section.iter().any(|l| l.starts_with("a=candidate:"));
        let has_end = section.contains(&"a=end-of-candidates");
        for l in section.drain(..) {
            out.push_str(l);
            out.push_str("\r\n");
        }
        if media {
            if !has_cand {
                for c in &candidates {
                    out.push_str(c);
                    out.push_str("\r\n");
                }
            }
            if !has_end {
                out.push_str("a=end-of-candidates\r\n");
            }
        }
    };
    for line in sdp.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        if line.starts_with("m=") {
            flush(&mut out, &mut section, in_media);
            in_media = true;
        }
        section.push(line);
    }
    flush(&mut out, &mut section, in_media);
    out
}

/// Drains a freshly negotiated `Rtc` (str0m's invariant after a mutation) and
/// reports its media lines, read from the answer's mids in m-line order.
fn initial_lines(rtc: &mut Rtc, answer: &str) -> Result<NewLines, OfferError> {
    settle(rtc)?;
    let mut lines = NewLines::default();
    for mid in answer
        .lines()
        .filter_map(|l| l.trim_end().strip_prefix("a=mid:"))
    {
        let Some(media) = rtc.media(Mid::from(mid)) else {
            continue; // the data channel's m-line
        };
        let line = MediaLine {
            mid: media.mid(),
            kind: media.kind(),
        };
        match media.direction() {
            Direction::RecvOnly => lines.tracks.push(line),
            Direction::SendOnly => lines.slots.push(line),
            Direction::SendRecv => {
                lines.tracks.push(line);
                lines.slots.push(line);
            }
            Direction::Inactive => {}
        }
    }
    Ok(lines)
}

/// Header extensions corelay uses or forwards, most needed first: when an
/// offer gives one id two meanings, the one earlier here keeps it.
const EXTENSION_PRIORITY: [&str; 5] = [
    "urn:ietf:params:rtp-hdrext:sdes:mid",
    "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01",
    "urn:ietf:params:rtp-hdrext:ssrc-audio-level",
    "http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time",
    "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time",
];

/// An offer whose m-lines give one extension id two meanings (aiortc puts
/// abs-send-time on video and ssrc-audio-level on audio both at id 2) must
/// not get an answer that does the same: RTP of a bundle shares one
/// transport, and a client that maps ids per bundle misreads one of them
/// (aiortc's parser failed on the 1-byte audio level at an id it read as
/// abs-send-time, issue 10). For each such id the most needed extension
/// ([`EXTENSION_PRIORITY`], else the first seen) keeps it and the other
/// `a=extmap` lines with that id are removed from the offer, so the answer
/// does not negotiate them. Offers without a conflict pass through as they are.
fn bundle_safe_extmaps(sdp: &str) -> std::borrow::Cow<'_, str> {
    fn extmap(line: &str) -> Option<(u16, &str)> {
        let rest = line.trim_end().strip_prefix("a=extmap:")?;
        let mut it = rest.split_whitespace();
        let id = it.next()?.split('/').next()?.parse().ok()?;
        Some((id, it.next()?))
    }
    let mut meanings: Vec<(u16, Vec<&str>)> = Vec::new();
    for (id, uri) in sdp.lines().filter_map(extmap) {
        match meanings.iter_mut().find(|(i, _)| *i == id) {
            Some((_, uris)) if !uris.contains(&uri) => uris.push(uri),
            Some(_) => {}
            None => meanings.push((id, vec![uri])),
        }
    }
    let keep: Vec<(u16, &str)> = meanings
        .iter()
        .filter(|(_, uris)| uris.len() > 1)
        .filter_map(|(id, uris)| {
            let rank = |u: &&&str| {
                EXTENSION_PRIORITY
                    .iter()
                    .position(|p| *p == **u)
                    .unwrap_or(EXTENSION_PRIORITY.len())
            };
            // min_by_key keeps the first of equals: first seen wins a tie.
            uris.iter().min_by_key(rank).map(|u| (*id, *u))
        })
        .collect();
    if keep.is_empty() {
        return std::borrow::Cow::Borrowed(sdp);
    }
    let mut out = String::with_capacity(sdp.len());
    for line in sdp.split_inclusive('\n') {
        let dropped = extmap(line)
            .is_some_and(|(id, uri)| keep.iter().any(|(k, winner)| *k == id && *winner != uri));
        if !dropped {
            out.push_str(line);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The active media sections of an offer: kind, whether the client sends on
/// it, and the codec names it offers (lowercase).
struct Section {
    kind: String,
    active: bool,
    sends: bool,
    codecs: Vec<String>,
}

fn sections(sdp: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for line in sdp.lines() {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("m=") {
            let mut it = rest.split_whitespace();
            let kind = it.next().unwrap_or_default().to_string();
            let port = it.next().unwrap_or("0");
            out.push(Section {
                kind,
                active: port != "0",
                sends: true,
                codecs: Vec::new(),
            });
        } else if let Some(sec) = out.last_mut() {
            if let Some(rest) = line.strip_prefix("a=rtpmap:") {
                let enc = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|e| e.split('/').next())
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                if !sec.codecs.contains(&enc) {
                    sec.codecs.push(enc);
                }
            } else {
                match line {
                    "a=inactive" => sec.active = false,
                    "a=recvonly" => sec.sends = false,
                    _ => {}
                }
            }
        }
    }
    out.retain(|s| s.active && (s.kind == "audio" || s.kind == "video"));
    out
}

/// Every active audio m-line must offer Opus; otherwise the answer would
/// silently disable the line.
fn check_opus(sdp: &str) -> Result<(), OfferError> {
    if sections(sdp)
        .iter()
        .any(|s| s.kind == "audio" && !s.codecs.iter().any(|c| c == "opus"))
    {
        return Err(OfferError::CodecMismatch(
            "an audio m-line offers no Opus (this server forwards Opus audio)".into(),
        ));
    }
    Ok(())
}

/// The room's codec policy applied to an offer: which video codecs the
/// participant's `Rtc` enables, and the codec the offer gives its room.
///
/// Every active video m-line must offer the codec the session uses
/// (otherwise the answer would silently disable the line). In a room with a
/// codec that is the room's; in a room without one, an offer that publishes
/// video picks the first of `enabled` that all its video lines offer and
/// gives it to the room; an offer that only receives video keeps every such
/// codec, so that it can take whichever the room's first publisher brings.
fn choose_codecs(
    enabled: &[VideoCodec],
    room: Option<VideoCodec>,
    sdp: &str,
) -> Result<(Vec<VideoCodec>, Option<VideoCodec>), OfferError> {
    let video: Vec<Section> = sections(sdp)
        .into_iter()
        .filter(|s| s.kind == "video")
        .collect();
    let offers = |c: VideoCodec| {
        let name = c.name().to_ascii_lowercase();
        video.iter().all(|s| s.codecs.contains(&name))
    };
    let offered = || {
        let mut names: Vec<String> = Vec::new();
        for s in &video {
            for c in &s.codecs {
                let c = c.to_ascii_uppercase();
                if !names.contains(&c)
                    && !["RTX", "RED", "ULPFEC", "FLEXFEC-03"].contains(&c.as_str())
                {
                    names.push(c);
                }
            }
        }
        if names.is_empty() {
            "no video codec".to_string()
        } else {
            names.join(", ")
        }
    };
    if let Some(c) = room {
        if !offers(c) {
            return Err(OfferError::CodecMismatch(format!(
                "this room's video codec is {} (its first publisher chose it); the offer's video has {}",
                c.name(),
                offered()
            )));
        }
        return Ok((vec![c], None));
    }
    let usable: Vec<VideoCodec> = enabled.iter().copied().filter(|c| offers(*c)).collect();
    let Some(first) = usable.first().copied() else {
        let names: Vec<&str> = enabled.iter().map(|c| c.name()).collect();
        return Err(OfferError::CodecMismatch(format!(
            "the offer's video has {}; this server forwards {} video",
            offered(),
            names.join(" or ")
        )));
    };
    if video.is_empty() {
        return Ok((enabled.to_vec(), None));
    }
    if video.iter().any(|s| s.sends) {
        return Ok((vec![first], Some(first)));
    }
    Ok((usable, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use str0m::change::SdpApi;

    fn settings() -> RtcSettings {
        RtcSettings::default()
    }

    fn client_offer(video: VideoCodec) -> String {
        client_offer_with(&[video])
    }

    fn client_offer_with(video: &[VideoCodec]) -> String {
        let mut b = Rtc::builder().clear_codecs().enable_opus(true, false);
        for v in video {
            b = match v {
                VideoCodec::H264 => b.enable_h264(true),
                VideoCodec::Vp8 => b.enable_vp8(true),
                VideoCodec::Vp9 => b.enable_vp9(true),
                VideoCodec::Av1 => b.enable_av1(true),
            };
        }
        let mut rtc = b.build(Instant::now());
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        rtc.add_local_candidate(Candidate::host(addr, "udp").unwrap());
        let mut api: SdpApi = rtc.sdp_api();
        api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
        api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        api.add_channel("events".into());
        let (offer, _pending) = api.apply().unwrap();
        offer.to_sdp_string()
    }

    #[test]
    fn accepts_a_publisher_with_slots() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let acc = accept_offer(
            &settings(),
            Instant::now(),
            &client_offer(VideoCodec::H264),
            addr,
            None,
        )
        .unwrap();
        // H.264 is all it offers: the room gets H.264.
        assert_eq!(acc.room_codec, Some(VideoCodec::H264));
        assert_eq!(acc.codecs, [VideoCodec::H264]);
        assert_eq!(acc.tracks.len(), 2);
        assert_eq!(acc.slots.len(), 1);
        assert!(acc.answer.contains("a=ice-lite"));
        assert!(acc.answer.contains("H264"));
        assert!(!acc.answer.contains("VP8"));
        assert!(acc.answer.contains("127.0.0.1 3478"));
        // Every m-section carries the candidate and end-of-candidates.
        let sections = acc.answer.split("\r\nm=").skip(1).collect::<Vec<_>>();
        assert_eq!(sections.len(), 4);
        for sec in sections {
            assert!(sec.contains("a=candidate:"), "{sec}");
            assert!(sec.contains("a=end-of-candidates"), "{sec}");
        }
        assert!(!acc.ufrag.is_empty());
        // The rid extensions are answered (simulcast); the engine bounds
        // the receive streams they can open (engine/streams.rs).
        assert!(acc.answer.contains("rtp-stream-id"), "{}", acc.answer);
    }

    #[test]
    fn an_ice_restart_by_offer_gets_new_unguessable_credentials() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let offer = client_offer(VideoCodec::H264);
        let mut acc = accept_offer(&settings(), Instant::now(), &offer, addr, None).unwrap();
        let ice_of = |sdp: &str, what: &str| {
            sdp.lines()
                .find_map(|l| l.strip_prefix(what))
                .unwrap()
                .to_string()
        };
        let (ufrag0, pwd0) = (acc.ufrag.clone(), ice_of(&acc.answer, "a=ice-pwd:"));
        // The same offer again: no restart, the same credentials.
        let again =
            check_renegotiation(&settings(), Instant::now(), &offer, &offer, &acc.codecs).unwrap();
        let answer = apply_prepared(&mut acc.rtc, again).unwrap();
        assert_eq!(ice_of(&answer, "a=ice-ufrag:"), ufrag0);
        assert_eq!(ice_of(&answer, "a=ice-pwd:"), pwd0);
        // New client credentials: an ICE restart, with new server ones
        // from the CSPRNG (str0m's would repeat after the same seed).
        let client_ufrag = ice_of(&offer, "a=ice-ufrag:");
        let restart = offer.replace(&client_ufrag, "NewClientUfrag");
        let mut seen = Vec::new();
        for shard in [3, 4095] {
            let at = MediaAt {
                shard: ShardId(shard),
                ..MediaAt::from(addr)
            };
            let mut acc = accept_offer_on(&settings(), Instant::now(), &offer, at, None).unwrap();
            let prepared =
                check_renegotiation(&settings(), Instant::now(), &offer, &restart, &acc.codecs)
                    .unwrap();
            fastrand::seed(7);
            let answer = apply_prepared(&mut acc.rtc, prepared).unwrap();
            let (ufrag, pwd) = (
                ice_of(&answer, "a=ice-ufrag:"),
                ice_of(&answer, "a=ice-pwd:"),
            );
            assert_ne!(ufrag, acc.ufrag);
            assert_eq!((ufrag.len(), pwd.len()), (16, 24));
            // Still the same shard's (a shared port routes by it).
            assert_eq!(ufrag_shard(&acc.ufrag), Some(ShardId(shard)));
            assert_eq!(ufrag_shard(&ufrag), Some(ShardId(shard)));
            // What the answer says is what the agent now answers checks with.
            let live = acc.rtc.direct_api().local_ice_credentials();
            assert_eq!((&live.ufrag, &live.pass), (&ufrag, &pwd));
            // Every candidate names the ufrag in force, or none.
            for c in answer.lines().filter(|l| l.starts_with("a=candidate:")) {
                let words: Vec<&str> = c.split(' ').collect();
                if let Some(i) = words.iter().position(|w| *w == "ufrag") {
                    assert_eq!(words.get(i + 1), Some(&ufrag.as_str()), "{c}");
                }
            }
            seen.push(ufrag);
        }
        assert_ne!(seen[0], seen[1], "the same seed gave the same credentials");
    }

    #[test]
    fn candidates_name_the_ufrag_in_force() {
        let ice = IceCreds {
            ufrag: "NEW".into(),
            pass: "PWD".into(),
        };
        let sdp = "v=0\r\na=ice-ufrag:old\r\na=ice-pwd:oldpwd\r\na=candidate:1 1 udp 2130706175 127.0.0.1 5000 typ host ufrag old\r\na=candidate:ufrag 1 udp 1 127.0.0.1 5000 typ host generation 0\r\n";
        assert_eq!(
            with_ice_credentials(sdp, &ice),
            "v=0\r\na=ice-ufrag:NEW\r\na=ice-pwd:PWD\r\na=candidate:1 1 udp 2130706175 127.0.0.1 5000 typ host ufrag NEW\r\na=candidate:ufrag 1 udp 1 127.0.0.1 5000 typ host generation 0\r\n"
        );
    }

    #[test]
    fn ice_credentials_are_unguessable_and_well_formed() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let offer = client_offer(VideoCodec::H264);
        let creds = || {
            // str0m's own credentials would repeat after the same seed.
            fastrand::seed(7);
            let acc = accept_offer(&settings(), Instant::now(), &offer, addr, None).unwrap();
            let pwd = acc
                .answer
                .lines()
                .find_map(|l| l.strip_prefix("a=ice-pwd:"))
                .unwrap()
                .to_string();
            assert!(
                acc.answer
                    .contains(&format!("a=ice-ufrag:{}\r\n", acc.ufrag))
            );
            (acc.ufrag, pwd)
        };
        let first = creds();
        assert_ne!(first, creds());
        let (ufrag, pwd) = first;
        assert_eq!((ufrag.len(), pwd.len()), (16, 24));
        let ice_char = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/';
        assert!(
            ufrag.chars().chain(pwd.chars()).all(ice_char),
            "{ufrag} {pwd}"
        );
        // The first two name the shard, both ways; nothing else names one.
        for i in [0, 1, 63, 64, 1000, UFRAG_SHARDS - 1] {
            let c = ice_credentials(ShardId(i)).unwrap();
            assert_eq!(ufrag_shard(&c.ufrag), Some(ShardId(i)), "{}", c.ufrag);
        }
        assert_eq!(ufrag_shard("A"), None);
        assert_eq!(ufrag_shard("A:"), None);
        assert_eq!(ufrag_shard("é"), None);
        // Each of the 64 characters for one of the 64 values.
        let all: std::collections::BTreeSet<char> = (0..=255).map(super::ice_char).collect();
        assert_eq!(all.len(), 64);
        assert!(all.iter().all(|&c| ice_char(c)));
    }

    /// The client offer with `rids` as simulcast encodings of its first
    /// (sendonly video) m-line.
    pub(crate) fn simulcast_offer(rids: &[&str]) -> String {
        let sdp = client_offer(VideoCodec::Vp8);
        let mut lines: String = rids.iter().map(|r| format!("a=rid:{r} send\r\n")).collect();
        lines.push_str(&format!("a=simulcast:send {}\r\n", rids.join(";")));
        let mid = sdp.find("a=mid:").unwrap();
        let at = mid + sdp[mid..].find("\r\n").unwrap() + 2;
        format!("{}{lines}{}", &sdp[..at], &sdp[at..])
    }

    #[test]
    fn answers_simulcast_and_bounds_the_encodings() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let acc = accept_offer(
            &settings(),
            Instant::now(),
            &simulcast_offer(&["q", "h", "f"]),
            addr,
            None,
        )
        .unwrap();
        assert!(
            acc.answer.contains("a=simulcast:recv q;h;f"),
            "{}",
            acc.answer
        );
        assert!(acc.answer.contains("a=rid:q recv"), "{}", acc.answer);
        assert!(acc.answer.contains("rtp-stream-id"), "{}", acc.answer);
        let five = accept_offer(
            &settings(),
            Instant::now(),
            &simulcast_offer(&["a", "b", "c", "d", "e"]),
            addr,
            None,
        );
        match five {
            Err(OfferError::Bad(m)) => assert!(m.contains("simulcast encodings"), "{m}"),
            other => panic!("five rids accepted: {:?}", other.map(|a| a.answer)),
        }
    }

    fn without_bundle_group(sdp: &str) -> String {
        sdp.split_inclusive('\n')
            .filter(|l| !l.starts_with("a=group:BUNDLE"))
            .collect()
    }

    /// simple-whip-client publishing video only (bundle-policy none) sent
    /// one m-line and no BUNDLE group, and str0m refused it: "Session
    /// attribute a=group missing".
    #[test]
    fn one_mline_without_bundle_is_accepted_and_answered_without_bundle() {
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_h264(true)
            .build(Instant::now());
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        rtc.add_local_candidate(Candidate::host(addr, "udp").unwrap());
        let mut api: SdpApi = rtc.sdp_api();
        api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
        let (offer, _pending) = api.apply().unwrap();
        let offer = without_bundle_group(&offer.to_sdp_string());
        assert!(!offer.contains("a=group:BUNDLE"));
        let acc = accept_offer(&settings(), Instant::now(), &offer, addr, None).unwrap();
        assert_eq!(acc.tracks.len(), 1);
        assert!(!acc.answer.contains("a=group:BUNDLE"), "{}", acc.answer);

        // Several m-lines without a group: a 400 that says why.
        let two = without_bundle_group(&client_offer(VideoCodec::H264));
        let Err(e) = accept_offer(&settings(), Instant::now(), &two, addr, None) else {
            panic!("accepted several unbundled m-lines");
        };
        assert!(e.to_string().contains("no a=group:BUNDLE"), "{e}");
    }

    /// ICE-TCP: a passive TCP candidate on the same address, after the UDP
    /// one, in every m-section.
    #[test]
    fn ice_tcp_adds_a_passive_candidate_after_the_udp_one() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let on = RtcSettings {
            ice_tcp: true,
            ..settings()
        };
        let acc = accept_offer(
            &on,
            Instant::now(),
            &client_offer(VideoCodec::H264),
            addr,
            None,
        )
        .unwrap();
        for sec in acc.answer.split("\r\nm=").skip(1) {
            let udp = sec.find(" udp ").expect("a UDP candidate");
            let tcp = sec
                .find("tcptype passive")
                .expect("a passive TCP candidate");
            assert!(udp < tcp, "{sec}");
            assert!(
                sec.contains("127.0.0.1 3478 typ host tcptype passive"),
                "{sec}"
            );
        }
        let off = accept_offer(
            &settings(),
            Instant::now(),
            &client_offer(VideoCodec::H264),
            addr,
            None,
        )
        .unwrap();
        assert!(!off.answer.contains("tcptype"), "{}", off.answer);
    }

    #[test]
    fn refuses_empty_and_garbage() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let e = accept_offer(&settings(), Instant::now(), "  ", addr, None).unwrap_err();
        assert_eq!(e.code(), "bad_offer");
        assert!(e.to_string().contains("empty"));
        let e = accept_offer(&settings(), Instant::now(), "hello", addr, None).unwrap_err();
        assert_eq!(e.code(), "bad_offer");
        let e = accept_offer(
            &settings(),
            Instant::now(),
            "v=0\r\nm=video x\r\n",
            addr,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), "bad_offer");
    }

    /// A Firefox-shaped offer (VP8, VP9, AV1; no H.264) in a room that an
    /// H.264 publisher opened is refused, naming the room's codec and what
    /// the offer had (issue 10: Firefox was refused by a default server
    /// with a message that named no room codec).
    #[test]
    fn a_room_keeps_its_first_publishers_codec() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let now = Instant::now();
        // Default preference (VP8, then H.264): a client with both gets VP8.
        let both = client_offer_with(&[VideoCodec::H264, VideoCodec::Vp8]);
        let acc = accept_offer(&settings(), now, &both, addr, None).unwrap();
        assert_eq!(acc.room_codec, Some(VideoCodec::Vp8));
        assert!(acc.answer.contains("VP8") && !acc.answer.contains("H264"));
        // An H.264-only publisher opens a room: H.264 it is, and a client
        // with both joins that room on H.264.
        let h264 = client_offer(VideoCodec::H264);
        let acc = accept_offer(&settings(), now, &h264, addr, None).unwrap();
        assert_eq!(acc.room_codec, Some(VideoCodec::H264));
        let acc = accept_offer(&settings(), now, &both, addr, Some(VideoCodec::H264)).unwrap();
        assert_eq!((acc.room_codec, acc.codecs), (None, vec![VideoCodec::H264]));
        assert!(acc.answer.contains("H264") && !acc.answer.contains("VP8"));
        // A VP8-only client there is refused with both codecs named.
        let vp8 = client_offer(VideoCodec::Vp8);
        let e = accept_offer(&settings(), now, &vp8, addr, Some(VideoCodec::H264)).unwrap_err();
        assert_eq!(e.code(), "codec_mismatch");
        let text = e.to_string();
        assert!(
            text.contains("room's video codec is H264") && text.contains("VP8"),
            "{text}"
        );
    }

    /// aiortc's bundled offer: abs-send-time on video and ssrc-audio-level
    /// on audio at one id. The answer gives that id one meaning (the audio
    /// level, which speaker detection needs), issue 10.
    #[test]
    fn one_extension_id_has_one_meaning_in_the_answer() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let offer = client_offer(VideoCodec::H264);
        let ids = |sdp: &str, uri: &str| -> Vec<String> {
            sdp.lines()
                .filter(|l| l.starts_with("a=extmap:") && l.trim_end().ends_with(uri))
                .map(|l| {
                    l["a=extmap:".len()..]
                        .split([' ', '/'])
                        .next()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let level = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
        let send_time = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time";
        let (l, t) = (ids(&offer, level), ids(&offer, send_time));
        assert!(!l.is_empty() && !t.is_empty(), "{offer}");
        // Give the audio level the abs-send-time id, as aiortc does.
        let clash = offer.replace(
            &format!("a=extmap:{} {level}", l[0]),
            &format!("a=extmap:{} {level}", t[0]),
        );
        assert_ne!(clash, offer);
        let acc = accept_offer(&settings(), Instant::now(), &clash, addr, None).unwrap();
        assert_eq!(ids(&acc.answer, level), [t[0].clone()], "{}", acc.answer);
        assert!(ids(&acc.answer, send_time).is_empty(), "{}", acc.answer);
        // Without a clash nothing changes.
        assert_eq!(bundle_safe_extmaps(&offer), offer);
    }

    #[test]
    fn a_viewer_in_a_room_without_a_codec_keeps_every_shared_one() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let mut b = Rtc::builder()
            .clear_codecs()
            .enable_opus(true, false)
            .enable_vp8(true)
            .enable_h264(true)
            .build(Instant::now());
        b.add_local_candidate(Candidate::host("127.0.0.1:5000".parse().unwrap(), "udp").unwrap());
        let mut api = b.sdp_api();
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        let (offer, _) = api.apply().unwrap();
        let acc = accept_offer(
            &settings(),
            Instant::now(),
            &offer.to_sdp_string(),
            addr,
            None,
        )
        .unwrap();
        assert_eq!(
            acc.room_codec, None,
            "a viewer does not pick the room's codec"
        );
        assert_eq!(acc.codecs, [VideoCodec::Vp8, VideoCodec::H264]);
    }

    #[test]
    fn refuses_the_wrong_video_codec() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let h264_only = RtcSettings {
            video_codecs: vec![VideoCodec::H264],
            ..settings()
        };
        let e = accept_offer(
            &h264_only,
            Instant::now(),
            &client_offer(VideoCodec::Vp8),
            addr,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), "codec_mismatch");
        assert!(e.to_string().contains("forwards H264"), "{e}");
    }
}
