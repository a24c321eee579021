//! A downlink estimate from receiver reports alone, for a subscriber that
//! gives no other: one that negotiated neither transport-wide feedback
//! (str0m's send-side BWE) nor sends REMB (werift, libdatachannel and
//! aiortc by default). Pure: [`LossBwe::report`] takes one stats
//! interval's loss and send rate and gives the estimate; the engine feeds
//! it and hands the estimate to the subscriber's
//! [`Downlink`](super::downlink::Downlink) as it would TWCC's.
//!
//! A classic loss-based controller (libwebrtc's before its delay-based
//! one, GCC's loss half): under [`LOW_LOSS`] it grows [`GROWTH`] a second,
//! from at least what was sent; between that and [`HIGH_LOSS`] it holds;
//! above, it falls to what was sent × (1 − loss / 2).
//!
//! It cannot probe: without TWCC str0m pads nothing, so what the link
//! carries is learnt only by sending it, a whole simulcast layer at a
//! time. Layers are about 3× apart, and growing 8 %/s from what one layer
//! takes would reach the next after some 14 s. So once the link carried
//! what is sent for [`STEP_AFTER`] clean reports in a row, the estimate
//! may rise at once to what the subscriber's slots would take one layer up
//! ([`STEP_MARGIN`] over it): the downlink then climbs one layer, at its
//! own pace, and the reports after say whether the link carries it. The
//! estimate never goes above the larger of twice what was sent and that
//! next rate (a subscriber that takes little does not gather an estimate
//! it never tried). A climb that the link did not carry (a lossy report)
//! leaves a ceiling: what was sent then, not reached again for
//! [`CEILING_HOLD_MIN`], doubling with each failure up to
//! [`CEILING_HOLD_MAX`], so a constrained link settles one layer lower
//! instead of climbing into loss (and a frozen picture) every few seconds.
//!
//! Must not: know the engine or str0m.

use std::time::{Duration, Instant};

/// Under this share lost a report is clean: the estimate grows.
pub(super) const LOW_LOSS: f32 = 0.02;
/// Over it, the estimate falls to what was sent × (1 − loss / 2).
pub(super) const HIGH_LOSS: f32 = 0.10;
/// Growth a second on clean reports (libwebrtc's loss-based 8 %).
pub(super) const GROWTH: f64 = 0.08;
/// Clean reports in a row at the current send rate before the estimate
/// may rise to what the next climb takes.
pub(super) const STEP_AFTER: u32 = 2;
/// The estimate a step gives: the next climb's rate and this share more
/// (the allocation takes 15 % headroom over a climb's step, and layer
/// rates are averages).
pub(super) const STEP_MARGIN: f64 = 0.20;
/// A ceiling left by a lossy report holds this long first...
pub(super) const CEILING_HOLD_MIN: Duration = Duration::from_secs(15);
/// ...doubling with each lossy report at or above it, up to this.
pub(super) const CEILING_HOLD_MAX: Duration = Duration::from_secs(120);
/// Never below this (bps): audio and the lowest layer's keyframes.
pub(super) const MIN_BPS: u64 = 50_000;
/// After a fall, lossy reports this long are taken for the rate before.
pub(super) const SETTLE: Duration = Duration::from_secs(3);
/// A report's elapsed time counts at most this much growth (a gap in the
/// reports is no evidence of a clean link).
const MAX_STEP: Duration = Duration::from_secs(2);

/// The estimate and what it learnt of the link.
#[derive(Debug, Clone)]
pub(super) struct LossBwe {
    estimate: u64,
    /// When the last report came.
    at: Option<Instant>,
    /// Clean reports in a row.
    clean: u32,
    /// A send rate a report found lossy, and until when the estimate stays
    /// under it.
    ceiling: Option<(u64, Instant)>,
    /// How long the next ceiling holds.
    hold: Duration,
    /// What was sent over the interval before the last report's.
    prev_sent: u64,
    /// When it last fell.
    decreased_at: Option<Instant>,
}

impl LossBwe {
    /// Starts at `initial` bps (the configured BWE start value).
    pub(super) fn new(initial: u64) -> Self {
        LossBwe {
            estimate: initial.max(MIN_BPS),
            at: None,
            clean: 0,
            ceiling: None,
            hold: CEILING_HOLD_MIN,
            prev_sent: 0,
            decreased_at: None,
        }
    }

    /// One stats interval's receiver reports: `loss` the share of what was
    /// sent that they lost, `sent` what was sent meanwhile (bps), `next`
    /// what the subscriber's slots and audio would take one layer up each
    /// (bps; what they take now when none can climb). Gives the estimate.
    pub(super) fn report(&mut self, now: Instant, loss: f32, sent: u64, next: u64) -> u64 {
        let dt = self
            .at
            .map_or(Duration::from_secs(1), |t| now.saturating_duration_since(t))
            .min(MAX_STEP);
        self.at = Some(now);
        // A report tells of what was sent up to a second or so before it
        // came: this interval's rate or the one before.
        let tried = sent.max(std::mem::replace(&mut self.prev_sent, sent));
        if loss > HIGH_LOSS {
            self.clean = 0;
            let settling = self
                .decreased_at
                .is_some_and(|t| now.saturating_duration_since(t) < SETTLE);
            if settling || sent > self.estimate {
                // Still sending more than the estimate fell to, or it fell
                // just now: the loss is the old rate's (the downlink's move
                // down waits for a keyframe, a queue drains, the reports
                // come a second late), and it was answered. Falling again
                // for it, from the lower rate sent since, took the
                // estimate to the floor and paused the video behind an
                // 800 kbit/s link.
                return self.estimate;
            }
            self.decreased_at = Some(now);
            // What met the loss was what was sent (the estimate may have
            // been above it, allowed but never tried).
            let base = self.estimate.min(tried.max(MIN_BPS));
            self.estimate = mul(base, 1.0 - 0.5 * f64::from(loss)).max(MIN_BPS);
            // A lossy report within a ceiling's hold, or at the rate that
            // failed before: the climb failed again, hold it longer.
            let again = self
                .ceiling
                .is_some_and(|(rate, until)| now < until || tried >= rate);
            if !again {
                self.hold = CEILING_HOLD_MIN;
            }
            let rate = self
                .ceiling
                .filter(|_| again)
                .map_or(tried, |(r, _)| r.min(tried));
            self.ceiling = Some((rate.max(MIN_BPS), now + self.hold));
            self.hold = (self.hold * 2).min(CEILING_HOLD_MAX);
            return self.estimate;
        }
        if loss >= LOW_LOSS {
            self.clean = 0;
            return self.estimate;
        }
        self.clean = self.clean.saturating_add(1);
        // Carried cleanly what failed before: that was not the link.
        if self.ceiling.is_some_and(|(rate, _)| sent >= rate) {
            self.ceiling = None;
            self.hold = CEILING_HOLD_MIN;
        }
        let mut want = mul(
            self.estimate.max(sent),
            (1.0 + GROWTH).powf(dt.as_secs_f64()),
        );
        let step = mul(next, 1.0 + STEP_MARGIN);
        if self.clean >= STEP_AFTER {
            want = want.max(step);
        }
        let mut cap = sent.saturating_mul(2).max(step);
        // Under what failed, by the margin a climb needs, while it holds
        // (past its hold it is kept: a climb that fails at it again holds
        // twice as long).
        if let Some((rate, until)) = self.ceiling
            && now < until
        {
            cap = cap.min(mul(rate, 1.0 - STEP_MARGIN));
        }
        self.estimate = want.min(cap).max(MIN_BPS);
        self.estimate
    }
}

/// Streams whose packet counts [`Reports`] keeps at most (a subscriber's
/// send streams: its slots, a few dozen).
const STREAMS_MAX: usize = 256;

/// One stats interval's receiver reports, gathered stream by stream:
/// str0m gives the subscriber's figures (an interval starts), then each
/// send stream's packet count and the loss its receiver reports since
/// the last gave.
#[derive(Debug, Default)]
pub(super) struct Reports {
    /// Each stream's (key) packets sent as of its last statistics.
    packets: Vec<(u64, u64)>,
    /// This interval's packets sent on streams that had a report, and
    /// those times their loss.
    sent: u64,
    lost: f64,
    /// An interval started and was not taken yet.
    open: bool,
}

impl Reports {
    /// An interval starts (its streams' figures follow).
    pub(super) fn peer(&mut self) {
        self.open = true;
        self.sent = 0;
        self.lost = 0.0;
    }

    /// Stream `key` sent `packets` in all; its receiver reports since its
    /// last figures lost `loss` (`None`: none came).
    pub(super) fn stream(&mut self, key: u64, packets: u64, loss: Option<f32>) {
        let before = match self.packets.iter_mut().find(|(k, _)| *k == key) {
            Some((_, p)) => std::mem::replace(p, packets),
            None => {
                if self.packets.len() >= STREAMS_MAX {
                    self.packets.clear();
                }
                self.packets.push((key, packets));
                0
            }
        };
        if let Some(loss) = loss {
            // At least one packet: a report on a stream that sent nothing
            // since still counts a little.
            let n = packets.saturating_sub(before).max(1);
            self.sent = self.sent.saturating_add(n);
            self.lost += n as f64 * f64::from(loss.clamp(0.0, 1.0));
        }
    }

    /// The interval's share lost (`None`: no stream had a report), once,
    /// after its streams came.
    pub(super) fn take(&mut self) -> Option<Option<f32>> {
        std::mem::take(&mut self.open)
            .then(|| (self.sent > 0).then(|| (self.lost / self.sent as f64) as f32))
    }
}

fn mul(v: u64, f: f64) -> u64 {
    // Rates are far under 2^53: the conversion is exact enough.
    (v as f64 * f).round().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Layer rates of a three-layer publisher, plus 40 kbit/s audio.
    const AUDIO: u64 = 40_000;
    const RATES: [u64; 3] = [150_000, 500_000, 1_500_000];

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Plays a link of `capacity` bps: each second the subscriber sends
    /// its layer (climbing one layer when the estimate allows it, not
    /// within 1 s of the last move, as the downlink would), the link loses
    /// what is over its capacity. Returns the layer each second.
    fn play(capacity: u64, secs: u64) -> Vec<usize> {
        let t0 = Instant::now();
        let mut b = LossBwe::new(300_000);
        let mut layer = 0usize;
        let mut layers = Vec::new();
        for i in 1..=secs {
            let sent = RATES[layer] + AUDIO;
            let loss = if sent > capacity {
                (sent - capacity) as f32 / sent as f32
            } else {
                0.0
            };
            let next = RATES[(layer + 1).min(2)] + AUDIO;
            let e = b.report(t0 + s(i), loss, sent, next);
            // Down at once to what fits, up one layer.
            while layer > 0 && RATES[layer] + AUDIO > e {
                layer -= 1;
            }
            if layer < 2 && RATES[layer + 1] + AUDIO <= e {
                layer += 1;
            }
            layers.push(layer);
        }
        layers
    }

    #[test]
    fn a_clean_link_climbs_to_the_top_layer_one_layer_at_a_time() {
        let layers = play(10_000_000, 10);
        let top = layers
            .iter()
            .position(|&l| l == 2)
            .expect("reaches the top");
        assert!(top <= 5, "{layers:?}");
        assert!(layers.windows(2).all(|w| w[1] <= w[0] + 1), "{layers:?}");
        assert!(layers[top..].iter().all(|&l| l == 2), "stays: {layers:?}");
    }

    #[test]
    fn a_constrained_link_settles_one_layer_lower_and_seldom_retries() {
        // 1 Mbit/s: layer 1 fits, layer 2 does not.
        let layers = play(1_000_000, 120);
        let tries = layers.windows(2).filter(|w| w[0] == 1 && w[1] == 2).count();
        assert!(
            tries <= 4,
            "{tries} climbs into loss in 2 minutes: {layers:?}"
        );
        let on_1 = layers.iter().filter(|&&l| l == 1).count();
        assert!(on_1 > 100, "{layers:?}");
    }

    #[test]
    fn twenty_percent_loss_backs_off_from_what_was_sent() {
        let t0 = Instant::now();
        let mut b = LossBwe::new(300_000);
        // Allowed 2 Mbit/s, sending 1 Mbit/s: the fall is from 1 Mbit/s.
        b.estimate = 2_000_000;
        assert_eq!(b.report(t0, 0.20, 1_000_000, 1_000_000), 900_000);
        // Not again while what is sent is above that, nor for 3 s.
        assert_eq!(b.report(t0 + s(1), 0.20, 1_000_000, 1_000_000), 900_000);
        assert_eq!(b.report(t0 + s(2), 0.20, 900_000, 900_000), 900_000);
        assert_eq!(b.report(t0 + s(3), 0.20, 900_000, 900_000), 810_000);
        // And never under the floor.
        for i in 4..60 {
            b.report(t0 + s(i), 1.0, 10_000, 10_000);
        }
        assert_eq!(b.estimate, MIN_BPS);
    }

    #[test]
    fn between_two_and_ten_percent_it_holds() {
        let t0 = Instant::now();
        let mut b = LossBwe::new(300_000);
        for i in 1..30 {
            assert_eq!(b.report(t0 + s(i), 0.05, 250_000, 600_000), 300_000);
        }
        // The first clean report after grows 8 %, the second steps up.
        assert_eq!(b.report(t0 + s(30), 0.0, 250_000, 600_000), 324_000);
        assert_eq!(b.report(t0 + s(31), 0.0, 250_000, 600_000), 720_000);
    }

    #[test]
    fn growth_is_capped_by_twice_what_was_sent_and_the_next_climb() {
        let t0 = Instant::now();
        let mut b = LossBwe::new(300_000);
        // On the top layer (nothing to climb to): at most twice it.
        for i in 1..100 {
            b.report(t0 + s(i), 0.0, 1_000_000, 1_000_000);
        }
        assert_eq!(b.estimate, 2_000_000);
        // It takes less: the estimate follows down.
        assert_eq!(b.report(t0 + s(100), 0.0, 200_000, 200_000), 400_000);
    }

    #[test]
    fn reports_weigh_each_streams_loss_by_what_it_sent() {
        let mut r = Reports::default();
        r.stream(1, 100, Some(0.5));
        assert_eq!(r.take(), None, "no interval started");
        r.peer();
        // Video: 300 packets, 10 % lost; audio: 50 packets, none; a stream
        // without a report does not count.
        r.stream(1, 400, Some(0.10));
        r.stream(2, 50, Some(0.0));
        r.stream(3, 500, None);
        let loss = r.take().expect("an interval").expect("reports");
        assert!((loss - 30.0 / 350.0).abs() < 1e-6);
        assert_eq!(r.take(), None, "once");
        // No report in the next interval: no loss figure.
        r.peer();
        r.stream(1, 500, None);
        assert_eq!(r.take(), Some(None));
    }

    #[test]
    fn a_ceiling_holds_15_s_then_30_and_a_clean_climb_past_it_clears_it() {
        let t0 = Instant::now();
        let mut b = LossBwe::new(600_000);
        // Loss at 540k.
        b.report(t0, 0.25, 540_000, 1_540_000);
        assert_eq!(b.ceiling, Some((540_000, t0 + s(15))));
        // Clean at 190k: grows, but stays under 540k × 0.8 for 15 s.
        for i in 1..15 {
            let e = b.report(t0 + s(i), 0.0, 190_000, 540_000);
            assert!(e <= 432_000, "at {i} s: {e}");
        }
        assert_eq!(b.report(t0 + s(15), 0.0, 190_000, 540_000), 648_000);
        // Fails again: 30 s.
        b.report(t0 + s(16), 0.3, 540_000, 1_540_000);
        assert_eq!(b.ceiling, Some((540_000, t0 + s(46))));
        // Much later the same rate is carried cleanly: cleared.
        b.report(t0 + s(200), 0.0, 540_000, 1_540_000);
        assert_eq!(b.ceiling, None);
        assert_eq!(b.hold, CEILING_HOLD_MIN);
    }
}
