//! Simulcast and downlink-limit figures: which subscribers receive through
//! the emulated bottleneck, per-stream counters at the start of the
//! measurement window, and the `simulcast` object of summary.json.

use std::collections::BTreeMap;

use corelay_client::{FREEZE_NS, SlotStats, Snapshot};
use serde_json::{Value, json};

/// Whether participant `tag` (join order, 0-based) is one of the limited
/// subscribers: a share `share` of them, spread evenly and
/// deterministically (tag t is limited when ⌊(t+1)·share⌋ > ⌊t·share⌋:
/// with 0.5 every second one, with 0.25 every fourth).
pub fn is_limited(tag: u64, share: f64) -> bool {
    if share <= 0.0 {
        return false;
    }
    if share >= 1.0 {
        return true;
    }
    ((tag + 1) as f64 * share).floor() > (tag as f64 * share).floor()
}

/// A video slot's counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VideoMark {
    /// Complete frames.
    pub frames: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Complete frames per layer stamp value (0 none, 1..3 q, h, f).
    pub frames_by_layer: [u64; 4],
    /// Layer switches.
    pub switches: u64,
    /// Freezes (gaps over 500 ms).
    pub freezes: u64,
}

impl VideoMark {
    fn of(st: &SlotStats) -> VideoMark {
        VideoMark {
            frames: st.frames,
            bytes: st.bytes,
            frames_by_layer: st.frames_by_layer,
            switches: st.layer_switches,
            freezes: st.freezes,
        }
    }

    fn minus(&self, b: &VideoMark) -> VideoMark {
        let mut l = [0u64; 4];
        for (i, v) in l.iter_mut().enumerate() {
            *v = self.frames_by_layer[i].saturating_sub(b.frames_by_layer[i]);
        }
        VideoMark {
            frames: self.frames.saturating_sub(b.frames),
            bytes: self.bytes.saturating_sub(b.bytes),
            frames_by_layer: l,
            switches: self.switches.saturating_sub(b.switches),
            freezes: self.freezes.saturating_sub(b.freezes),
        }
    }
}

/// Every video slot's counters in `snap`, by slot mid.
pub fn marks(snap: &Snapshot) -> BTreeMap<String, VideoMark> {
    snap.slots
        .iter()
        .filter(|(_, s)| s.kind == "video")
        .map(|(k, s)| (k.clone(), VideoMark::of(s)))
        .collect()
}

/// One received video stream over the measurement window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamWindow {
    /// Its subscriber receives through the bottleneck.
    pub limited: bool,
    /// What happened in the window.
    pub delta: VideoMark,
}

/// The received video streams of one subscriber over the window: the final
/// counters less those at the window's start (`start`: None when it joined
/// after the window began, so everything counts). A stream is a video slot
/// that received any frame. A freeze still going on at `end_ns` (no frame
/// for more than 500 ms before it) counts too.
pub fn windows(
    limited: bool,
    start: Option<&BTreeMap<String, VideoMark>>,
    end: &Snapshot,
    end_ns: u64,
) -> Vec<StreamWindow> {
    let mut out = Vec::new();
    for (k, st) in &end.slots {
        if st.kind != "video" || st.frames == 0 {
            continue;
        }
        let base = start.and_then(|m| m.get(k)).copied().unwrap_or_default();
        let mut delta = VideoMark::of(st).minus(&base);
        if st
            .last_frame_ns
            .is_some_and(|l| end_ns.saturating_sub(l) > FREEZE_NS)
        {
            delta.freezes += 1;
        }
        out.push(StreamWindow { limited, delta });
    }
    out
}

fn r3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn group(streams: &[&StreamWindow], secs: f64) -> Value {
    let n = streams.len();
    let secs = secs.max(1e-9);
    let mut bytes = 0u64;
    let mut frames = 0u64;
    let mut by_layer = [0u64; 4];
    let mut freezes = 0u64;
    let mut switches = 0u64;
    for s in streams {
        bytes += s.delta.bytes;
        frames += s.delta.frames;
        freezes += s.delta.freezes;
        switches += s.delta.switches;
        for (a, b) in by_layer.iter_mut().zip(s.delta.frames_by_layer) {
            *a += b;
        }
    }
    let per_stream = |v: f64| if n > 0 { r3(v / n as f64) } else { 0.0 };
    let layered: u64 = by_layer.iter().sum();
    let share = |i: usize| {
        if layered > 0 {
            r3(by_layer[i] as f64 / layered as f64)
        } else {
            0.0
        }
    };
    let mut layer_share = json!({"q": share(1), "h": share(2), "f": share(3)});
    if by_layer[0] > 0 {
        layer_share["none"] = json!(share(0));
    }
    json!({
        "streams": n,
        "video_kbps": per_stream(bytes as f64 * 8.0 / secs / 1000.0),
        "fps": per_stream(frames as f64 / secs),
        "freezes": freezes,
        "layer_share": layer_share,
        "switches": switches,
    })
}

/// The `simulcast` object of summary.json: per received video stream,
/// averaged over the window of `secs` seconds, for limited and unlimited
/// subscribers separately.
pub fn summarize(streams: &[StreamWindow], secs: f64) -> Value {
    let (lim, unlim): (Vec<&StreamWindow>, Vec<&StreamWindow>) =
        streams.iter().partition(|s| s.limited);
    json!({"limited": group(&lim, secs), "unlimited": group(&unlim, secs)})
}

/// The text report's lines for [`summarize`]'s value (plus the settings).
pub fn table(v: &Value) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "simulcast {}, downlink limit {} on {} of subscribers:",
        if v["enabled"].as_bool() == Some(true) {
            "on"
        } else {
            "off"
        },
        v["downlink_limit_bps"]
            .as_u64()
            .map(|b| format!("{} kbit/s", b / 1000))
            .unwrap_or_else(|| "none".into()),
        v["limited_share"]
    );
    for g in ["limited", "unlimited"] {
        let x = &v[g];
        if x["streams"].as_u64().unwrap_or(0) == 0 {
            let _ = writeln!(t, "  {g:9}: no streams");
            continue;
        }
        let ls = &x["layer_share"];
        let pct = |k: &str| ls[k].as_f64().unwrap_or(0.0) * 100.0;
        let mut layers = format!("q {:.0}% h {:.0}% f {:.0}%", pct("q"), pct("h"), pct("f"));
        if ls.get("none").is_some() {
            let _ = write!(layers, " no simulcast {:.0}%", pct("none"));
        }
        let _ = writeln!(
            t,
            "  {g:9}: {} streams, {:.0} kbit/s and {:.1} fps per stream, layers {layers}, {} switches, {} freezes (>500 ms)",
            x["streams"],
            x["video_kbps"].as_f64().unwrap_or(0.0),
            x["fps"].as_f64().unwrap_or(0.0),
            x["switches"],
            x["freezes"],
        );
    }
    if let Some(d) = v.get("downlink").filter(|d| !d.is_null()) {
        let _ = writeln!(
            t,
            "  bottleneck: {} datagrams delayed, {} dropped, longest queueing {:.1} ms",
            d["queued"],
            d["dropped"],
            d["max_delay_us"].as_f64().unwrap_or(0.0) / 1000.0
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_share_is_spread_evenly() {
        let pick = |share: f64| {
            (0..12u64)
                .filter(|&t| is_limited(t, share))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(0.5), vec![1, 3, 5, 7, 9, 11]);
        assert_eq!(pick(0.25), vec![3, 7, 11]);
        assert_eq!(pick(0.0), Vec::<u64>::new());
        assert_eq!(pick(1.0).len(), 12);
        assert_eq!((0..1000).filter(|&t| is_limited(t, 0.3)).count(), 300);
    }

    fn slot(frames: u64, bytes: u64, by_layer: [u64; 4], switches: u64, freezes: u64) -> SlotStats {
        SlotStats {
            kind: "video".into(),
            frames,
            bytes,
            frames_by_layer: by_layer,
            layer_switches: switches,
            freezes,
            last_frame_ns: Some(10_000_000_000),
            ..Default::default()
        }
    }

    #[test]
    fn window_deltas_and_groups() {
        // A limited subscriber with two streams: at the window start...
        let mut start = Snapshot::default();
        start
            .slots
            .insert("1".into(), slot(100, 50_000, [0, 0, 100, 0], 0, 0));
        start
            .slots
            .insert("2".into(), slot(100, 50_000, [0, 0, 100, 0], 0, 1));
        // ...and 10 s later (end at 10.2 s: last frames 200 ms ago).
        let mut end = Snapshot::default();
        end.slots
            .insert("1".into(), slot(400, 550_000, [0, 200, 200, 0], 1, 0));
        end.slots
            .insert("2".into(), slot(300, 300_000, [0, 100, 200, 0], 2, 3));
        let mut audio = slot(500, 1, [0; 4], 0, 0);
        audio.kind = "audio".into();
        end.slots.insert("3".into(), audio);
        end.slots.insert("4".into(), slot(0, 0, [0; 4], 0, 0)); // never filled
        let m = marks(&start);
        let mut w = windows(true, Some(&m), &end, 10_200_000_000);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].delta.frames_by_layer, [0, 200, 100, 0]);
        assert_eq!(w[1].delta.freezes, 2);
        // An unlimited one that joined after the window began, frozen at
        // the end (last frame 1 s before it).
        let mut late = Snapshot::default();
        late.slots
            .insert("1".into(), slot(250, 1_000_000, [0, 0, 0, 250], 0, 0));
        w.extend(windows(false, None, &late, 11_000_000_000));
        assert_eq!(w[2].delta.freezes, 1);

        let v = summarize(&w, 10.0);
        let l = &v["limited"];
        assert_eq!(l["streams"], 2);
        // (500000 + 250000) bytes * 8 / 10 s / 2 streams = 300 kbit/s.
        assert_eq!(l["video_kbps"], 300.0);
        assert_eq!(l["fps"], 25.0);
        assert_eq!(l["freezes"], 2);
        assert_eq!(l["switches"], 3);
        assert_eq!(l["layer_share"]["q"], 0.6);
        assert_eq!(l["layer_share"]["h"], 0.4);
        assert_eq!(l["layer_share"]["f"], 0.0);
        assert!(l["layer_share"].get("none").is_none());
        let u = &v["unlimited"];
        assert_eq!(u["streams"], 1);
        assert_eq!(u["video_kbps"], 800.0);
        assert_eq!(u["layer_share"]["f"], 1.0);
        assert_eq!(u["freezes"], 1);
        // An empty group is zeros, not NaN.
        let v = summarize(&w[2..], 10.0);
        assert_eq!(v["limited"]["streams"], 0);
        assert_eq!(v["limited"]["fps"], 0.0);
        assert!(table(&v).contains("limited  : no streams"));
    }
}
