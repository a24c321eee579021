//! Measurement: a per-driver-thread observer that records into local
//! HdrHistograms and hands one interval report per second to the collector
//! (no lock, no sharing on the packet path), and the collector's merge.

use std::collections::BTreeMap;
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
}

impl ThreadObserver {
    /// Observer for driver `thread`; seconds count from `start`.
    pub fn new(start: Instant, tx: Sender<Report>) -> Self {
        ThreadObserver {
            start,
            cur: Interval::new(0),
            tx,
        }
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
    }
}
