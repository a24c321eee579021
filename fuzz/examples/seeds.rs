//! Writes the checked-in seed corpus (fuzz/seeds/<target>/) and the
//! renegotiation target's first offer (fuzz/fixtures/base-offer.sdp):
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --example seeds
//!
//! Everything comes from real str0m sessions with the harness's seeded
//! generator, so the STUN requests and data-channel requests in the seeds
//! carry the ufrags, passwords, mids and participant ids the targets use.
//! The Chromium-like offer is a fixed text (Chromium's layout for the demo
//! page's transceivers).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corelay_core::offer::accept_offer_with_ice;
use corelay_fuzz::{BASE_OFFER, Live, RNG_SEED, client_offer, origin, server_addr, settings};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::{Candidate, Rtc};

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let seeds = root.join("seeds");
    base_offer(&root);
    offers(&seeds.join("offer"));
    renegotiations(&seeds.join("renegotiate"));
    datagrams(&seeds.join("datagram"));
    channel_messages(&seeds.join("datachannel"));
}

fn write(dir: &Path, name: &str, data: impl AsRef<[u8]>) {
    fs::create_dir_all(dir).expect("seed directory");
    fs::write(dir.join(name), data).expect("seed file");
    println!("{}", dir.join(name).display());
}

fn client_addr() -> SocketAddr {
    "127.0.0.1:5001".parse().expect("literal address")
}

/// Lines of an offer but its DTLS fingerprint (a fresh key each run, and a
/// renegotiation does not look at it again).
fn without_fingerprint(sdp: &str) -> String {
    sdp.lines()
        .filter(|l| !l.starts_with("a=fingerprint:"))
        .collect()
}

/// The renegotiation target's first offer: a str0m participant's. Kept
/// when only its fingerprint differs, so that running this again changes
/// nothing the renegotiation seeds depend on.
fn base_offer(root: &Path) {
    fastrand::seed(RNG_SEED);
    let c = client_offer(client_addr(), origin());
    if without_fingerprint(&c.offer) != without_fingerprint(BASE_OFFER) {
        write(&root.join("fixtures"), "base-offer.sdp", c.offer);
    }
}

fn offers(dir: &Path) {
    fastrand::seed(RNG_SEED);
    write(
        dir,
        "str0m-participant.sdp",
        client_offer(client_addr(), origin()).offer,
    );
    write(
        dir,
        "chromium-participant.sdp",
        CHROMIUM_OFFER.replace('\n', "\r\n"),
    );
    // WHIP (publish only) and WHEP (receive only) as str0m offers them.
    for (name, dirs, channel, vp8) in [
        ("str0m-whip.sdp", [Direction::SendOnly; 2], false, false),
        ("str0m-whep.sdp", [Direction::RecvOnly; 2], false, false),
        // The wrong video codec for the room: refused with codec_mismatch.
        (
            "str0m-vp8.sdp",
            [Direction::SendOnly, Direction::RecvOnly],
            true,
            true,
        ),
    ] {
        let mut b = Rtc::builder()
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_opus(true, false);
        b = if vp8 {
            b.enable_vp8(true)
        } else {
            b.enable_h264(true)
        };
        let mut rtc = b.build(origin());
        rtc.add_local_candidate(Candidate::host(client_addr(), "udp").expect("candidate"));
        let mut api = rtc.sdp_api();
        api.add_media(MediaKind::Video, dirs[0], None, None, None);
        api.add_media(MediaKind::Audio, dirs[1], None, None, None);
        if channel {
            api.add_channel("events".into());
        }
        let (offer, _) = api.apply().expect("changes");
        write(dir, name, offer.to_sdp_string());
    }
}

/// Offers the base offer's client makes after its first answer.
fn renegotiations(dir: &Path) {
    fastrand::seed(RNG_SEED);
    let mut c = client_offer(client_addr(), origin());
    assert_eq!(
        without_fingerprint(&c.offer),
        without_fingerprint(BASE_OFFER),
        "fixtures/base-offer.sdp is stale: run this example again"
    );
    let audio = c.audio_mid;
    // str0m's own server credentials (None), drawn from the seeded generator
    // as when these seeds were made, so that every later draw matches too.
    let acc = accept_offer_with_ice(&settings(), origin(), &c.offer, server_addr(), None, None)
        .expect("accepted");
    let answer = SdpAnswer::from_sdp_string(&acc.answer).expect("answer");
    c.rtc
        .sdp_api()
        .accept_answer(c.pending, answer)
        .expect("accept answer");
    let mut n = 0;
    let mut step = |c: &mut Rtc, name: &str, f: &dyn Fn(&mut str0m::change::SdpApi)| {
        let mut api = c.sdp_api();
        f(&mut api);
        let (offer, pending) = api.apply().expect("changes");
        let sdp = offer.to_sdp_string();
        n += 1;
        write(dir, &format!("{n}-{name}.sdp"), &sdp);
        // Complete it so that the next step builds on it, as a client would.
        let acc = accept_offer_with_ice(&settings(), origin(), &sdp, server_addr(), None, None);
        if let Ok(acc) = acc
            && let Ok(answer) = SdpAnswer::from_sdp_string(&acc.answer)
        {
            let _ = c.sdp_api().accept_answer(pending, answer);
        }
    };
    step(&mut c.rtc, "add-video-slot", &|api| {
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    });
    step(&mut c.rtc, "add-audio-slot", &|api| {
        api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
    });
    step(&mut c.rtc, "ice-restart", &|api| {
        api.ice_restart(true);
    });
    step(&mut c.rtc, "stop-audio", &move |api| {
        api.stop_media(audio);
    });
    write(dir, "0-same-offer.sdp", BASE_OFFER);
}

/// Real datagrams of a participant's session, by kind, plus a few by hand.
fn datagrams(dir: &Path) {
    let mut live = Live::connect_recording();
    for seq in 0..3u64 {
        let nal = if seq == 0 { 0x65 } else { 0x41 };
        live.publish(0, true, 100 + seq, vec![nal, 1, 2, 3, 4, 5]);
        live.publish(0, false, 200 + seq, vec![0xfc, 0xff, 0xfe]);
        live.advance(Duration::from_millis(20));
    }
    for _ in 0..300 {
        live.advance(Duration::from_millis(20)); // RTCP reports, STUN consent
    }
    let mut kinds: Vec<&str> = Vec::new();
    for d in live.recorded(0) {
        let kind = match (d.first(), d.get(1)) {
            (Some(0..=3), _) if d.get(0..2) == Some(&[0, 1]) => "stun-binding-request",
            (Some(0..=3), _) => "stun",
            (Some(22), _) => "dtls-handshake",
            (Some(20..=63), _) => "dtls-record",
            (Some(128..=191), Some(192..=223)) => "srtcp",
            (Some(128..=191), _) => "srtp",
            _ => "other",
        };
        // The first two of each kind.
        if kinds.iter().filter(|k| **k == kind).count() < 2 {
            kinds.push(kind);
            let n = kinds.iter().filter(|k| **k == kind).count();
            write(dir, &format!("{kind}-{n}.bin"), d);
        }
    }
    // By hand: an unencrypted RTP header with a payload, an RTCP receiver
    // report, a STUN request for an unknown ufrag.
    let mut rtp = vec![0x80, 96, 0, 1, 0, 0, 0, 10, 0x12, 0x34, 0x56, 0x78];
    rtp.extend_from_slice(&[0x65, 0, 0, 0]);
    write(dir, "plain-rtp.bin", rtp);
    let rr = [
        0x81, 201, 0, 7, 0, 0, 0, 1, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0,
    ];
    write(dir, "plain-rtcp-rr.bin", rr);
    let mut stun = vec![0, 1, 0, 12, 0x21, 0x12, 0xa4, 0x42];
    stun.extend_from_slice(&[7; 12]);
    stun.extend_from_slice(&[0, 6, 0, 7]);
    stun.extend_from_slice(b"abc:def\0");
    write(dir, "stun-unknown-ufrag.bin", stun);
}

fn channel_messages(dir: &Path) {
    fastrand::seed(RNG_SEED);
    let live = Live::connect();
    let slot = live
        .clients()
        .first()
        .map(|c| c.slot_mid.to_string())
        .unwrap_or_default();
    let other = live
        .clients()
        .get(1)
        .map(|c| c.id.to_string())
        .unwrap_or_default();
    write(
        dir,
        "pin.json",
        format!(r#"{{"type":"pin","participant":"{other}","mid":"{slot}"}}"#),
    );
    write(
        dir,
        "unpin.json",
        format!(r#"{{"type":"unpin","mid":"{slot}"}}"#),
    );
    write(
        dir,
        "pin-self.json",
        format!(r#"{{"type":"pin","participant":"p000000000001","mid":"{slot}"}}"#),
    );
    write(
        dir,
        "pin-unknown.json",
        r#"{"type":"pin","participant":"p00000000ffff","mid":"9"}"#,
    );
    write(dir, "unknown-type.json", r#"{"type":"dance","mid":"1"}"#);
}

/// What Chromium offers for the demo page (crates/server/assets/app.js): a
/// published microphone and camera, one video and one audio receive slot,
/// the "events" data channel.
const CHROMIUM_OFFER: &str = "v=0
o=- 4611731400430051336 2 IN IP4 127.0.0.1
s=-
t=0 0
a=group:BUNDLE 0 1 2 3 4
a=extmap-allow-mixed
a=msid-semantic: WMS 3d5f0b1e-5a0e-4f39-9d3f-3f1c6b7f1a2b
m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126
c=IN IP4 0.0.0.0
a=rtcp:9 IN IP4 0.0.0.0
a=candidate:1467250027 1 udp 2122260223 192.168.1.20 50001 typ host generation 0 network-id 1
a=ice-ufrag:8hhY
a=ice-pwd:asd88fgpdd777uzjYhagZg
a=ice-options:trickle
a=fingerprint:sha-256 7B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:0
a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time
a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01
a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid
a=sendonly
a=msid:3d5f0b1e-5a0e-4f39-9d3f-3f1c6b7f1a2b 6a1c2a41-0d8e-4a55-b2a9-70f0e1e7c0a1
a=rtcp-mux
a=rtcp-rsize
a=rtpmap:111 opus/48000/2
a=rtcp-fb:111 transport-cc
a=fmtp:111 minptime=10;useinbandfec=1
a=rtpmap:63 red/48000/2
a=fmtp:63 111/111
a=rtpmap:9 G722/8000
a=rtpmap:0 PCMU/8000
a=rtpmap:8 PCMA/8000
a=rtpmap:13 CN/8000
a=rtpmap:110 telephone-event/48000
a=rtpmap:126 telephone-event/8000
a=ssrc:1001 cname:Yk1X2b3c4d5e6f7g
a=ssrc:1001 msid:3d5f0b1e-5a0e-4f39-9d3f-3f1c6b7f1a2b 6a1c2a41-0d8e-4a55-b2a9-70f0e1e7c0a1
m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 104 105 106 107 108 109 127 125 39 40 45 46 98 99 100 101 112 113 114
c=IN IP4 0.0.0.0
a=rtcp:9 IN IP4 0.0.0.0
a=ice-ufrag:8hhY
a=ice-pwd:asd88fgpdd777uzjYhagZg
a=ice-options:trickle
a=fingerprint:sha-256 7B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:1
a=extmap:14 urn:ietf:params:rtp-hdrext:toffset
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time
a=extmap:13 urn:3gpp:video-orientation
a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01
a=extmap:5 http://www.webrtc.org/experiments/rtp-hdrext/playout-delay
a=extmap:6 http://www.webrtc.org/experiments/rtp-hdrext/video-content-type
a=extmap:7 http://www.webrtc.org/experiments/rtp-hdrext/video-timing
a=extmap:8 http://www.webrtc.org/experiments/rtp-hdrext/color-space
a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid
a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id
a=extmap:11 urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id
a=sendonly
a=msid:3d5f0b1e-5a0e-4f39-9d3f-3f1c6b7f1a2b 0c8b7e6d-2f3a-4b5c-8d9e-1a2b3c4d5e6f
a=rtcp-mux
a=rtcp-rsize
a=rtpmap:96 VP8/90000
a=rtcp-fb:96 goog-remb
a=rtcp-fb:96 transport-cc
a=rtcp-fb:96 ccm fir
a=rtcp-fb:96 nack
a=rtcp-fb:96 nack pli
a=rtpmap:97 rtx/90000
a=fmtp:97 apt=96
a=rtpmap:102 H264/90000
a=rtcp-fb:102 goog-remb
a=rtcp-fb:102 transport-cc
a=rtcp-fb:102 ccm fir
a=rtcp-fb:102 nack
a=rtcp-fb:102 nack pli
a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f
a=rtpmap:103 rtx/90000
a=fmtp:103 apt=102
a=rtpmap:104 H264/90000
a=rtcp-fb:104 goog-remb
a=rtcp-fb:104 transport-cc
a=rtcp-fb:104 ccm fir
a=rtcp-fb:104 nack
a=rtcp-fb:104 nack pli
a=fmtp:104 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f
a=rtpmap:105 rtx/90000
a=fmtp:105 apt=104
a=rtpmap:106 H264/90000
a=rtcp-fb:106 goog-remb
a=rtcp-fb:106 transport-cc
a=rtcp-fb:106 ccm fir
a=rtcp-fb:106 nack
a=rtcp-fb:106 nack pli
a=fmtp:106 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f
a=rtpmap:107 rtx/90000
a=fmtp:107 apt=106
a=rtpmap:108 H264/90000
a=rtcp-fb:108 goog-remb
a=rtcp-fb:108 transport-cc
a=rtcp-fb:108 ccm fir
a=rtcp-fb:108 nack
a=rtcp-fb:108 nack pli
a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42e01f
a=rtpmap:109 rtx/90000
a=fmtp:109 apt=108
a=rtpmap:127 H264/90000
a=rtcp-fb:127 goog-remb
a=rtcp-fb:127 transport-cc
a=rtcp-fb:127 ccm fir
a=rtcp-fb:127 nack
a=rtcp-fb:127 nack pli
a=fmtp:127 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f
a=rtpmap:125 rtx/90000
a=fmtp:125 apt=127
a=rtpmap:39 H264/90000
a=rtcp-fb:39 goog-remb
a=rtcp-fb:39 transport-cc
a=rtcp-fb:39 ccm fir
a=rtcp-fb:39 nack
a=rtcp-fb:39 nack pli
a=fmtp:39 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=4d001f
a=rtpmap:40 rtx/90000
a=fmtp:40 apt=39
a=rtpmap:45 AV1/90000
a=rtcp-fb:45 goog-remb
a=rtcp-fb:45 transport-cc
a=rtcp-fb:45 ccm fir
a=rtcp-fb:45 nack
a=rtcp-fb:45 nack pli
a=fmtp:45 level-idx=5;profile=0;tier=0
a=rtpmap:46 rtx/90000
a=fmtp:46 apt=45
a=rtpmap:98 VP9/90000
a=rtcp-fb:98 goog-remb
a=rtcp-fb:98 transport-cc
a=rtcp-fb:98 ccm fir
a=rtcp-fb:98 nack
a=rtcp-fb:98 nack pli
a=fmtp:98 profile-id=0
a=rtpmap:99 rtx/90000
a=fmtp:99 apt=98
a=rtpmap:100 VP9/90000
a=rtcp-fb:100 goog-remb
a=rtcp-fb:100 transport-cc
a=rtcp-fb:100 ccm fir
a=rtcp-fb:100 nack
a=rtcp-fb:100 nack pli
a=fmtp:100 profile-id=2
a=rtpmap:101 rtx/90000
a=fmtp:101 apt=100
a=rtpmap:112 red/90000
a=rtpmap:113 rtx/90000
a=fmtp:113 apt=112
a=rtpmap:114 ulpfec/90000
a=ssrc-group:FID 2002 2003
a=ssrc:2002 cname:Yk1X2b3c4d5e6f7g
a=ssrc:2002 msid:3d5f0b1e-5a0e-4f39-9d3f-3f1c6b7f1a2b 0c8b7e6d-2f3a-4b5c-8d9e-1a2b3c4d5e6f
a=ssrc:2003 cname:Yk1X2b3c4d5e6f7g
a=ssrc:2003 msid:3d5f0b1e-5a0e-4f39-9d3f-3f1c6b7f1a2b 0c8b7e6d-2f3a-4b5c-8d9e-1a2b3c4d5e6f
m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 106 107
c=IN IP4 0.0.0.0
a=rtcp:9 IN IP4 0.0.0.0
a=ice-ufrag:8hhY
a=ice-pwd:asd88fgpdd777uzjYhagZg
a=ice-options:trickle
a=fingerprint:sha-256 7B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:2
a=extmap:14 urn:ietf:params:rtp-hdrext:toffset
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time
a=extmap:13 urn:3gpp:video-orientation
a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01
a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid
a=recvonly
a=rtcp-mux
a=rtcp-rsize
a=rtpmap:96 VP8/90000
a=rtcp-fb:96 nack
a=rtcp-fb:96 nack pli
a=rtpmap:97 rtx/90000
a=fmtp:97 apt=96
a=rtpmap:102 H264/90000
a=rtcp-fb:102 transport-cc
a=rtcp-fb:102 ccm fir
a=rtcp-fb:102 nack
a=rtcp-fb:102 nack pli
a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f
a=rtpmap:103 rtx/90000
a=fmtp:103 apt=102
a=rtpmap:106 H264/90000
a=rtcp-fb:106 nack
a=rtcp-fb:106 nack pli
a=fmtp:106 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f
a=rtpmap:107 rtx/90000
a=fmtp:107 apt=106
m=audio 9 UDP/TLS/RTP/SAVPF 111 63 0 8
c=IN IP4 0.0.0.0
a=rtcp:9 IN IP4 0.0.0.0
a=ice-ufrag:8hhY
a=ice-pwd:asd88fgpdd777uzjYhagZg
a=ice-options:trickle
a=fingerprint:sha-256 7B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:3
a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level
a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid
a=recvonly
a=rtcp-mux
a=rtcp-rsize
a=rtpmap:111 opus/48000/2
a=rtcp-fb:111 transport-cc
a=fmtp:111 minptime=10;useinbandfec=1
a=rtpmap:63 red/48000/2
a=fmtp:63 111/111
a=rtpmap:0 PCMU/8000
a=rtpmap:8 PCMA/8000
m=application 9 UDP/DTLS/SCTP webrtc-datachannel
c=IN IP4 0.0.0.0
a=ice-ufrag:8hhY
a=ice-pwd:asd88fgpdd777uzjYhagZg
a=ice-options:trickle
a=fingerprint:sha-256 7B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:4
a=sctp-port:5000
a=max-message-size:262144
";
