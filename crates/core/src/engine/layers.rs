//! Simulcast layers as one shard sees them: each source track's layers and
//! their bitrates (measured from the packets that reach this shard), their
//! quality order, and the allocation of a subscriber's downlink estimate to
//! its slots.
//!
//! Layers rank in the order the publisher's offer lists its rids, lowest
//! first (what Chromium's and Firefox's `sendEncodings`, the demo page and
//! mediasoup's convention give). Measured rates do not reorder them: a
//! browser's low layer can briefly send more than its middle one, and a
//! layer that just resumed measures low.
//!
//! The allocation is a pure function ([`allocate`]): slots in priority order
//! (pinned, then the active speaker, then the larger rendered size) first
//! each get their source's lowest layer while the estimate lasts (the rest
//! pause; a slot already showing video keeps its lowest layer until the
//! estimate falls below half of it, since a frozen tile is worse than a
//! congested one), then climb while it still lasts, never above what the
//! slot's rendered size needs nor above the cap the engine sets (one layer
//! over the current one, and none for a while after a move down). Going
//! above the layer a slot shows now needs 15 % headroom, so a slot does not
//! flap at the edge, and must fit the estimate the engine is sure of (the
//! lowest of the last seconds), while keeping a layer counts on the latest.
//! Sources without simulcast are never paused (there is nothing lower to
//! give), but their bitrate counts against the estimate.
//! A layer that stops at the source while a lower one flows is left at once
//! ([`SourceLayers::fallback`]): waiting for it would freeze the slot. For
//! the same reason a slot never takes a layer below the lowest one still
//! flowing ([`SourceLayers::lowest_flowing`]): when a publisher stops its
//! lowest layer itself, its slots move up to the next one that flows, even
//! above what their rendered size needs.
//!
//! Must not: touch an `Rtc`, send anything or request keyframes (the engine
//! acts on the targets).

use std::time::{Duration, Instant};

use super::streams::MAX_LAYERS;
use crate::ids::TrackKey;

/// How often the measured rates are rolled (the room tick is shorter).
const RATE_WINDOW: Duration = Duration::from_millis(1000);
/// A source not heard from for this long is forgotten.
const SOURCE_EXPIRY: Duration = Duration::from_secs(10);
/// A layer whose first packet of a window came this late into it was
/// paused for part of it: the window does not measure its rate.
const PARTIAL_WINDOW: Duration = Duration::from_millis(200);
/// A layer whose last packet is this much older than the source's newest
/// has stopped at the source (a browser turns its top layers off on its own
/// when its uplink or CPU no longer carries them; the layers of one source
/// send their frames at the same instants, so a low frame rate does not
/// look like this).
const LAYER_STOPPED: Duration = Duration::from_millis(500);
/// Weight of the newest window in a layer's smoothed rate when it is lower
/// (a higher one is taken at once: an encoder ramping up, or sending a
/// keyframe, needs that much of the link; a lagging figure made a climb
/// look cheaper than it was).
const RATE_ALPHA: f64 = 0.5;
/// A layer is taken to need at least this many times the rate of the one
/// below (twice the width is four times the pixels; libwebrtc's ladder has
/// about three times the rate).
const LADDER_STEP: u64 = 2;
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
    /// How many layers the publisher declared (1 without simulcast), or
    /// the spatial layers of a scalable source.
    pub(super) count: u8,
    /// A scalable (SVC) source: its layers are spatial layers of one
    /// encoding, and taking one takes every layer below it too.
    pub(super) svc: bool,
    bytes: [u64; MAX_LAYERS],
    /// When each layer's first packet of the current window came.
    first: [Option<Instant>; MAX_LAYERS],
    /// Smoothed rate per layer (stable id), bps; 0 until measured.
    bps: [u64; MAX_LAYERS],
    /// Frame width per layer, from its last VP8 keyframe; 0 unknown.
    width: [u16; MAX_LAYERS],
    window_start: Instant,
    last_packet: Instant,
    /// When each layer's last packet came.
    last: [Option<Instant>; MAX_LAYERS],
}

impl SourceLayers {
    fn new(count: u8, now: Instant) -> Self {
        SourceLayers {
            count: count.clamp(1, MAX_LAYERS as u8),
            svc: false,
            bytes: [0; MAX_LAYERS],
            first: [None; MAX_LAYERS],
            bps: [0; MAX_LAYERS],
            width: [0; MAX_LAYERS],
            window_start: now,
            last_packet: now,
            last: [None; MAX_LAYERS],
        }
    }

    /// Whether layer `rank` still flows: its last packet is at most
    /// [`LAYER_STOPPED`] older than the source's newest.
    pub(super) fn flowing(&self, rank: usize) -> bool {
        self.last
            .get(rank)
            .copied()
            .flatten()
            .is_some_and(|at| self.last_packet.saturating_duration_since(at) <= LAYER_STOPPED)
    }

    /// Where a slot showing `rank` should go because that layer stopped at
    /// the source: the highest lower one still flowing. `None` while
    /// `rank` flows, or when nothing below it does.
    pub(super) fn fallback(&self, rank: usize) -> Option<usize> {
        if self.flowing(rank) {
            return None;
        }
        (0..rank).rev().find(|&l| self.flowing(l))
    }

    /// The lowest layer a slot can take: the lowest that flows. Layer 0
    /// always does unless the publisher stopped it itself (dynacast keeps
    /// it on) while a higher one goes on.
    pub(super) fn lowest_flowing(&self) -> usize {
        (0..usize::from(self.count))
            .find(|&l| self.flowing(l))
            .unwrap_or(0)
    }

    /// How long no layer of the source has sent anything.
    pub(super) fn silent_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_packet)
    }

    /// The highest rank a slot rendered `width` pixels wide needs: the
    /// lowest layer at least about that wide when every layer's width is
    /// known (VP8 keyframes), else [`rank_for_width`]'s assumption.
    pub(super) fn rank_for(&self, width: u16) -> usize {
        let n = usize::from(self.count);
        let widths = self.width.get(..n).unwrap_or(&[]);
        if n > 1 && widths.iter().all(|&w| w > 0) {
            let want = u32::from(width) * 9 / 10;
            return widths
                .iter()
                .position(|&w| u32::from(w) >= want)
                .unwrap_or(n - 1);
        }
        rank_for_width(width, n)
    }

    /// Rates by quality rank (lowest first; the rank is the stable id),
    /// measured or assumed, and never lower than [`LADDER_STEP`] times the
    /// rank below: a layer that has just started (resumed by dynacast, or
    /// an encoder ramping up) measures far below what it will send, and a
    /// climb onto it must not look cheap (measured: f at 228 kbit/s a
    /// second after it started, where it went on to send 0.7 to 1 Mbit/s).
    /// A scalable source's rank costs its layer and every one below it.
    pub(super) fn rates(&self) -> ([u64; MAX_LAYERS], usize) {
        let n = usize::from(self.count);
        let mut rates = [0u64; MAX_LAYERS];
        let mut floor = 0u64;
        let mut below = 0u64;
        for (rank, rate) in rates.iter_mut().enumerate().take(n) {
            let own = self.bps.get(rank).copied().unwrap_or(0);
            let measured = if self.svc && own > 0 {
                own + below
            } else {
                own
            };
            below += own;
            let r = if measured > 0 {
                measured
            } else if n == 1 {
                ASSUMED_SINGLE_BPS
            } else {
                ASSUMED_TOP_BPS / 3u64.pow((n - 1 - rank) as u32)
            };
            *rate = r.max(floor);
            floor = rate.saturating_mul(LADDER_STEP);
        }
        (rates, n)
    }
}

/// Every source track this shard forwards, with its layers' rates.
#[derive(Debug, Default)]
pub(super) struct Sources {
    map: super::IdMap<TrackKey, SourceLayers>,
}

impl Sources {
    /// One video packet of `track` (per packet: one lookup, two adds), of
    /// its simulcast layer `layer` of `count`, or (`svc`) of its spatial
    /// layer `layer`.
    pub(super) fn note(
        &mut self,
        track: TrackKey,
        layer: u8,
        count: u8,
        svc: bool,
        bytes: usize,
        now: Instant,
    ) {
        let s = self
            .map
            .entry(track)
            .or_insert_with(|| SourceLayers::new(count, now));
        s.count = s.count.max(count.min(MAX_LAYERS as u8));
        s.svc = svc;
        let l = usize::from(layer);
        if let Some(b) = s.bytes.get_mut(l) {
            *b += bytes as u64;
        }
        if let Some(f) = s.first.get_mut(l) {
            f.get_or_insert(now);
        }
        if let Some(at) = s.last.get_mut(l) {
            *at = Some(now);
        }
        s.last_packet = now;
    }

    /// A layer's frame width, read from one of its keyframes.
    pub(super) fn note_width(&mut self, track: TrackKey, layer: u8, width: u16) {
        if let Some(w) = self
            .map
            .get_mut(&track)
            .and_then(|s| s.width.get_mut(usize::from(layer)))
        {
            *w = width;
        }
    }

    pub(super) fn get(&self, track: &TrackKey) -> Option<&SourceLayers> {
        self.map.get(track)
    }

    /// Rolls finished rate windows and forgets silent sources. A layer that
    /// did not send through the whole window (paused by dynacast, or just
    /// resumed) keeps its last rate.
    pub(super) fn roll(&mut self, now: Instant) {
        self.map
            .retain(|_, s| now.saturating_duration_since(s.last_packet) < SOURCE_EXPIRY);
        for s in self.map.values_mut() {
            let elapsed = now.saturating_duration_since(s.window_start);
            if elapsed < RATE_WINDOW {
                continue;
            }
            let start = s.window_start;
            for ((bytes, bps), first) in s
                .bytes
                .iter_mut()
                .zip(s.bps.iter_mut())
                .zip(s.first.iter_mut())
            {
                let whole = first
                    .take()
                    .is_some_and(|f| f.saturating_duration_since(start) < PARTIAL_WINDOW);
                if *bytes > 0 && (whole || *bps == 0) {
                    let rate = *bytes as f64 * 8.0 / elapsed.as_secs_f64();
                    *bps = if rate >= *bps as f64 {
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
    /// Highest rank the slot's rendered size (and its quality cap) asks
    /// for; `None`: not shown.
    pub(super) max_rank: Option<usize>,
    /// Highest rank it may take in this round (the engine's climb pacing).
    pub(super) cap: usize,
    /// Rank it shows now, if any.
    pub(super) current: Option<usize>,
    /// Lowest rank it can take (the ranks below stopped at the source):
    /// its "lowest layer", whatever `max_rank` and `cap` say.
    pub(super) min_rank: usize,
}

/// The result: a rank per slot (`None`: paused), the rate the chosen
/// layers need, and what the simulcast slots would take at the ranks they
/// ask for (what is worth probing for: video without simulcast has no
/// other layer to move to).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Allocation {
    pub(super) ranks: Vec<Option<usize>>,
    /// Slots kept on their lowest layer beyond the estimate: they should
    /// shed frame rate (VP8 temporal layers) while they can.
    pub(super) reduced: Vec<bool>,
    pub(super) used: u64,
    pub(super) desired: u64,
    /// What the video without simulcast takes.
    pub(super) fixed: u64,
}

/// Shares `budget` (bps, after audio) across `wants` (see the module doc);
/// a move above the layer a slot shows must fit in `climb_budget` as well
/// (the estimate it is sure of; at most `budget`).
pub(super) fn allocate(budget: u64, climb_budget: u64, wants: &[SlotWant]) -> Allocation {
    // What a climb must leave unused of `budget`.
    let unsure = budget.saturating_sub(climb_budget);
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by(|&a, &b| {
        let pa = wants.get(a).map(|w| w.priority);
        let pb = wants.get(b).map(|w| w.priority);
        pb.cmp(&pa).then(a.cmp(&b))
    });
    let mut ranks: Vec<Option<usize>> = vec![None; wants.len()];
    let mut reduced = vec![false; wants.len()];
    let mut left = budget;
    let mut desired = 0u64;
    let mut fixed = 0u64;
    let rate = |w: &SlotWant, r: usize| w.rates.get(r).copied().unwrap_or(u64::MAX);
    // Without simulcast: always on, and it costs what it costs.
    for (i, w) in wants.iter().enumerate() {
        if w.n <= 1 && w.max_rank.is_some() {
            if let Some(r) = ranks.get_mut(i) {
                *r = Some(0);
            }
            left = left.saturating_sub(rate(w, 0));
            fixed += rate(w, 0);
        }
    }
    // Everyone shown gets the lowest layer that flows, best first, while it
    // lasts (a slot showing video keeps it down to half its rate).
    for &i in &order {
        let Some(w) = wants.get(i) else { continue };
        let Some(max) = w.max_rank else { continue };
        if w.n <= 1 {
            continue;
        }
        let base = w.min_rank.min(w.n - 1);
        desired += rate(w, max.max(base).min(w.n - 1));
        let room = if w.current.is_some() {
            left.saturating_mul(2)
        } else {
            left
        };
        if rate(w, base) <= room {
            if rate(w, base) > left
                && let Some(r) = reduced.get_mut(i)
            {
                *r = true;
            }
            left = left.saturating_sub(rate(w, base));
            if let Some(r) = ranks.get_mut(i) {
                *r = Some(base);
            }
        }
    }
    // Then each climbs, best first, while it lasts.
    for &i in &order {
        let Some(w) = wants.get(i) else { continue };
        let (Some(max), Some(Some(mut at))) = (w.max_rank, ranks.get(i).copied()) else {
            continue;
        };
        let top = max.min(w.cap).min(w.n.saturating_sub(1)).max(at);
        while at < top {
            let next = at + 1;
            let step = rate(w, next).saturating_sub(rate(w, at));
            let need = if w.current.is_some_and(|c| next <= c) {
                step
            } else {
                ((step as f64 * UP_HEADROOM) as u64).saturating_add(unsure)
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
        reduced,
        used: budget.saturating_sub(left),
        desired,
        fixed,
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

    /// One simulcast track's key, no packet of it seen yet, and the time
    /// the test counts from.
    fn fresh_source() -> (TrackKey, Sources, Instant) {
        let key = TrackKey {
            participant: crate::ids::ParticipantId(1),
            mid: "0".into(),
        };
        (key, Sources::default(), Instant::now())
    }

    fn want(priority: (bool, bool, u32), rates: &[u64], max: Option<usize>) -> SlotWant {
        let mut r = [0; MAX_LAYERS];
        r[..rates.len()].copy_from_slice(rates);
        SlotWant {
            priority,
            rates: r,
            n: rates.len(),
            max_rank: max,
            cap: MAX_LAYERS,
            current: None,
            min_rank: 0,
        }
    }

    const LADDER: [u64; 3] = [150_000, 500_000, 1_500_000];

    #[test]
    fn a_big_estimate_gives_everyone_the_top_layer_their_size_needs() {
        let a = allocate(
            10_000_000,
            10_000_000,
            &[
                want((false, false, 0), &LADDER, Some(2)),
                want((false, false, 0), &LADDER, Some(0)),
                want((false, false, 0), &LADDER, None),
            ],
        );
        assert_eq!(a.ranks, vec![Some(2), Some(0), None]);
        assert_eq!(a.used, 1_650_000);
        assert_eq!((a.desired, a.fixed), (1_650_000, 0));
    }

    #[test]
    fn a_small_estimate_goes_to_priority_first_and_pauses_the_rest() {
        let wants = [
            want((false, false, 100), &LADDER, Some(2)),
            want((true, false, 0), &LADDER, Some(2)),
            want((false, true, 0), &LADDER, Some(2)),
        ];
        // 300 kbps: the pinned and the speaking slot get the lowest layer.
        let a = allocate(300_000, 300_000, &wants);
        assert_eq!(a.ranks, vec![None, Some(0), Some(0)]);
        // 900 kbps: all three get the lowest; the pinned one climbs to mid
        // (350 kbps more, with headroom).
        let a = allocate(900_000, 900_000, &wants);
        assert_eq!(a.ranks, vec![Some(0), Some(1), Some(0)]);
        assert_eq!(a.desired, 4_500_000);
        // Nothing fits: all paused.
        assert_eq!(
            allocate(100_000, 100_000, &wants).ranks,
            vec![None, None, None]
        );
    }

    #[test]
    fn climbing_needs_headroom_but_keeping_does_not() {
        let mut w = want((false, false, 0), &LADDER, Some(2));
        // 500 kbps exactly: not enough headroom to climb from 0 to 1...
        assert_eq!(allocate(500_000, 500_000, &[w]).ranks, vec![Some(0)]);
        // ...but a slot already on layer 1 keeps it.
        w.current = Some(1);
        assert_eq!(allocate(500_000, 500_000, &[w]).ranks, vec![Some(1)]);
    }

    #[test]
    fn video_without_simulcast_is_never_paused_but_counts() {
        let a = allocate(
            600_000,
            600_000,
            &[
                want((false, false, 0), &[500_000], Some(2)),
                want((false, false, 0), &LADDER, Some(2)),
            ],
        );
        assert_eq!(a.ranks, vec![Some(0), None]);
        let a = allocate(
            100_000,
            100_000,
            &[want((false, false, 0), &[500_000], Some(0))],
        );
        assert_eq!(a.ranks, vec![Some(0)]);
    }

    #[test]
    fn known_widths_pick_the_layer_that_covers_the_tile() {
        let (key, mut s, t0) = fresh_source();
        s.note(key, 0, 3, false, 1, t0);
        // Until every width is known: the assumed 1280-wide top layer.
        s.note_width(key, 0, 160);
        assert_eq!(s.get(&key).unwrap().rank_for(320), 0);
        // A 640x360 camera: 160, 320, 640.
        s.note_width(key, 1, 320);
        s.note_width(key, 2, 640);
        let l = s.get(&key).unwrap();
        assert_eq!(l.rank_for(320), 1);
        assert_eq!(l.rank_for(300), 1);
        assert_eq!(l.rank_for(150), 0);
        assert_eq!(l.rank_for(1280), 2);
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
    fn a_slot_showing_video_keeps_its_lowest_layer_down_to_half_its_rate() {
        let mut w = want((false, false, 0), &LADDER, Some(2));
        assert_eq!(allocate(100_000, 100_000, &[w]).ranks, vec![None]);
        w.current = Some(0);
        let a = allocate(100_000, 100_000, &[w]);
        // Kept, but it should shed frame rate while it can.
        assert_eq!((a.ranks, a.reduced), (vec![Some(0)], vec![true]));
        assert_eq!(allocate(200_000, 200_000, &[w]).reduced, vec![false]);
        assert_eq!(allocate(70_000, 70_000, &[w]).ranks, vec![None]);
    }

    #[test]
    fn the_cap_paces_the_climb() {
        let mut w = want((false, false, 0), &LADDER, Some(2));
        w.cap = 0;
        assert_eq!(allocate(10_000_000, 10_000_000, &[w]).ranks, vec![Some(0)]);
        w.cap = 1;
        assert_eq!(allocate(10_000_000, 10_000_000, &[w]).ranks, vec![Some(1)]);
    }

    #[test]
    fn nothing_below_the_lowest_flowing_layer_is_taken() {
        // q stopped: the slot's lowest layer is h, above its size's q and
        // its pacing cap, and it is kept down to half of h's rate.
        let mut w = want((false, false, 0), &LADDER, Some(1));
        w.min_rank = 1;
        w.cap = 1;
        let a = allocate(10_000_000, 10_000_000, &[w]);
        assert_eq!((a.ranks, a.desired), (vec![Some(1)], 500_000));
        w.current = Some(0);
        assert_eq!(allocate(300_000, 300_000, &[w]).ranks, vec![Some(1)]);
        assert_eq!(allocate(200_000, 200_000, &[w]).ranks, vec![None]);
        // It still climbs from there.
        w.max_rank = Some(2);
        w.cap = 2;
        assert_eq!(allocate(10_000_000, 10_000_000, &[w]).ranks, vec![Some(2)]);
    }

    #[test]
    fn the_lowest_flowing_layer_and_the_silence() {
        let (key, mut s, t0) = fresh_source();
        let ms = |n| t0 + Duration::from_millis(n);
        for t in [0, 200, 400] {
            s.note(key, 0, 3, false, 1_000, ms(t));
        }
        let low = |s: &Sources| s.get(&key).map(|x| x.lowest_flowing());
        assert_eq!(low(&s), Some(0));
        // q stops, h starts: q is left 500 ms after its last packet.
        for t in [600, 800, 900] {
            s.note(key, 1, 3, false, 1_000, ms(t));
        }
        assert_eq!(low(&s), Some(0));
        s.note(key, 1, 3, false, 1_000, ms(1000));
        assert_eq!(low(&s), Some(1));
        let src = s.get(&key).unwrap();
        assert_eq!(src.silent_for(ms(1700)), Duration::from_millis(700));
        // The layers of a silent source do not change: the last one flows.
        assert_eq!(src.lowest_flowing(), 1);
    }

    #[test]
    fn a_layer_that_stops_while_a_lower_one_flows_falls_back_to_it() {
        let (key, mut s, t0) = fresh_source();
        let ms = |n| t0 + Duration::from_millis(n);
        // All three at 5 frames a second: a low frame rate is not a stop.
        for t in [0, 200, 400, 600, 800] {
            for l in 0..3 {
                s.note(key, l, 3, false, 1_000, ms(t));
            }
        }
        let src = |s: &Sources| s.get(&key).map(|x| (x.fallback(2), x.fallback(1)));
        assert_eq!(src(&s), Some((None, None)));
        // f stops; q and h go on: within 500 ms nothing moves, after it f
        // falls back to h.
        for t in [1000, 1200] {
            s.note(key, 0, 3, false, 1_000, ms(t));
            s.note(key, 1, 3, false, 1_000, ms(t));
        }
        assert_eq!(src(&s), Some((None, None)));
        s.note(key, 0, 3, false, 1_000, ms(1400));
        s.note(key, 1, 3, false, 1_000, ms(1400));
        assert_eq!(src(&s), Some((Some(1), None)));
        // h stops too: both fall back to q.
        for t in [1600, 1800, 2000] {
            s.note(key, 0, 3, false, 1_000, ms(t));
        }
        assert_eq!(src(&s), Some((Some(0), Some(0))));
    }

    #[test]
    fn a_climb_must_fit_the_budget_it_is_sure_of_and_keeping_a_layer_need_not() {
        let mut w = want((false, false, 0), &LADDER, Some(2));
        w.cap = 1;
        w.current = Some(0);
        // 700k now, but only 300k for sure: no climb to h (150k + 1.15 x 350k).
        assert_eq!(allocate(700_000, 300_000, &[w]).ranks, vec![Some(0)]);
        assert_eq!(allocate(700_000, 700_000, &[w]).ranks, vec![Some(1)]);
        // A slot on h keeps it on the estimate of now.
        w.current = Some(1);
        assert_eq!(allocate(600_000, 300_000, &[w]).ranks, vec![Some(1)]);
    }

    #[test]
    fn rates_are_measured_monotonic_and_a_partial_window_does_not_count() {
        let (key, mut s, t0) = fresh_source();
        // Before anything is measured: the assumed ladder.
        s.note(key, 0, 3, false, 0, t0);
        assert_eq!(
            s.get(&key).unwrap().rates(),
            ([166_666, 500_000, 1_500_000, 0], 3)
        );
        // q briefly sends more than h: h is taken to need at least twice
        // q's rate.
        for _ in 0..10 {
            s.note(key, 0, 3, false, 5_000, t0);
            s.note(key, 1, 3, false, 3_000, t0);
            s.note(key, 2, 3, false, 15_000, t0);
        }
        s.roll(t0 + Duration::from_secs(1));
        let (rates, n) = s.get(&key).unwrap().rates();
        assert_eq!(rates[..n], [400_000, 800_000, 1_600_000]);
        // f resumes 600 ms into a window: that window does not measure it.
        let t1 = t0 + Duration::from_secs(1);
        s.note(key, 0, 3, false, 5_000, t1);
        s.note(key, 1, 3, false, 3_000, t1);
        s.note(key, 2, 3, false, 1_000, t1 + Duration::from_millis(600));
        s.roll(t1 + Duration::from_secs(1));
        let (rates, _) = s.get(&key).unwrap().rates();
        assert_eq!(rates[2], 1_200_000);
        // Silent for a window: the rates stay (a paused layer keeps its figure).
        s.note(key, 0, 3, false, 0, t0 + Duration::from_secs(3));
        s.roll(t0 + Duration::from_secs(3));
        assert_eq!(s.get(&key).unwrap().rates().0[2], 1_200_000);
        // Forgotten after the expiry.
        s.roll(t0 + Duration::from_secs(30));
        assert!(s.get(&key).is_none());
    }
}
