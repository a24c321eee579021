//! A subscriber's downlink, decided: from its estimates, its receiver
//! reports and its video slots, the layer each slot aims at and what its
//! BWE is told to pad up to and probe toward. Pure: [`Downlink::step`]
//! takes the inputs and gives the decisions; nothing here touches an
//! `Rtc`, a slot or a clock ([`super::simulcast`] gathers the inputs and
//! carries the decisions out).
//!
//! A slot starts on its source's lowest layer and climbs at most one layer
//! a second, on the lowest estimate of the last 2 s ([`SURE_WINDOW`]); it
//! moves down at once when the estimate falls or its layer stops at the
//! source (to the highest one still flowing; never below the lowest that
//! flows, so up when the publisher stopped its lowest itself). A climb
//! above what the subscriber's link carried lately is tried first
//! ([`TRIAL`]): its BWE pads up to what the climbed slots would take for
//! 2 s, and the climb happens only if the estimate held; a trial that the
//! estimate failed is not repeated for 4 s, then 8, up to 32. After a move
//! down for the estimate a slot does not climb for 4 s; after one that
//! only followed the source, the usual second. It never climbs before the
//! subscriber's first receiver report, nor within 3 s of one reporting
//! loss.
//!
//! Its estimate comes from one of three sources ([`Source`]): str0m's
//! send-side BWE on the subscriber's transport-wide feedback (TWCC), as
//! long as that can probe; else REMB, while the subscriber sends it
//! ([`REMB_STALE`]); else its receiver reports ([`super::lossbwe`]). Only
//! TWCC lets str0m pad, so a climb is tried first only on TWCC's estimate
//! (a trial without padding would test nothing and only wait).
//!
//! Must not: know the engine, the room or str0m (a slot's choice of
//! source is [`super::policy`]'s, the layers' rates [`super::layers`]'s).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::layers::{self, SlotWant};
use super::lossbwe::{LossBwe, Reports};
use super::streams::MAX_LAYERS;

/// A REMB counts as the subscriber's estimate until this long after it
/// (libwebrtc sends one at least each second while it receives); then the
/// receiver reports do.
pub(super) const REMB_STALE: Duration = Duration::from_secs(3);

/// Where a subscriber's downlink estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// str0m's send-side BWE on its transport-wide feedback.
    Twcc,
    /// Its REMB (`goog-remb`).
    Remb,
    /// Its receiver reports' loss and what it was sent ([`LossBwe`]).
    Loss,
}

impl Source {
    /// The name in the stats (`estimate_source`).
    pub(super) fn name(self) -> &'static str {
        match self {
            Source::Twcc => "twcc",
            Source::Remb => "remb",
            Source::Loss => "loss",
        }
    }
}

/// How long an estimate must have lasted for a climb to count on it
/// ([`Downlink::sure_estimate`]).
pub(super) const SURE_WINDOW: Duration = Duration::from_secs(2);
/// Estimates kept for [`Downlink::sure_estimate`] at most.
const LOWS_MAX: usize = 64;
/// A slot moves up at most one layer this often...
pub(super) const CLIMB_INTERVAL: Duration = Duration::from_secs(1);
/// ...and not for this long after a move down...
pub(super) const DOWN_HOLD: Duration = Duration::from_secs(4);
/// ...nor while the subscriber reports losing more than this share of what
/// it is sent (its receiver reports over the last stats interval): an
/// estimate raised by a probe that a token bucket's burst let through must
/// not move it onto a layer its link cannot carry.
const CLIMB_MAX_LOSS: f32 = 0.05;
/// A lossy report holds climbs this long (reports come each second; one
/// clean report amid random loss does not open the way). A falling
/// estimate holds them through the climb budget, the lowest estimate of
/// the last 2 s.
const CONGESTION_HOLD: Duration = Duration::from_secs(3);
/// A climb waits this long first, the subscriber's BWE padding up to the
/// rate it would take meanwhile, and happens only if the lowest estimate
/// since ([`SURE_WINDOW`]) still allows it and no receiver report showed
/// loss. An estimate above what the link carries now is a guess until the
/// link carries that much: str0m's grows while the lowest layer uses a
/// fraction of it, and a probe through a token bucket's burst lifts it
/// further (behind a 300 kbit/s bucket it sat at 0.4 to 1.4 Mbit/s for
/// seconds, and a climb onto a 0.35 Mbit/s layer on it froze the
/// subscriber's video for 2 to 4 s: its queue full, the lower layer's
/// keyframe stuck behind it). Padding for a while costs that link a little
/// delay instead.
pub(super) const TRIAL: Duration = Duration::from_secs(2);
/// After a trial that failed, the next waits this long, doubling with each
/// failure up to [`TRIAL_BACKOFF_MAX`] (a success starts over).
pub(super) const TRIAL_BACKOFF_MIN: Duration = Duration::from_secs(4);
const TRIAL_BACKOFF_MAX: Duration = Duration::from_secs(32);
/// What a subscriber's slots took without a lossy report is proven this
/// long after: a climb back up to it (its source's layer stopped a while,
/// its tile shrank and grew) is not tried first.
const PROVEN_FOR: Duration = Duration::from_secs(30);

/// One video slot as the step sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotIn {
    /// Higher goes first: (pinned, speaking, rendered area).
    pub(super) priority: (bool, bool, u32),
    /// Its source's layer rates by rank, lowest first; `n` of them.
    pub(super) rates: [u64; MAX_LAYERS],
    pub(super) n: usize,
    /// The highest rank its rendered size asks for; `None`: not shown.
    pub(super) max_rank: Option<usize>,
    /// The layer it shows and the one it aims at.
    pub(super) at: (Option<u8>, Option<u8>),
    /// When its aim last moved, and last moved down for the estimate.
    pub(super) moved: (Option<Instant>, Option<Instant>),
    /// The layer its shown one fell back to, if that stopped at the source
    /// (and it is not climbing to one that flows).
    pub(super) fallback: Option<usize>,
    /// The lowest layer still flowing at the source.
    pub(super) floor: usize,
}

/// What the step decided for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotOut {
    /// The layer to aim at (`None`: paused).
    pub(super) target: Option<u8>,
    /// Shed frame rate: the highest VP8 temporal layer to forward.
    pub(super) temporal: u8,
    /// A move down for the estimate (not one that followed the source):
    /// it holds the slot's climbs for [`DOWN_HOLD`].
    pub(super) down: bool,
}

/// What happened to the climb trial in a step (for the log and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trial {
    None,
    Started { rate: u64 },
    Waiting,
    Passed,
    Failed { backoff: Duration },
}

/// Everything a step decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Decisions {
    pub(super) slots: Vec<SlotOut>,
    /// The (minimum, desired) rates to give the BWE, when they moved.
    pub(super) bwe: Option<(u64, u64)>,
    pub(super) trial: Trial,
    /// The estimate and the sure one the step used (bps).
    pub(super) estimate: (u64, u64),
}

/// A subscriber's downlink state.
#[derive(Debug)]
pub(super) struct Downlink {
    /// Its downlink estimates (str0m's BWE from its TWCC feedback, bps) of
    /// the last [`SURE_WINDOW`] that no later one is below, oldest first:
    /// the front is their minimum (a climb's budget), the back the latest.
    lows: VecDeque<(Instant, u64)>,
    /// When it last showed congestion: a receiver report of more loss than
    /// a climb allows.
    congested_at: Option<Instant>,
    /// The highest rate (bps) its slots and audio took lately without a
    /// lossy report, and when; a climb up to it is not tried first.
    proven: Option<(u64, Instant)>,
    /// Since when a climb is on trial, the rate (bps) it pads up to
    /// meanwhile, and the climb budget then.
    trial: Option<(Instant, u64, u64)>,
    /// No trial before this (one failed), and the wait after the next
    /// failure.
    next_trial: Option<Instant>,
    trial_backoff: Duration,
    /// The minimum and desired rates its BWE was last given.
    bwe_set: Option<(u64, u64)>,
    /// Where the estimates in `lows` came from (the latest).
    source: Option<Source>,
    /// Whether str0m's BWE gives estimates (its last said it can probe).
    twcc: bool,
    /// When its last REMB came.
    remb_at: Option<Instant>,
    /// The estimate from its receiver reports, once the first came while
    /// no other source gave one.
    loss_bwe: Option<LossBwe>,
    /// What its slots and audio would take one layer up each (bps), as of
    /// the last step: how far the receiver reports' estimate may step.
    next_rate: u64,
    /// The share its last receiver reports lost (over one stats interval).
    report_loss: Option<f32>,
    /// The most its shown layers and audio took at a step since the last
    /// receiver reports (bps).
    shown_max: u64,
    /// This stats interval's receiver reports, as they come.
    pub(super) reports: Reports,
}

impl Default for Downlink {
    fn default() -> Self {
        Downlink {
            lows: VecDeque::new(),
            congested_at: None,
            proven: None,
            trial: None,
            next_trial: None,
            trial_backoff: TRIAL_BACKOFF_MIN,
            bwe_set: None,
            source: None,
            twcc: false,
            remb_at: None,
            loss_bwe: None,
            next_rate: 0,
            report_loss: None,
            shown_max: 0,
            reports: Reports::default(),
        }
    }
}

/// Whether `rank` takes a slot at `(current, target)` above both, by
/// choice: not up to `floor`, the lowest layer still flowing at the
/// source, which it must take.
fn climbs_by_choice(at: (Option<u8>, Option<u8>), rank: Option<usize>, floor: usize) -> bool {
    let (current, target) = at;
    let above = target.max(current).map(usize::from);
    current.is_some() && rank > above && rank > Some(floor)
}

impl Downlink {
    /// Its latest downlink estimate, bps.
    pub(super) fn estimate(&self) -> Option<u64> {
        self.lows.back().map(|&(_, v)| v)
    }

    /// Where its latest estimate came from.
    pub(super) fn source(&self) -> Option<Source> {
        self.source
    }

    /// The share of what it was sent that its last receiver reports lost.
    pub(super) fn report_loss(&self) -> Option<f32> {
        self.report_loss
    }

    /// str0m's estimate from its transport-wide feedback; `can_probe`
    /// false: str0m gives no more (the estimate falls back to REMB or the
    /// receiver reports).
    pub(super) fn note_twcc(&mut self, now: Instant, bps: u64, can_probe: bool) {
        self.twcc = can_probe;
        if can_probe {
            self.source = Some(Source::Twcc);
            self.note_estimate(now, bps);
        }
    }

    /// A REMB from it: its estimate unless TWCC gives one.
    pub(super) fn note_remb(&mut self, now: Instant, bps: u64) {
        self.remb_at = Some(now);
        if !self.twcc {
            self.source = Some(Source::Remb);
            self.note_estimate(now, bps);
        }
    }

    /// One stats interval's receiver reports: `loss` the share they lost
    /// (`None`: none came). Without TWCC or a recent REMB they make its
    /// estimate, from `initial` at first ([`LossBwe`]), with what its slots
    /// and audio took meanwhile (the most a step saw) for what it was
    /// sent. Whether it changed.
    pub(super) fn note_report(&mut self, now: Instant, initial: u64, loss: Option<f32>) -> bool {
        self.report_loss = loss;
        let sent = std::mem::take(&mut self.shown_max);
        let Some(loss) = loss else { return false };
        let remb = self
            .remb_at
            .is_some_and(|t| now.saturating_duration_since(t) < REMB_STALE);
        if self.twcc || remb {
            // Another source gives it; this one starts afresh when needed.
            self.loss_bwe = None;
            return false;
        }
        let next = self.next_rate.max(sent);
        let start = self.estimate().unwrap_or(initial);
        let bps = self
            .loss_bwe
            .get_or_insert_with(|| LossBwe::new(start))
            .report(now, loss, sent, next);
        self.source = Some(Source::Loss);
        self.note_estimate(now, bps);
        true
    }

    /// A new downlink estimate.
    pub(super) fn note_estimate(&mut self, now: Instant, bps: u64) {
        while self.lows.back().is_some_and(|&(_, v)| v >= bps) {
            self.lows.pop_back();
        }
        // Rising estimates (one entry each) come at most every few tens of
        // milliseconds; the bound only guards the memory.
        if self.lows.len() >= LOWS_MAX {
            self.lows.pop_front();
        }
        self.lows.push_back((now, bps));
        while self.lows.len() > 1
            && self
                .lows
                .front()
                .is_some_and(|&(t, _)| now.saturating_duration_since(t) > SURE_WINDOW)
        {
            self.lows.pop_front();
        }
    }

    /// The lowest estimate of the last [`SURE_WINDOW`] (the latest one if
    /// older): what a move onto a higher layer may count on. A probe that
    /// a token bucket's burst lets through lifts the estimate for a moment
    /// (behind 300 kbit/s, to 1.2 Mbit/s for 0.2 s); one that stays up for
    /// seconds is put to the test by a climb's trial.
    pub(super) fn sure_estimate(&self, now: Instant) -> Option<u64> {
        self.lows
            .iter()
            .find(|&&(t, _)| now.saturating_duration_since(t) <= SURE_WINDOW)
            .or(self.lows.back())
            .map(|&(_, v)| v)
    }

    /// The lowest estimate of about the last [`SURE_WINDOW`], as of the
    /// latest estimate (for the figures; no clock).
    pub(super) fn climb_estimate(&self) -> Option<u64> {
        self.lows.front().map(|&(_, v)| v)
    }

    /// One decision over the subscriber's video slots. `initial`: the BWE's
    /// start value (`None`: BWE off, every slot gets what its size asks
    /// for); `loss`: the share of what it was sent that its last receiver
    /// reports lost (`None` before the first); `audio`: what its audio
    /// slots take (bps).
    pub(super) fn step(
        &mut self,
        now: Instant,
        initial: Option<u64>,
        loss: Option<f32>,
        audio: u64,
        slots: &[SlotIn],
    ) -> Decisions {
        let (estimate, sure) = match initial {
            None => (u64::MAX, u64::MAX),
            Some(initial) => {
                let e = self.estimate().unwrap_or(initial);
                (e, self.sure_estimate(now).unwrap_or(e))
            }
        };
        // No climb before its first receiver report (nothing known of the
        // link but a start value), nor within CONGESTION_HOLD of a lossy
        // report.
        if loss.is_some_and(|l| l > CLIMB_MAX_LOSS) {
            self.congested_at = Some(now);
        }
        let held = loss.is_none()
            || self
                .congested_at
                .is_some_and(|t| now.saturating_duration_since(t) < CONGESTION_HOLD);
        let wants: Vec<SlotWant> = slots.iter().map(|s| want(s, held, now)).collect();
        let a = layers::allocate(
            estimate.saturating_sub(audio),
            sure.saturating_sub(audio),
            &wants,
        );
        // A climb above what a slot shows and aims at (not one the source
        // forces) is tried first (TRIAL), unless it only goes back up to
        // what the subscriber's link carried lately. While BWE is off there
        // is no estimate to doubt.
        let climbs = slots
            .iter()
            .zip(&a.ranks)
            .any(|(s, &rank)| climbs_by_choice(s.at, rank, s.floor));
        let wanted = a.used.saturating_add(audio);
        // What the layers shown now take: carried without a lossy report,
        // it is proven for PROVEN_FOR.
        let shown = slots
            .iter()
            .filter_map(|s| s.rates.get(usize::from(s.at.0?)).copied())
            .fold(audio, u64::saturating_add);
        self.shown_max = self.shown_max.max(shown);
        if held {
            self.proven = None;
        } else if self.proven.is_none_or(|(rate, at)| {
            shown >= rate || now.saturating_duration_since(at) >= PROVEN_FOR
        }) {
            self.proven = Some((shown, now));
        }
        let proven = self.proven.is_some_and(|(rate, _)| wanted <= rate);
        // What one layer up each would take: how far the receiver reports'
        // estimate may step (it cannot probe).
        self.next_rate = slots
            .iter()
            .filter_map(|s| {
                let top = s.max_rank?.min(s.n.saturating_sub(1));
                // A paused slot's next is its lowest layer.
                let next =
                    s.at.0
                        .map_or(s.floor, |c| (usize::from(c) + 1).min(top.max(c.into())));
                s.rates.get(next).copied()
            })
            .fold(audio, u64::saturating_add);
        // Only str0m's TWCC BWE pads: without it a trial tests nothing.
        let pads = self.source.is_none_or(|s| s == Source::Twcc);
        let (commit, trial) = match self.trial {
            _ if !climbs || proven || initial.is_none() || !pads => {
                // A trial whose climb no longer fits because the estimate
                // fell failed: the next one waits, twice as long each time
                // (padding costs the link).
                let ended = self.trial.take();
                let mut note = Trial::None;
                if !climbs && ended.is_some_and(|(_, _, before)| sure < before) {
                    note = Trial::Failed {
                        backoff: self.trial_backoff,
                    };
                    self.next_trial = Some(now + self.trial_backoff);
                    self.trial_backoff = (self.trial_backoff * 2).min(TRIAL_BACKOFF_MAX);
                }
                (true, note)
            }
            Some((since, rate, _)) if now.saturating_duration_since(since) >= TRIAL => {
                // The link carried the padding: the climbs after this one,
                // up to what was tried, need no trial.
                self.trial = None;
                self.trial_backoff = TRIAL_BACKOFF_MIN;
                self.proven = Some((rate, now));
                (true, Trial::Passed)
            }
            Some(_) => (false, Trial::Waiting),
            None if self.next_trial.is_some_and(|t| now < t) => (false, Trial::None),
            None => {
                // Try what the slots would climb to over the next seconds
                // (the pacing aside), not just the next layer: padding
                // only to the next layer let 1 climb of 10 through behind
                // 300 kbit/s, and the estimate stayed high. (Another 15 %
                // on top coincided with the unshaped subscriber's estimate
                // falling after its climbs, in 20 runs on this shared
                // host; it is left out until that is understood.)
                let unpaced: Vec<SlotWant> = wants
                    .iter()
                    .map(|w| SlotWant {
                        cap: usize::MAX,
                        ..*w
                    })
                    .collect();
                let rate = layers::allocate(
                    estimate.saturating_sub(audio),
                    sure.saturating_sub(audio),
                    &unpaced,
                )
                .used
                .saturating_add(audio)
                .max(wanted);
                self.trial = Some((now, rate, sure));
                (false, Trial::Started { rate })
            }
        };
        let outs = slots
            .iter()
            .zip(&a.ranks)
            .zip(&a.reduced)
            .map(|((s, &rank), &reduced)| {
                let (current, aim) = s.at;
                // A climb on trial waits where it is (one the source forces
                // does not).
                let target = if !commit && climbs_by_choice(s.at, rank, s.floor) {
                    aim
                } else {
                    rank.and_then(|r| u8::try_from(r).ok())
                };
                // A move down holds climbs (the estimate overshoots after
                // one), unless it only followed the source: a layer that
                // stopped and comes back (a publisher's reconfiguration, a
                // short stall) is climbed to again at the usual pace.
                let followed_source = s.fallback.is_some() && target.map(usize::from) == s.fallback;
                SlotOut {
                    target,
                    // Shed frame rate at once (VP8 temporal layers, from
                    // the next base-layer frame) while a move down waits
                    // for the lower layer's keyframe, or while the lowest
                    // layer does not fit.
                    temporal: if reduced || target < current {
                        0
                    } else {
                        u8::MAX
                    },
                    down: target != aim && target < current && !followed_source,
                }
            })
            .collect();
        Decisions {
            slots: outs,
            bwe: initial.and_then(|_| self.bwe(audio, &a)),
            trial,
            estimate: (estimate, sure),
        }
    }

    /// What the BWE is to pad up to and probe toward, when that moved by
    /// more than a tenth: toward what the simulcast slots would take at the
    /// sizes they are shown, with the headroom a move up needs, on top of
    /// what is used. Without simulcast there is nothing to probe for
    /// (probes and padding cost every subscriber's link and the shard's
    /// CPU). While a climb is on trial, the BWE pads up to what it would
    /// take (never above its estimate): a link that cannot carry it shows
    /// delay or loss, and the estimate falls before the climb is made.
    fn bwe(&mut self, audio: u64, a: &layers::Allocation) -> Option<(u64, u64)> {
        let desired = if a.desired == 0 {
            0
        } else {
            a.fixed
                .saturating_add(audio)
                .saturating_add(a.desired.saturating_mul(5) / 4)
        };
        let minimum = self.trial.map_or(0, |(_, rate, _)| rate);
        let moved = self.bwe_set.is_none_or(|(m, d)| {
            desired.abs_diff(d) > d / 10
                || minimum.abs_diff(m) > m / 10
                || (m == 0) != (minimum == 0)
        });
        moved.then(|| {
            self.bwe_set = Some((minimum, desired));
            (minimum, desired)
        })
    }
}

/// A slot's part in the allocation: climb one layer at a time, a second
/// apart, and not for a while after a move down (the estimate overshoots
/// after one); down to the layer its shown one fell back to whatever the
/// pacing says; never below the lowest layer that flows.
fn want(s: &SlotIn, held: bool, now: Instant) -> SlotWant {
    let (last_move, last_down) = s.moved;
    let settled = !held
        && last_move.is_none_or(|t| now.saturating_duration_since(t) >= CLIMB_INTERVAL)
        && last_down.is_none_or(|t| now.saturating_duration_since(t) >= DOWN_HOLD);
    let (current, target) = (s.at.0.map(usize::from), s.at.1.map(usize::from));
    let cap = match (current, target) {
        _ if let Some(f) = s.fallback => f,
        (None, _) => 0,
        (Some(c), Some(t)) if t > c => t,
        (Some(c), _) if settled => c + 1,
        (Some(c), _) => c,
    }
    .max(s.floor);
    SlotWant {
        priority: s.priority,
        rates: s.rates,
        n: s.n,
        max_rank: s.max_rank.map(|r| r.max(s.floor)),
        cap,
        current,
        min_rank: s.floor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATES: [u64; MAX_LAYERS] = [150_000, 500_000, 1_500_000, 0];
    const FAST: Option<u64> = Some(3_000_000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A video slot of a three-layer source, shown large, at `at`.
    fn slot(at: (Option<u8>, Option<u8>)) -> SlotIn {
        SlotIn {
            priority: (false, false, 1280 * 720),
            rates: RATES,
            n: 3,
            max_rank: Some(2),
            at,
            moved: (None, None),
            fallback: None,
            floor: 0,
        }
    }

    /// Carries a step's decision out on the inputs, as the engine does.
    fn apply(s: &mut SlotIn, out: SlotOut, now: Instant) {
        if s.at.1 != out.target {
            s.at.1 = out.target;
            s.moved.0 = Some(now);
            if out.down {
                s.moved.1 = Some(now);
            }
        }
    }

    #[test]
    fn a_climb_counts_on_the_lowest_estimate_of_the_last_two_seconds() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        assert_eq!(d.sure_estimate(t0), None);
        d.note_estimate(t0, 300_000);
        // A probe lifts it for a moment: the climb still counts on 300k.
        d.note_estimate(t0 + ms(500), 1_200_000);
        d.note_estimate(t0 + ms(700), 400_000);
        assert_eq!(d.estimate(), Some(400_000));
        assert_eq!(d.sure_estimate(t0 + ms(1900)), Some(300_000));
        // 2 s on, the start has left the window: the lowest since is 400k.
        assert_eq!(d.sure_estimate(t0 + ms(2100)), Some(400_000));
        // A fall counts at once.
        d.note_estimate(t0 + ms(2200), 250_000);
        assert_eq!(d.sure_estimate(t0 + ms(2200)), Some(250_000));
        // Long after the last estimate: that one.
        assert_eq!(d.sure_estimate(t0 + ms(60_000)), Some(250_000));
        // Rising estimates keep one entry each, within the bound.
        for i in 0..1000u64 {
            d.note_estimate(t0 + ms(60_000 + i), 250_000 + i);
        }
        assert!(d.lows.len() <= LOWS_MAX);
        assert_eq!(
            d.sure_estimate(t0 + ms(61_000)),
            Some(250_000 + 1000 - LOWS_MAX as u64)
        );
    }

    #[test]
    fn a_climb_by_choice_is_above_both_the_shown_and_the_aimed_layer_and_the_floor() {
        // Shows 0, aims at 0: 1 is a climb; 0 is none.
        assert!(climbs_by_choice((Some(0), Some(0)), Some(1), 0));
        assert!(!climbs_by_choice((Some(0), Some(0)), Some(0), 0));
        assert!(!climbs_by_choice((Some(0), Some(0)), None, 0));
        // Already aiming at 2: 2 is no new climb, 3 is.
        assert!(!climbs_by_choice((Some(0), Some(2)), Some(2), 0));
        assert!(climbs_by_choice((Some(0), Some(2)), Some(3), 0));
        // Up to the lowest layer still flowing is forced, not chosen.
        assert!(!climbs_by_choice((Some(0), Some(0)), Some(1), 1));
        assert!(climbs_by_choice((Some(0), Some(0)), Some(2), 1));
        // A slot that shows nothing yet starts wherever: no climb.
        assert!(!climbs_by_choice((None, Some(0)), Some(2), 0));
    }

    #[test]
    fn no_climb_before_the_first_receiver_report_nor_for_3_s_after_a_lossy_one() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let s = [slot((Some(0), Some(0)))];
        let out = d.step(t0, FAST, None, 0, &s);
        assert_eq!(out.slots[0].target, Some(0), "no report yet");
        assert_eq!(out.trial, Trial::None);
        let out = d.step(t0, FAST, Some(0.10), 0, &s);
        assert_eq!(out.slots[0].target, Some(0), "10 % lost");
        let out = d.step(t0 + ms(2900), FAST, Some(0.0), 0, &s);
        assert_eq!(out.slots[0].target, Some(0), "within the hold");
        assert_eq!(out.trial, Trial::None);
        let out = d.step(t0 + ms(3000), FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::Started { rate: 1_500_000 });
    }

    #[test]
    fn a_climb_above_what_the_link_carried_waits_for_its_trial_then_goes_one_layer() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let mut s = [slot((Some(0), Some(0)))];
        let out = d.step(t0, FAST, Some(0.0), 0, &s);
        // It pads up to what the slot would climb to, all of it.
        assert_eq!(out.trial, Trial::Started { rate: 1_500_000 });
        assert_eq!(out.slots[0].target, Some(0), "the climb waits");
        assert_eq!(out.bwe.map(|(min, _)| min), Some(1_500_000));
        let out = d.step(t0 + ms(1000), FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::Waiting);
        assert_eq!(out.slots[0].target, Some(0));
        let now = t0 + TRIAL;
        let out = d.step(now, FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::Passed);
        assert_eq!(out.slots[0].target, Some(1), "one layer at a time");
        assert!(!out.slots[0].down);
        apply(&mut s[0], out.slots[0], now);
        s[0].at.0 = Some(1);
        // The next climb, within what the trial proved, needs none, but
        // waits a second after the last move.
        let out = d.step(now + ms(500), FAST, Some(0.0), 0, &s);
        assert_eq!(out.slots[0].target, Some(1));
        let out = d.step(now + CLIMB_INTERVAL, FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::None);
        assert_eq!(out.slots[0].target, Some(2));
    }

    #[test]
    fn a_failed_trial_is_not_tried_again_for_4_s_then_8() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let s = [slot((Some(0), Some(0)))];
        let started = |out: &Decisions| matches!(out.trial, Trial::Started { .. });
        assert!(started(&d.step(t0, FAST, Some(0.0), 0, &s)));
        // The estimate falls under the next layer: the trial failed.
        d.note_estimate(t0 + ms(1000), 300_000);
        let out = d.step(t0 + ms(1000), FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::Failed { backoff: ms(4000) });
        assert_eq!(out.slots[0].target, Some(0));
        // It recovers at once, but the sure estimate waits 2 s, the next
        // trial 4 s.
        d.note_estimate(t0 + ms(1100), 3_000_000);
        for at in [1500, 3500, 4900] {
            let out = d.step(t0 + ms(at), FAST, Some(0.0), 0, &s);
            assert!(!started(&out), "at {at} ms: {:?}", out.trial);
            assert_eq!(out.slots[0].target, Some(0));
        }
        assert!(started(&d.step(t0 + ms(5000), FAST, Some(0.0), 0, &s)));
        d.note_estimate(t0 + ms(6000), 300_000);
        let out = d.step(t0 + ms(6000), FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::Failed { backoff: ms(8000) });
    }

    #[test]
    fn a_layer_that_stopped_at_the_source_is_left_at_once_and_holds_nothing() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let mut s = [slot((Some(2), Some(2)))];
        s[0].fallback = Some(1);
        // Within the climb pacing, even before any report.
        s[0].moved = (Some(t0), None);
        let out = d.step(t0, FAST, None, 0, &s);
        assert_eq!(out.slots[0].target, Some(1));
        assert!(!out.slots[0].down, "it followed the source");
        assert_eq!(out.slots[0].temporal, 0, "frame rate shed until the switch");
    }

    #[test]
    fn a_move_down_for_the_estimate_holds_climbs_for_4_s() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let mut s = [slot((Some(2), Some(2)))];
        d.note_estimate(t0, 700_000);
        let out = d.step(t0, FAST, Some(0.0), 0, &s);
        assert_eq!(out.slots[0].target, Some(1));
        assert!(out.slots[0].down);
        apply(&mut s[0], out.slots[0], t0);
        s[0].at.0 = Some(1);
        d.note_estimate(t0 + ms(100), 3_000_000);
        for at in [2500, 3900] {
            let out = d.step(t0 + ms(at), FAST, Some(0.0), 0, &s);
            assert_eq!(out.slots[0].target, Some(1), "at {at} ms");
        }
        // The link carried 2 before: back up with no trial.
        let out = d.step(t0 + DOWN_HOLD, FAST, Some(0.0), 0, &s);
        assert_eq!(out.trial, Trial::None);
        assert_eq!(out.slots[0].target, Some(2));
    }

    /// A clean receiver report, `sent` bps sent since the last.
    fn note(d: &mut Downlink, now: Instant, sent: u64) -> bool {
        d.shown_max = sent;
        d.note_report(now, 300_000, Some(0.0))
    }

    #[test]
    fn twcc_wins_over_remb_and_either_over_the_receiver_reports() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        // Receiver reports alone: the loss-based estimate, from the start
        // value.
        assert!(note(&mut d, t0, 200_000));
        assert_eq!(d.source(), Some(Source::Loss));
        assert_eq!(d.estimate(), Some(324_000));
        // A REMB takes over, and the reports stop counting while it lasts.
        d.note_remb(t0 + ms(100), 900_000);
        assert_eq!(
            (d.source(), d.estimate()),
            (Some(Source::Remb), Some(900_000))
        );
        assert!(!note(&mut d, t0 + ms(1000), 200_000));
        assert_eq!(d.report_loss(), Some(0.0));
        // TWCC takes over from the REMB.
        d.note_twcc(t0 + ms(1100), 2_000_000, true);
        d.note_remb(t0 + ms(1200), 500_000);
        assert_eq!(
            (d.source(), d.estimate()),
            (Some(Source::Twcc), Some(2_000_000))
        );
        // Until str0m says it can probe no more: the REMB again...
        d.note_twcc(t0 + ms(1300), 2_000_000, false);
        d.note_remb(t0 + ms(1400), 600_000);
        assert_eq!(
            (d.source(), d.estimate()),
            (Some(Source::Remb), Some(600_000))
        );
        // ...and once that is stale, the reports, from the last estimate.
        let later = t0 + ms(1400) + REMB_STALE;
        assert!(note(&mut d, later, 200_000));
        // (Twice what was sent caps it.)
        assert_eq!(
            (d.source(), d.estimate()),
            (Some(Source::Loss), Some(400_000))
        );
        assert_eq!(Source::Loss.name(), "loss");
    }

    #[test]
    fn without_twcc_a_climb_is_not_tried_first_and_may_step_one_layer_up() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let s = [slot((Some(0), Some(0)))];
        // The step learns what one layer up takes: 500k.
        d.step(t0, FAST, None, 0, &s);
        assert_eq!(d.next_rate, 500_000);
        for i in 1..=2 {
            note(&mut d, t0 + ms(1000 * i), 150_000);
        }
        assert_eq!(d.estimate(), Some(600_000), "the next layer and 20 %");
        // No padding to test it with: no trial, and the sure estimate waits
        // its 2 s.
        let out = d.step(t0 + ms(3000), FAST, Some(0.0), 0, &s);
        assert_eq!((out.trial, out.slots[0].target), (Trial::None, Some(0)));
        let out = d.step(t0 + ms(4000), FAST, Some(0.0), 0, &s);
        assert_eq!((out.trial, out.slots[0].target), (Trial::None, Some(1)));
    }

    #[test]
    fn the_bwe_is_told_only_of_a_change_over_a_tenth_and_not_at_all_when_off() {
        let t0 = Instant::now();
        let mut d = Downlink::default();
        let s = [slot((Some(0), Some(0)))];
        let first = d.step(t0, FAST, None, 0, &s).bwe;
        // What the slot would take at its size, and a quarter more.
        assert_eq!(first, Some((0, 1_500_000 * 5 / 4)));
        assert_eq!(d.step(t0, FAST, None, 0, &s).bwe, None, "unchanged");
        // 5 % more audio: under a tenth.
        assert_eq!(d.step(t0, FAST, None, 90_000, &s).bwe, None);
        assert!(d.step(t0, FAST, None, 300_000, &s).bwe.is_some());
        let mut off = Downlink::default();
        let out = off.step(t0, None, Some(0.0), 0, &s);
        assert_eq!(out.bwe, None);
        assert_eq!(out.estimate, (u64::MAX, u64::MAX));
        assert_eq!(out.trial, Trial::None, "no estimate to doubt");
    }
}
