//! Measurement: a per-driver-thread observer that records into local
//! HdrHistograms and hands one interval report per second to the collector
//! (no lock, no sharing on the packet path), and the collector's merge.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::Sender;
use std::time::Instant;

use corelay_client::{Kind, Observer};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest value a histogram records (µs): 60 s. Larger values are clamped.
pub const HIST_MAX_US: u64 = 60_000_000;

/// A new µs histogram (3 significant digits, 1 µs .. 60 s).
pub fn new_hist() -> Histogram<u64> {
    #[allow(clippy::expect_used)]
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("constant histogram bounds are valid")
}

/// Record a value, clamped into range.
pub fn rec(h: &mut Histogram<u64>, v: u64) {
    let _ = h.record(v.clamp(1, HIST_MAX_US));
}

/// Measurements of one thread over one second (or merged: many threads, many seconds).
#[derive(Clone)]
pub struct Interval {
    /// Seconds since the run started (the interval [s, s+1)).
    pub second: u64,
    /// Video frame end-to-end latency, µs.
    pub video_lat: Histogram<u64>,
    /// The same, of publisher and subscriber on one node of a cluster
    /// (None: not a cluster run, or no such frame yet).
    pub video_lat_same: Option<Histogram<u64>>,
    /// The same, of publisher and subscriber on different nodes.
    pub video_lat_cross: Option<Histogram<u64>>,
    /// The same, of pairs with an end relayed through TURN (None: no
    /// `--turn` or `--network-change-at` run, or no such frame yet).
    pub video_lat_relayed: Option<Histogram<u64>>,
    /// The same, of pairs with neither end relayed.
    pub video_lat_direct: Option<Histogram<u64>>,
    /// Audio packet end-to-end latency, µs.
    pub audio_lat: Histogram<u64>,
    /// ICE round-trip time, µs.
    pub ice_rtt: Histogram<u64>,
    /// Packets received (video, audio).
    pub rx_video_packets: u64,
    /// Audio packets received.
    pub rx_audio_packets: u64,
    /// Payload bytes received.
    pub rx_bytes: u64,
    /// Payloads that failed verification.
    pub corrupt: u64,
    /// Complete video frames received.
    pub video_frames: u64,
    /// Audio frames received.
    pub audio_frames: u64,
    /// RTP packets sent (video, audio).
    pub tx_video_packets: u64,
    /// Audio packets sent.
    pub tx_audio_packets: u64,
    /// Times a publisher's schedule was > 5 ms late.
    pub slips: u64,
    /// Worst lateness, µs.
    pub max_slip_us: u64,
    /// (participant tag, CLOCK_MONOTONIC ns) of first media received.
    pub first_media: Vec<(u64, u64)>,
    /// (participant tag, CLOCK_MONOTONIC ns) of ICE + DTLS connected.
    pub connected: Vec<(u64, u64)>,
}

impl Interval {
    /// Empty interval for `second`.
    pub fn new(second: u64) -> Self {
        Interval {
            second,
            video_lat: new_hist(),
            video_lat_same: None,
            video_lat_cross: None,
            video_lat_relayed: None,
            video_lat_direct: None,
            audio_lat: new_hist(),
            ice_rtt: new_hist(),
            rx_video_packets: 0,
            rx_audio_packets: 0,
            rx_bytes: 0,
            corrupt: 0,
            video_frames: 0,
            audio_frames: 0,
            tx_video_packets: 0,
            tx_audio_packets: 0,
            slips: 0,
            max_slip_us: 0,
            first_media: Vec::new(),
            connected: Vec::new(),
        }
    }

    /// Add `o` into `self`.
    pub fn merge(&mut self, o: &Interval) {
        let _ = self.video_lat.add(&o.video_lat);
        for (mine, theirs) in [
            (&mut self.video_lat_same, &o.video_lat_same),
            (&mut self.video_lat_cross, &o.video_lat_cross),
            (&mut self.video_lat_relayed, &o.video_lat_relayed),
            (&mut self.video_lat_direct, &o.video_lat_direct),
        ] {
            if let Some(h) = theirs {
                let _ = mine.get_or_insert_with(new_hist).add(h);
            }
        }
        let _ = self.audio_lat.add(&o.audio_lat);
        let _ = self.ice_rtt.add(&o.ice_rtt);
        self.rx_video_packets += o.rx_video_packets;
        self.rx_audio_packets += o.rx_audio_packets;
        self.rx_bytes += o.rx_bytes;
        self.corrupt += o.corrupt;
        self.video_frames += o.video_frames;
        self.audio_frames += o.audio_frames;
        self.tx_video_packets += o.tx_video_packets;
        self.tx_audio_packets += o.tx_audio_packets;
        self.slips += o.slips;
        self.max_slip_us = self.max_slip_us.max(o.max_slip_us);
        self.first_media.extend_from_slice(&o.first_media);
        self.connected.extend_from_slice(&o.connected);
    }

    fn reset(&mut self, second: u64) {
        self.second = second;
        self.video_lat.reset();
        for h in [
            &mut self.video_lat_same,
            &mut self.video_lat_cross,
            &mut self.video_lat_relayed,
            &mut self.video_lat_direct,
        ]
        .into_iter()
        .flatten()
        {
            h.reset();
        }
        self.audio_lat.reset();
        self.ice_rtt.reset();
        self.rx_video_packets = 0;
        self.rx_audio_packets = 0;
        self.rx_bytes = 0;
        self.corrupt = 0;
        self.video_frames = 0;
        self.audio_frames = 0;
        self.tx_video_packets = 0;
        self.tx_audio_packets = 0;
        self.slips = 0;
        self.max_slip_us = 0;
        self.first_media.clear();
        self.connected.clear();
    }
}

/// Which node of a cluster each participant is on, for splitting latency
/// into same-node and cross-node pairs: publishers are known by name (the
/// name in their payloads), every participant by tag. Written by the joiner
/// that placed a participant, read by the driver threads per frame.
pub struct NodeMap {
    /// Participant name → tag (fixed by the plan).
    by_name: HashMap<String, u64>,
    /// Tag → node index + 1; 0 while unknown (not joined yet, or redirected
    /// to a node the bench was not given).
    node: Vec<AtomicU8>,
}

impl NodeMap {
    /// For these (tag, name) pairs (tags are the plan's, 0..n).
    pub fn new<'a>(members: impl IntoIterator<Item = (u64, &'a str)>) -> Self {
        let by_name: HashMap<String, u64> = members
            .into_iter()
            .map(|(t, n)| (n.to_string(), t))
            .collect();
        let len = by_name.values().map(|&t| t as usize + 1).max().unwrap_or(0);
        NodeMap {
            by_name,
            node: (0..len).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// Participant `tag` is on node `node` (None: unknown).
    pub fn set(&self, tag: u64, node: Option<usize>) {
        if let Some(slot) = self.node.get(tag as usize) {
            let v = node.map_or(0, |n| u8::try_from(n + 1).unwrap_or(0));
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// The node of participant `tag`, if known.
    pub fn of_tag(&self, tag: u64) -> Option<usize> {
        match self.node.get(tag as usize)?.load(Ordering::Relaxed) {
            0 => None,
            v => Some(usize::from(v) - 1),
        }
    }

    /// The node of the participant named `name`, if known.
    pub fn of_name(&self, name: &str) -> Option<usize> {
        self.of_tag(*self.by_name.get(name)?)
    }
}

/// A report from one driver thread.
pub struct Report {
    /// The thread's interval.
    pub interval: Interval,
}

/// The observer each driver thread owns.
///
/// Lock-free: it records into its own histograms and sends one report per
/// second through a channel.
pub struct ThreadObserver {
    start: Instant,
    cur: Interval,
    tx: Sender<Report>,
    /// A cluster run: who is on which node.
    nodes: Option<Arc<NodeMap>>,
    /// A reach run: who goes through TURN.
    reach: Option<Arc<crate::reach::ReachMap>>,
}

impl ThreadObserver {
    /// Observer for driver `thread`; seconds count from `start`.
    pub fn new(start: Instant, tx: Sender<Report>) -> Self {
        ThreadObserver {
            start,
            cur: Interval::new(0),
            tx,
            nodes: None,
            reach: None,
        }
    }

    /// Splits video latency by whether a pair is relayed through TURN.
    pub fn with_reach(mut self, reach: Option<Arc<crate::reach::ReachMap>>) -> Self {
        self.reach = reach;
        self
    }

    /// Splits video latency by whether publisher and subscriber share a
    /// node (`nodes` says which node each is on).
    pub fn with_nodes(mut self, nodes: Option<Arc<NodeMap>>) -> Self {
        self.nodes = nodes;
        self
    }
}

impl Observer for ThreadObserver {
    fn frame(&mut self, kind: Kind, latency_us: u64) {
        match kind {
            Kind::Video => {
                self.cur.video_frames += 1;
                rec(&mut self.cur.video_lat, latency_us);
            }
            Kind::Audio => {
                self.cur.audio_frames += 1;
                rec(&mut self.cur.audio_lat, latency_us);
            }
        }
    }

    fn frame_from(&mut self, tag: u64, source: &str, kind: Kind, latency_us: u64) {
        if kind != Kind::Video {
            return;
        }
        if let Some(reach) = &self.reach {
            let h = if reach.pair_relayed(tag, source) {
                &mut self.cur.video_lat_relayed
            } else {
                &mut self.cur.video_lat_direct
            };
            rec(h.get_or_insert_with(new_hist), latency_us);
        }
        let Some(nodes) = &self.nodes else { return };
        let (Some(sub), Some(publ)) = (nodes.of_tag(tag), nodes.of_name(source)) else {
            return;
        };
        let h = if sub == publ {
            &mut self.cur.video_lat_same
        } else {
            &mut self.cur.video_lat_cross
        };
        rec(h.get_or_insert_with(new_hist), latency_us);
    }

    fn packet(&mut self, kind: Kind, bytes: usize, ok: bool) {
        match kind {
            Kind::Video => self.cur.rx_video_packets += 1,
            Kind::Audio => self.cur.rx_audio_packets += 1,
        }
        self.cur.rx_bytes += bytes as u64;
        if !ok {
            self.cur.corrupt += 1;
        }
    }

    fn ice_rtt(&mut self, rtt_us: u64) {
        rec(&mut self.cur.ice_rtt, rtt_us);
    }

    fn send_slip(&mut self, late_us: u64) {
        self.cur.slips += 1;
        self.cur.max_slip_us = self.cur.max_slip_us.max(late_us);
    }

    fn sent(&mut self, kind: Kind, packets: u64) {
        match kind {
            Kind::Video => self.cur.tx_video_packets += packets,
            Kind::Audio => self.cur.tx_audio_packets += packets,
        }
    }

    fn first_media(&mut self, tag: u64, mono_ns: u64) {
        self.cur.first_media.push((tag, mono_ns));
    }

    fn connected(&mut self, tag: u64, mono_ns: u64) {
        self.cur.connected.push((tag, mono_ns));
    }

    fn tick(&mut self, now: Instant) {
        let second = now.saturating_duration_since(self.start).as_secs();
        if second > self.cur.second {
            let mut done = Interval::new(second);
            std::mem::swap(&mut done, &mut self.cur);
            let _ = self.tx.send(Report { interval: done });
            self.cur.reset(second);
        }
    }
}

/// Percentile summary of a histogram (µs unless named otherwise).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: u64,
    /// P50.
    pub p50: u64,
    /// P90.
    pub p90: u64,
    /// P99.
    pub p99: u64,
    /// P99.9.
    pub p999: u64,
    /// P99.99.
    pub p9999: u64,
    /// Maximum.
    pub max: u64,
}

impl Percentiles {
    /// Summarise `h`.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles {
                count: 0,
                mean: 0.0,
                min: 0,
                p50: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                p9999: 0,
                max: 0,
            };
        }
        Percentiles {
            count: h.len(),
            mean: (h.mean() * 10.0).round() / 10.0,
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        }
    }
}

/// Merged per-second intervals from all threads.
#[derive(Default)]
pub struct Series {
    /// Second → merged interval.
    pub seconds: BTreeMap<u64, Interval>,
}

impl Series {
    /// Add one thread's report.
    pub fn add(&mut self, r: &Report) {
        let s = r.interval.second;
        self.seconds
            .entry(s)
            .or_insert_with(|| Interval::new(s))
            .merge(&r.interval);
    }

    /// Everything in seconds [from, to).
    pub fn window(&self, from: u64, to: u64) -> Interval {
        let mut out = Interval::new(from);
        for (_, i) in self.seconds.range(from..to) {
            out.merge(i);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn observer_reports_once_per_second() {
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        let mut o = ThreadObserver::new(start, tx);
        o.frame(Kind::Video, 1500);
        o.frame(Kind::Video, 2500);
        o.ice_rtt(300);
        o.tick(start + Duration::from_millis(500));
        assert!(rx.try_recv().is_err());
        o.tick(start + Duration::from_millis(1100));
        let r = rx.try_recv().unwrap();
        assert_eq!(r.interval.second, 0);
        assert_eq!(r.interval.video_frames, 2);
        assert_eq!(r.interval.video_lat.len(), 2);
        o.frame(Kind::Audio, 100);
        o.tick(start + Duration::from_millis(2100));
        let r2 = rx.try_recv().unwrap();
        assert_eq!(r2.interval.second, 1);
        assert_eq!(r2.interval.audio_frames, 1);
        assert_eq!(r2.interval.video_frames, 0);

        let mut s = Series::default();
        s.add(&r);
        s.add(&r2);
        let w = s.window(0, 2);
        let p = Percentiles::of(&w.video_lat);
        assert_eq!(p.count, 2);
        assert!(p.p50 >= 1499 && p.p50 <= 1501, "{p:?}");
        assert!(p.max >= 2499 && p.max <= 2502);
        assert_eq!(Percentiles::of(&w.ice_rtt).count, 1);
        assert_eq!(Percentiles::of(&new_hist()).count, 0);
        assert!(w.video_lat_same.is_none() && w.video_lat_cross.is_none());
    }

    #[test]
    fn a_cluster_run_splits_latency_by_node() {
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        let nodes = Arc::new(NodeMap::new([(0, "r0-p0"), (1, "r0-p1"), (2, "r0-p2")]));
        nodes.set(0, Some(0));
        nodes.set(1, Some(1));
        nodes.set(2, Some(0));
        let mut o = ThreadObserver::new(start, tx).with_nodes(Some(nodes.clone()));
        // p0 receives p2 (both on node 0) and p1 (node 1).
        o.frame_from(0, "r0-p2", Kind::Video, 1000);
        o.frame_from(0, "r0-p1", Kind::Video, 3000);
        o.frame_from(0, "r0-p1", Kind::Video, 3100);
        // Audio, an unknown publisher, a subscriber not placed: not counted.
        o.frame_from(0, "r0-p1", Kind::Audio, 50);
        o.frame_from(0, "r9-p9", Kind::Video, 50);
        nodes.set(2, None);
        o.frame_from(2, "r0-p0", Kind::Video, 50);
        o.tick(start + Duration::from_millis(1100));
        let r = rx.try_recv().unwrap();
        let mut s = Series::default();
        s.add(&r);
        let w = s.window(0, 1);
        let same = w.video_lat_same.as_ref().unwrap();
        let cross = w.video_lat_cross.as_ref().unwrap();
        assert_eq!((same.len(), cross.len()), (1, 2));
        assert!(Percentiles::of(cross).p50 >= 2999);
        assert_eq!(nodes.of_name("r0-p1"), Some(1));
        assert_eq!(nodes.of_tag(7), None);
    }
}
