//! Helpers both simulation test files use: participants' shapes and what
//! a client received.

use corelay_sim::corelay_client::{Kind, ParticipantConfig, VideoSource};
use corelay_sim::{C, RxPacket, Sim};

/// Publishes video and audio (silent unless told), no slots.
pub fn publisher(name: &str) -> ParticipantConfig {
    let mut c = ParticipantConfig::new(name);
    c.video_slots = 0;
    c.audio_slots = 0;
    c.speaking = false;
    c
}

/// Publishes nothing, `video` video slots and one audio slot.
pub fn viewer(name: &str, video: usize) -> ParticipantConfig {
    let mut c = ParticipantConfig::new(name);
    c.publish_video = false;
    c.publish_audio = false;
    c.video_slots = video;
    c.audio_slots = 1;
    c
}

/// A publisher with three synthetic simulcast layers (q 150, h 400, f 1 500
/// kbit/s; the stamps say 1, 2, 3), silent audio, no slots.
pub fn simulcast_publisher(name: &str) -> ParticipantConfig {
    let mut c = publisher(name);
    c.simulcast = [150_000, 400_000, 1_500_000]
        .into_iter()
        .map(|bitrate_bps| VideoSource::Synthetic {
            bitrate_bps,
            fps: 30,
            keyframe_interval: 90,
        })
        .collect();
    c
}

pub fn video_packets(s: &Sim, c: C) -> Vec<&RxPacket> {
    s.packets(c)
        .iter()
        .filter(|p| p.kind == Kind::Video)
        .collect()
}

/// The mids of the client's video slots.
pub fn video_slots(s: &Sim, c: C) -> Vec<String> {
    s.snapshot(c)
        .slots
        .iter()
        .filter(|(_, st)| st.kind == "video")
        .map(|(m, _)| m.clone())
        .collect()
}

/// `c` tells the server it shows its slot `slot` at `w` x `h`.
pub fn set_view(s: &mut Sim, c: C, slot: &str, w: u32, h: u32) {
    let msg = format!(r#"{{"type":"view","mid":"{slot}","width":{w},"height":{h}}}"#);
    s.participant(c).send_event(&msg);
}

/// The layers `p` was last told to send (its "layers" event).
pub fn active_layers(s: &Sim, p: C) -> Option<serde_json::Value> {
    s.events(p, "layers").last().map(|e| e["active"].clone())
}
