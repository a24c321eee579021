//! What the server's integration tests share: the real `corelay` binary
//! started by corelay-testkit (free loopback ports, killed when dropped),
//! and helpers to join calls and check what flowed.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelay_client::{JoinSpec, ParticipantHandle, Snapshot};
pub use corelay_testkit::Server;
use str0m::media::{Direction, MediaKind};
use str0m::{Candidate, Rtc};

/// Starts this package's `corelay` with `shards` shards and `extra` arguments.
pub fn start_server(shards: usize, extra: &[&str]) -> Server {
    Server::start(env!("CARGO_BIN_EXE_corelay"), shards, extra)
}

pub fn join(server: &Server, room: &str, name: &str) -> ParticipantHandle {
    corelay_client::join(JoinSpec::new(server.base(), room, name)).expect("join")
}

pub fn join_with(
    server: &Server,
    room: &str,
    name: &str,
    f: impl FnOnce(&mut JoinSpec),
) -> ParticipantHandle {
    let mut spec = JoinSpec::new(server.base(), room, name);
    f(&mut spec);
    corelay_client::join(spec).expect("join")
}

/// Video slots that have received at least `frames` frames, with their source names.
pub fn video_sources(s: &Snapshot, frames: u64) -> Vec<String> {
    let mut v: Vec<String> = s
        .slots
        .values()
        .filter(|st| st.kind == "video" && st.frames >= frames)
        .filter_map(|st| st.last_source.clone())
        .collect();
    v.sort();
    v
}

pub fn audio_sources(s: &Snapshot, frames: u64) -> Vec<String> {
    let mut v: Vec<String> = s
        .slots
        .values()
        .filter(|st| st.kind == "audio" && st.frames >= frames)
        .filter_map(|st| st.last_source.clone())
        .collect();
    v.sort();
    v
}

/// Every slot's stream is intact: no corrupt payload, nothing out of order,
/// no timestamp going back, abs-capture-time carried unchanged on video.
pub fn assert_clean(who: &str, s: &Snapshot) {
    for (mid, st) in &s.slots {
        assert_eq!(st.corrupt, 0, "{who} slot {mid}: corrupt payloads: {st:?}");
        assert_eq!(st.out_of_order, 0, "{who} slot {mid}: out of order: {st:?}");
        assert_eq!(
            st.ts_backwards, 0,
            "{who} slot {mid}: timestamp went back: {st:?}"
        );
        if st.kind == "video" && st.packets > 0 {
            assert_eq!(
                st.abs_capture_mismatch, 0,
                "{who} slot {mid}: abs-capture-time changed"
            );
            assert_eq!(
                st.abs_capture_missing, 0,
                "{who} slot {mid}: abs-capture-time missing"
            );
        }
    }
}

pub fn names(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// A str0m client's offer (H.264 + Opus publisher with one video slot and a
/// data channel) whose ICE nobody will ever complete: its candidate is
/// 127.0.0.1:9 and no client answers there.
pub fn unconnectable_offer() -> String {
    let mut rtc = Rtc::builder()
        .clear_codecs()
        .enable_opus(true, false)
        .enable_h264(true)
        .build(Instant::now());
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    rtc.add_local_candidate(Candidate::host(addr, "udp").unwrap());
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
    api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
    api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    api.add_channel("events".into());
    let (offer, _pending) = api.apply().unwrap();
    offer.to_sdp_string()
}

/// A corelay-client participant's offer, publishing camera and microphone
/// and/or with one receive slot of each, that nobody will connect (its
/// candidate is 127.0.0.1:9).
pub fn client_offer(publish: bool, subscribe: bool) -> String {
    let mut cfg = corelay_client::ParticipantConfig::new("x");
    cfg.publish_video = publish;
    cfg.publish_audio = publish;
    cfg.video_slots = usize::from(subscribe);
    cfg.audio_slots = usize::from(subscribe);
    let local = "127.0.0.1:9".parse().unwrap();
    corelay_client::Participant::new(cfg, local, Instant::now())
        .unwrap()
        .1
}

/// Frames received over every slot so far.
pub fn frames(p: &corelay_client::ParticipantHandle) -> u64 {
    p.snapshot().slots.values().map(|s| s.frames).sum()
}

/// Waits for `p`'s media to grow by `more` frames; true if it did.
pub fn keeps_flowing(p: &corelay_client::ParticipantHandle, more: u64, within: Duration) -> bool {
    let start = frames(p);
    p.wait_until(within, |s| {
        s.slots.values().map(|x| x.frames).sum::<u64>() >= start + more
    })
    .0
}

/// Two participants in `room`, each receiving the other's video.
pub fn two_in_a_call(
    server: &Server,
    room: &str,
) -> (
    corelay_client::ParticipantHandle,
    corelay_client::ParticipantHandle,
) {
    let a = join(server, room, "a");
    let b = join(server, room, "b");
    let (ok, _) = a.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 20) == names(&["b"])
    });
    assert!(ok, "a does not receive b");
    (a, b)
}

/// The server is healthy and still forwards to both.
pub fn both_keep_flowing(
    server: &Server,
    a: &corelay_client::ParticipantHandle,
    b: &corelay_client::ParticipantHandle,
) {
    assert_eq!(server.get_json("/healthz")["status"], "ok");
    assert!(
        keeps_flowing(a, 60, Duration::from_secs(10)),
        "a's media stopped"
    );
    assert!(
        keeps_flowing(b, 60, Duration::from_secs(10)),
        "b's media stopped"
    );
}
