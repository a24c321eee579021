//! Simulcast layers as one shard sees them: each source track's layers and
//! their bitrates (measured from the packets that reach this shard), their
//! quality order, and the allocation of a subscriber's downlink estimate to
//! its slots.
//!
//! The allocation is a pure function ([`allocate`]): slots in priority order
//! (pinned, then the active speaker, then the larger rendered size) first
//! each get their source's lowest layer while the estimate lasts (the rest
//! pause), then climb a layer at a time while it still lasts, never above
//! what the slot's rendered size needs. Going above the layer a slot shows
//! now needs 15 % headroom, so a slot does not flap at the edge.
//! Sources without simulcast are never paused (there is nothing lower to
//! give), but their bitrate counts against the estimate.
//!
//! Must not: touch an `Rtc`, send anything or request keyframes (the engine
//! acts on the targets).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::streams::MAX_LAYERS;
use crate::ids::TrackKey;

/// How often the measured rates are rolled (the room tick is shorter).
const RATE_WINDOW: Duration = Duration::from_millis(1000);
/// A source not heard from for this long is forgotten.
const SOURCE_EXPIRY: Duration = Duration::from_secs(10);
/// Weight of the newest window in a layer's smoothed rate.
const RATE_ALPHA: f64 = 0.5;
/// Assumed rates (bps) of the top layer and each one below it (by factor
/// 3), until measured: libwebrtc's 720p/360p/180p ladder, roughly.
const ASSUMED_TOP_BPS: u64 = 1_500_000;
/// Assumed rate of video without simulcast, until measured.
const ASSUMED_SINGLE_BPS: u64 = 500_000;
/// What one audio slot with a source takes from the estimate.
pub(super) const AUDIO_BPS: u64 = 50_000;
/// Headroom needed to move a slot above the layer it shows now.
const UP_HEADROOM: f64 = 1.15;

/// What this shard knows of one source track's layers.
#[derive(Debug)]
pub(super) struct SourceLayers {
    /// How many layers the publisher declared (1 without simulcast).
    pub(super) count: u8,
    bytes: [u64; MAX_LAYERS],
    /// Smoothed rate per layer (stable id), bps; 0 until measured.
    bps: [u64; MAX_LAYERS],
    window_start: Instant,
    last_packet: Instant,
}

impl SourceLayers {
    fn new(count: u8, now: Instant) -> Self {
        SourceLayers {
            count: count.clamp(1, MAX_LAYERS as u8),
            bytes: [0; MAX_LAYERS],
            bps: [0; MAX_LAYERS],
            window_start: now,
            last_packet: now,
        }
    }

    /// Stable layer ids from the lowest quality to the highest: by measured
    /// rate once every layer has one (publishers list rids in either
    /// order), else in offer order (Chromium's and the usual web apps'
    /// low-to-high).
    pub(super) fn order(&self) -> ([u8; MAX_LAYERS], usize) {
        let n = usize::from(self.count);
        let mut ids = [0u8; MAX_LAYERS];
        for (i, id) in ids.iter_mut().enumerate() {
            *id = i as u8;
        }
        let measured = self.bps.iter().take(n).all(|&b| b > 0);
        if measured && let Some(head) = ids.get_mut(..n) {
            head.sort_by_key(|&id| self.bps.get(usize::from(id)).copied().unwrap_or(0));
        }
        (ids, n)
    }

    /// Rates by quality rank (lowest first), measured or assumed.
    pub(super) fn rates(&self) -> ([u64; MAX_LAYERS], [u8; MAX_LAYERS], usize) {
        let (ids, n) = self.order();
        let mut rates = [0u64; MAX_LAYERS];
        for (rank, rate) in rates.iter_mut().enumerate().take(n) {
            let id = ids.get(rank).copied().unwrap_or(0);
            let measured = self.bps.get(usize::from(id)).copied().unwrap_or(0);
            *rate = if measured > 0 {
                measured
            } else if n == 1 {
                ASSUMED_SINGLE_BPS
            } else {
                ASSUMED_TOP_BPS / 3u64.pow((n - 1 - rank) as u32)
            };
        }
        (rates, ids, n)
    }
}

/// Every source track this shard forwards, with its layers' rates.
#[derive(Debug, Default)]
pub(super) struct Sources {
    map: HashMap<TrackKey, SourceLayers>,
}

impl Sources {
    /// One video packet of `track` (per packet: one lookup, two adds).
    pub(super) fn note(
        &mut self,
        track: TrackKey,
        layer: u8,
        count: u8,
        bytes: usize,
        now: Instant,
    ) {
        let s = self
            .map
            .entry(track)
            .or_insert_with(|| SourceLayers::new(count, now));
        s.count = s.count.max(count.min(MAX_LAYERS as u8));
        if let Some(b) = s.bytes.get_mut(usize::from(layer)) {
            *b += bytes as u64;
        }
        s.last_packet = now;
    }

    pub(super) fn get(&self, track: &TrackKey) -> Option<&SourceLayers> {
        self.map.get(track)
    }

    /// Rolls finished rate windows and forgets silent sources. A layer that
    /// sent nothing in a window (paused by dynacast) keeps its last rate.
    pub(super) fn roll(&mut self, now: Instant) {
        self.map
            .retain(|_, s| now.saturating_duration_since(s.last_packet) < SOURCE_EXPIRY);
        for s in self.map.values_mut() {
            let elapsed = now.saturating_duration_since(s.window_start);
            if elapsed < RATE_WINDOW {
                continue;
            }
            for (bytes, bps) in s.bytes.iter_mut().zip(s.bps.iter_mut()) {
                if *bytes > 0 {
                    let rate = *bytes as f64 * 8.0 / elapsed.as_secs_f64();
                    *bps = if *bps == 0 {
                        rate as u64
                    } else {
                        (RATE_ALPHA * rate + (1.0 - RATE_ALPHA) * *bps as f64) as u64
                    };
                }
                *bytes = 0;
            }
            s.window_start = now;
        }
    }
}

/// One video slot's part in an allocation.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotWant {
    /// Higher goes first: (pinned, speaking, rendered area).
    pub(super) priority: (bool, bool, u32),
    /// The source's layer rates by quality rank, lowest first; `n` of them.
    pub(super) rates: [u64; MAX_LAYERS],
    pub(super) n: usize,
    /// Highest rank the slot's rendered size (and its cap) asks for;
    /// `None`: not shown.
    pub(super) max_rank: Option<usize>,
    /// Rank it shows now, if any.
    pub(super) current: Option<usize>,
}

/// The result: a rank per slot (`None`: paused), the rate the chosen
/// layers need, and what the slots would take at the ranks they ask for.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Allocation {
    pub(super) ranks: Vec<Option<usize>>,
    pub(super) used: u64,
    pub(super) desired: u64,
}

/// Shares `budget` (bps, after audio) across `wants` (see the module doc).
pub(super) fn allocate(budget: u64, wants: &[SlotWant]) -> Allocation {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by(|&a, &b| {
        let pa = wants.get(a).map(|w| w.priority);
        let pb = wants.get(b).map(|w| w.priority);
        pb.cmp(&pa).then(a.cmp(&b))
    });
    let mut ranks: Vec<Option<usize>> = vec![None; wants.len()];
    let mut left = budget;
    let mut desired = 0u64;
    let rate = |w: &SlotWant, r: usize| w.rates.get(r).copied().unwrap_or(u64::MAX);
    // Without simulcast: always on, and it costs what it costs.
    for (i, w) in wants.iter().enumerate() {
        if w.n <= 1 && w.max_rank.is_some() {
            if let Some(r) = ranks.get_mut(i) {
                *r = Some(0);
            }
            left = left.saturating_sub(rate(w, 0));
            desired += rate(w, 0);
        }
    }
    // Everyone shown gets the lowest layer, best first, while it lasts.
    for &i in &order {
        let Some(w) = wants.get(i) else { continue };
        let Some(max) = w.max_rank else { continue };
        if w.n <= 1 {
            continue;
        }
        desired += rate(w, max.min(w.n - 1));
        if rate(w, 0) <= left {
            left -= rate(w, 0);
            if let Some(r) = ranks.get_mut(i) {
                *r = Some(0);
            }
        }
    }
    // Then each climbs, best first, while it lasts.
    for &i in &order {
        let Some(w) = wants.get(i) else { continue };
        let (Some(max), Some(Some(mut at))) = (w.max_rank, ranks.get(i).copied()) else {
            continue;
        };
        let top = max.min(w.n.saturating_sub(1));
        while at < top {
            let next = at + 1;
            let step = rate(w, next).saturating_sub(rate(w, at));
            let need = if w.current.is_some_and(|c| next <= c) {
                step
            } else {
                (step as f64 * UP_HEADROOM) as u64
            };
            if need > left {
                break;
            }
            left -= step;
            at = next;
        }
        if let Some(r) = ranks.get_mut(i) {
            *r = Some(at);
        }
    }
    Allocation {
        ranks,
        used: budget.saturating_sub(left),
        desired,
    }
}

/// The highest quality rank (of `n`) a slot rendered `width` pixels wide
/// needs: layers are assumed to halve in width from the top one (taken as
/// 1280), as libwebrtc's simulcast ladder does.
pub(super) fn rank_for_width(width: u16, n: usize) -> usize {
    let top = n.saturating_sub(1);
    let mut rank = top;
    let mut w = 1280u32;
    while rank > 0 && u32::from(width) <= w / 2 {
        rank -= 1;
        w /= 2;
    }
    rank
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(priority: (bool, bool, u32), rates: &[u64], max: Option<usize>) -> SlotWant {
        let mut r = [0; MAX_LAYERS];
        r[..rates.len()].copy_from_slice(rates);
        SlotWant {
            priority,
            rates: r,
            n: rates.len(),
            max_rank: max,
            current: None,
        }
    }

    const LADDER: [u64; 3] = [150_000, 500_000, 1_500_000];

    #[test]
    fn a_big_estimate_gives_everyone_the_top_layer_their_size_needs() {
        let a = allocate(
            10_000_000,
            &[
                want((false, false, 0), &LADDER, Some(2)),
                want((false, false, 0), &LADDER, Some(0)),
                want((false, false, 0), &LADDER, None),
            ],
        );
        assert_eq!(a.ranks, vec![Some(2), Some(0), None]);
        assert_eq!(a.used, 1_650_000);
        assert_eq!(a.desired, 1_650_000);
    }

    #[test]
    fn a_small_estimate_goes_to_priority_first_and_pauses_the_rest() {
        let wants = [
            want((false, false, 100), &LADDER, Some(2)),
            want((true, false, 0), &LADDER, Some(2)),
            want((false, true, 0), &LADDER, Some(2)),
        ];
        // 300 kbps: the pinned and the speaking slot get the lowest layer.
        let a = allocate(300_000, &wants);
        assert_eq!(a.ranks, vec![None, Some(0), Some(0)]);
        // 900 kbps: all three get the lowest; the pinned one climbs to mid
        // (350 kbps more, with headroom).
        let a = allocate(900_000, &wants);
        assert_eq!(a.ranks, vec![Some(0), Some(1), Some(0)]);
        assert_eq!(a.desired, 4_500_000);
        // Nothing fits: all paused.
        assert_eq!(allocate(100_000, &wants).ranks, vec![None, None, None]);
    }

    #[test]
    fn climbing_needs_headroom_but_keeping_does_not() {
        let mut w = want((false, false, 0), &LADDER, Some(2));
        // 500 kbps exactly: not enough headroom to climb from 0 to 1...
        assert_eq!(allocate(500_000, &[w]).ranks, vec![Some(0)]);
        // ...but a slot already on layer 1 keeps it.
        w.current = Some(1);
        assert_eq!(allocate(500_000, &[w]).ranks, vec![Some(1)]);
    }

    #[test]
    fn video_without_simulcast_is_never_paused_but_counts() {
        let a = allocate(
            600_000,
            &[
                want((false, false, 0), &[500_000], Some(2)),
                want((false, false, 0), &LADDER, Some(2)),
            ],
        );
        assert_eq!(a.ranks, vec![Some(0), None]);
        let a = allocate(100_000, &[want((false, false, 0), &[500_000], Some(0))]);
        assert_eq!(a.ranks, vec![Some(0)]);
    }

    #[test]
    fn width_to_rank() {
        assert_eq!(rank_for_width(1280, 3), 2);
        assert_eq!(rank_for_width(641, 3), 2);
        assert_eq!(rank_for_width(640, 3), 1);
        assert_eq!(rank_for_width(320, 3), 0);
        assert_eq!(rank_for_width(100, 3), 0);
        assert_eq!(rank_for_width(320, 2), 0);
        assert_eq!(rank_for_width(1280, 1), 0);
    }

    #[test]
    fn rates_are_measured_and_order_follows_them() {
        let t0 = Instant::now();
        let key = TrackKey {
            participant: crate::ids::ParticipantId(1),
            mid: "0".into(),
        };
        let mut s = Sources::default();
        // A publisher that lists its rids high to low.
        for _ in 0..10 {
            s.note(key, 0, 3, 15_000, t0);
            s.note(key, 1, 3, 5_000, t0);
            s.note(key, 2, 3, 1_500, t0);
        }
        let (_, ids, n) = s.get(&key).unwrap().rates();
        assert_eq!((ids[..n].to_vec(), n), (vec![0, 1, 2], 3));
        s.roll(t0 + Duration::from_secs(1));
        let (rates, ids, n) = s.get(&key).unwrap().rates();
        assert_eq!(ids[..n], [2, 1, 0]);
        assert_eq!(rates[..n], [120_000, 400_000, 1_200_000]);
        // Silent for a window: the rates stay (a paused layer keeps its figure).
        s.note(key, 0, 3, 0, t0 + Duration::from_secs(2));
        s.roll(t0 + Duration::from_secs(2));
        assert_eq!(
            s.get(&key).unwrap().rates().0[..n],
            [120_000, 400_000, 1_200_000]
        );
        // Forgotten after the expiry.
        s.roll(t0 + Duration::from_secs(30));
        assert!(s.get(&key).is_none());
    }
}
