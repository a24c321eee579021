//! The engine under simulation: what subscribers receive (packets per slot
//! with their publisher's name from the payload stamp, sequence continuity,
//! keyframes, data-channel events) and what publishers are asked for, in
//! virtual time. Owns these scenarios only; must not reach into engine
//! internals beyond the public counters a test names explicitly.

use std::time::Duration;

use corelay_sim::corelay_client::{Kind, ParticipantConfig};
use corelay_sim::corelay_core::RtcSettings;
use corelay_sim::{C, LinkParams, RxPacket, Sim};

const MS: Duration = Duration::from_millis(1);

fn sim(seed: u64, shards: usize) -> Sim {
    Sim::new(seed, shards, RtcSettings::default())
}

/// Publishes video and audio (silent unless told), no slots.
fn publisher(name: &str) -> ParticipantConfig {
    let mut c = ParticipantConfig::new(name);
    c.video_slots = 0;
    c.audio_slots = 0;
    c.speaking = false;
    c
}

/// Publishes nothing, `video` video slots and one audio slot.
fn viewer(name: &str, video: usize) -> ParticipantConfig {
    let mut c = ParticipantConfig::new(name);
    c.publish_video = false;
    c.publish_audio = false;
    c.video_slots = video;
    c.audio_slots = 1;
    c
}

fn video_packets(s: &Sim, c: C) -> Vec<&RxPacket> {
    s.packets(c).iter().filter(|p| p.kind == Kind::Video).collect()
}

/// The mids of the client's video slots.
fn video_slots(s: &Sim, c: C) -> Vec<String> {
    s.snapshot(c)
        .slots
        .iter()
        .filter(|(_, st)| st.kind == "video")
        .map(|(m, _)| m.clone())
        .collect()
}

/// Sequence numbers in `pkts` (one slot) go up by exactly one.
fn assert_continuous(pkts: &[&RxPacket]) {
    for w in pkts.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq + 1,
            "slot {}: seq jumped from {} ({:?}) to {} ({:?})",
            w[0].slot,
            w[0].seq,
            w[0].source,
            w[1].seq,
            w[1].source
        );
    }
}

fn connected_all(s: &Sim, cs: &[C]) -> bool {
    cs.iter().all(|c| s.snapshot(*c).connected)
}

/// 1. Two participants, each publishing and with one slot of each kind,
/// receive each other: intact, in order, starting with a keyframe, with
/// the latency the network adds.
#[test]
fn sim_two_party_exchange() {
    let mut s = sim(1, 1);
    let mut a = ParticipantConfig::new("alice");
    a.video_slots = 1;
    a.audio_slots = 1;
    let mut b = a.clone();
    b.name = "bob".into();
    let a = s.join("r", a, 0);
    let b = s.join("r", b, 0);
    s.run_for(Duration::from_secs(5));
    for (me, other) in [(a, "bob"), (b, "alice")] {
        let snap = s.snapshot(me);
        assert!(snap.connected && snap.channel_open, "{snap:?}");
        let v = video_packets(&s, me);
        assert!(v.len() > 200, "{} video packets", v.len());
        assert!(v.iter().all(|p| p.source.as_deref() == Some(other)));
        assert!(v[0].keyframe, "the slot must start with a keyframe");
        assert_continuous(&v);
        assert!(snap.frames_from(other) > 2 * 120, "{snap:?}");
        assert_eq!(snap.corrupt(), 0);
        for st in snap.slots.values() {
            assert_eq!(st.abs_capture_mismatch, 0);
            assert_eq!(st.abs_capture_missing, 0);
            // Two 5 ms hops; the SFU adds no delay in virtual time. The
            // payload's capture stamp and abs-capture-time are virtual.
            assert!(
                st.latency_us.iter().all(|&l| (9_000..20_000).contains(&l)),
                "{:?}",
                st.latency_us
            );
        }
        let welcome = s.events(me, "welcome");
        assert_eq!(welcome[0]["participant"], s.id(me));
        let roster = s.events(me, "roster");
        let last = roster.last().expect("roster");
        assert_eq!(last["participants"].as_array().map(Vec::len), Some(2));
        assert!(!snap.ice_rtt_us.is_empty());
        assert!(snap.ice_rtt_us.iter().all(|&r| (9_000..20_000).contains(&r)));
    }
}
