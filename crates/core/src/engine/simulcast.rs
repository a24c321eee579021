//! The engine acting on simulcast: each subscriber's estimate turned into a
//! target layer per slot ([`layers::allocate`]), the BWE told what the
//! slots would take (so it probes toward it), and dynacast: a publisher is
//! told which of its layers some subscriber (on any shard) takes, so the
//! others pause at the source (and, when the ones it was told to send go
//! silent, one paused layer more each second, in case it stopped them
//! itself).
//!
//! A slot starts on its source's lowest layer and climbs at most one layer
//! a second (the new layer's keyframe is requested at once; the current one
//! flows until it comes), on the lowest estimate of the last 2 s
//! ([`super::participant::SURE_WINDOW`]); it moves down at once when the
//! estimate falls or its layer stops at the source (to the highest one
//! still flowing; never below the lowest that flows, so up when the
//! publisher stopped its lowest itself). A climb above what the
//! subscriber's link carried lately is tried first ([`TRIAL`]): its BWE
//! pads up to what the climbed slots would take for 2 s, and the climb
//! happens only if the estimate held; a trial that the estimate failed is
//! not repeated for 4 s, then 8, up to 32. After a move down for the
//! estimate a slot does not climb for 4 s; after one that only followed
//! the source, the usual second. It never climbs before the subscriber's
//! first receiver report, nor within 3 s of one reporting loss. Runs when
//! a subscriber's estimate, slots or views change, and on the room tick.
//! Must not: forward media (the slot switches on a keyframe in
//! [`super::forward`]) or decide what a slot shows ([`super::policy`]).

use std::time::{Duration, Instant};

use str0m::bwe::Bitrate;
use str0m::media::MediaKind;

use super::io::guarded;
use super::layers::{self, AUDIO_BPS, SlotWant};
use super::slot::Slot;
use super::{Engine, MAX_LAYERS, PeerMsg};
use crate::events::RoomEvent;
use crate::ids::{LayerKey, ParticipantId, TrackKey};

/// A layer nobody takes stays on at the publisher this long (a subscriber
/// that moves between layers does not make it flap; Chromium takes one to
/// four seconds to resume an encoding).
const DYNACAST_HOLD: Duration = Duration::from_secs(5);
/// A slot moves up at most one layer this often...
const CLIMB_INTERVAL: Duration = Duration::from_secs(1);
/// ...and not for this long after a move down...
const DOWN_HOLD: Duration = Duration::from_secs(4);
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
/// since (see [`super::participant::SURE_WINDOW`]) still allows it and no
/// receiver report showed loss. An estimate above what the link carries
/// now is a guess until the link carries that much: str0m's grows while
/// the lowest layer uses a fraction of it, and a probe through a token
/// bucket's burst lifts it further (behind a 300 kbit/s bucket it sat at
/// 0.4 to 1.4 Mbit/s for seconds, and a climb onto a 0.35 Mbit/s layer on
/// it froze the subscriber's video for 2 to 4 s: its queue full, the lower
/// layer's keyframe stuck behind it). Padding for a while costs that link
/// a little delay instead.
const TRIAL: Duration = Duration::from_secs(2);
/// After a trial that failed, the next waits this long, doubling with each
/// failure up to [`TRIAL_BACKOFF_MAX`] (a success starts over).
pub(super) const TRIAL_BACKOFF_MIN: Duration = Duration::from_secs(4);
const TRIAL_BACKOFF_MAX: Duration = Duration::from_secs(32);
/// What a subscriber's slots took without a lossy report is proven this
/// long after: a climb back up to it (its source's layer stopped a while,
/// its tile shrank and grew) is not tried first.
const PROVEN_FOR: Duration = Duration::from_secs(30);
/// A simulcast source that sends nothing on the layers it was told to send
/// for this long gets a paused layer resumed (see [`Engine::dynacast`]).
const PROBE_SILENCE: Duration = Duration::from_secs(1);

/// Whether `rank` takes `slot` above both the layer it shows and the one
/// it aims at, by choice: not up to `floor`, the lowest layer still flowing
/// at the source, which it must take.
fn climbs_by_choice(slot: &Slot, rank: Option<usize>, floor: usize) -> bool {
    let above = slot.target.max(slot.current).map(usize::from);
    slot.current.is_some() && rank > above && rank > Some(floor)
}

impl Engine {
    /// Chooses a layer for each of `id`'s video slots from its estimate.
    pub(super) fn allocate(&mut self, now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let speaker = self.rooms.get(&p.room).and_then(|r| r.speaker);
        let (estimate, sure) = match self.settings.bwe_initial_bps {
            None => (u64::MAX, u64::MAX),
            Some(initial) => {
                let e = p.estimate().unwrap_or(initial);
                (e, p.sure_estimate(now).unwrap_or(e))
            }
        };
        let audio = p
            .slots
            .iter()
            .filter(|s| s.kind == MediaKind::Audio && s.source.is_some())
            .count() as u64
            * AUDIO_BPS;
        // No climb before its first receiver report (nothing known of the
        // link but a start value), nor within CONGESTION_HOLD of a lossy
        // report.
        let loss = p.stats.egress_loss;
        if loss.is_some_and(|l| l > CLIMB_MAX_LOSS) {
            p.congested_at = Some(now);
        }
        let held = loss.is_none()
            || p.congested_at
                .is_some_and(|t| now.saturating_duration_since(t) < CONGESTION_HOLD);
        let mut wants = Vec::new();
        // Each want's slot, and the layer its shown one fell back to if
        // that stopped at the source.
        let mut at = Vec::new();
        for (i, slot) in p.slots.iter().enumerate() {
            let Some(src) = slot.source.filter(|_| slot.kind == MediaKind::Video) else {
                continue;
            };
            let source = self.sources.get(&src);
            let (rates, n) = source.map_or(([0; MAX_LAYERS], 1), |s| s.rates());
            let current = slot.current.map(usize::from);
            // Climb one layer at a time, a second apart, and not for a
            // while after a move down (the estimate overshoots after one).
            let settled = !held
                && slot
                    .last_move
                    .is_none_or(|t| now.saturating_duration_since(t) >= CLIMB_INTERVAL)
                && slot
                    .last_down
                    .is_none_or(|t| now.saturating_duration_since(t) >= DOWN_HOLD);
            // The layer it shows stopped at the source while a lower one
            // flows: down to that one now, whatever the climb pacing says
            // (the estimate may still give less), unless it is climbing to
            // a layer that flows (that one's keyframe ends the wait).
            let target = slot.target.map(usize::from);
            let stopped = current.zip(source).and_then(|(c, s)| {
                let f = s.fallback(c)?;
                let climbing = target.is_some_and(|t| t > c && s.flowing(t));
                (!climbing).then_some(f)
            });
            // Nothing below the lowest layer that flows: when the
            // publisher stopped its lowest itself (dynacast never pauses
            // it), up to the next one, above the pacing and the size.
            let floor = source.map_or(0, |s| s.lowest_flowing());
            let cap = match (current, target) {
                _ if let Some(f) = stopped => f,
                (None, _) => 0,
                (Some(c), Some(t)) if t > c => t,
                (Some(c), _) if settled => c + 1,
                (Some(c), _) => c,
            }
            .max(floor);
            let v = slot.view;
            let max_rank = (v.width > 0 && v.height > 0).then(|| {
                let needed = source.map_or(0, |s| s.rank_for(v.width));
                needed.min(usize::from(v.max_rank)).max(floor)
            });
            wants.push(SlotWant {
                priority: (
                    slot.pinned,
                    speaker == Some(src.participant),
                    u32::from(v.width) * u32::from(v.height),
                ),
                rates,
                n,
                max_rank,
                cap,
                current,
                min_rank: floor,
            });
            at.push((i, stopped, floor, rates));
        }
        let a = layers::allocate(
            estimate.saturating_sub(audio),
            sure.saturating_sub(audio),
            &wants,
        );
        // A climb above what a slot shows and aims at (not one the source
        // forces) is tried first (TRIAL), unless it only goes back up to
        // what the subscriber's link carried lately. While BWE is off there
        // is no estimate to doubt.
        let climbs = at.iter().zip(&a.ranks).any(|(&(i, _, floor, _), &rank)| {
            p.slots
                .get(i)
                .is_some_and(|s| climbs_by_choice(s, rank, floor))
        });
        let wanted = a.used.saturating_add(audio);
        // What the layers shown now take: carried without a lossy report,
        // it is proven for PROVEN_FOR.
        let shown = at
            .iter()
            .filter_map(|&(i, _, _, rates)| {
                let c = p.slots.get(i)?.current?;
                rates.get(usize::from(c)).copied()
            })
            .fold(audio, u64::saturating_add);
        if held {
            p.proven = None;
        } else if p.proven.is_none_or(|(rate, at)| {
            shown >= rate || now.saturating_duration_since(at) >= PROVEN_FOR
        }) {
            p.proven = Some((shown, now));
        }
        let proven = p.proven.is_some_and(|(rate, _)| wanted <= rate);
        let commit = match p.trial {
            _ if !climbs || proven || self.settings.bwe_initial_bps.is_none() => {
                // A trial whose climb no longer fits because the estimate
                // fell failed: the next one waits, twice as long each time
                // (padding costs the link).
                let ended = p.trial.take();
                if !climbs && ended.is_some_and(|(_, _, before)| sure < before) {
                    tracing::debug!(participant = %id, estimate, sure, backoff = ?p.trial_backoff, "climb trial failed");
                    p.next_trial = Some(now + p.trial_backoff);
                    p.trial_backoff = (p.trial_backoff * 2).min(TRIAL_BACKOFF_MAX);
                }
                true
            }
            Some((since, rate, _)) if now.saturating_duration_since(since) >= TRIAL => {
                // The link carried the padding: the climbs after this one,
                // up to what was tried, need no trial.
                p.trial = None;
                p.trial_backoff = TRIAL_BACKOFF_MIN;
                p.proven = Some((rate, now));
                true
            }
            Some(_) => false,
            None if p.next_trial.is_some_and(|t| now < t) => false,
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
                tracing::debug!(participant = %id, rate, estimate, sure, "climb trial starts");
                p.trial = Some((now, rate, sure));
                false
            }
        };
        for (((i, fallback, floor, rates), rank), reduced) in
            at.into_iter().zip(a.ranks).zip(a.reduced)
        {
            let Some(slot) = p.slots.get_mut(i) else {
                continue;
            };
            // A climb on trial waits where it is (one the source forces
            // does not).
            let target = if !commit && climbs_by_choice(slot, rank, floor) {
                slot.target
            } else {
                rank.and_then(|r| u8::try_from(r).ok())
            };
            // Shed frame rate at once (VP8 temporal layers, from the next
            // base-layer frame) while a move down waits for the lower
            // layer's keyframe, or while the lowest layer does not fit.
            slot.temporal.want = if reduced || target < slot.current {
                0
            } else {
                u8::MAX
            };
            let fresh = std::mem::take(&mut slot.fresh);
            if slot.target != target {
                tracing::debug!(
                    participant = %id,
                    mid = %slot.mid,
                    current = ?slot.current,
                    from = ?slot.target,
                    to = ?target,
                    estimate,
                    sure,
                    ?rates,
                    "slot target moves"
                );
                slot.target = target;
                slot.last_move = Some(now);
                // A move down holds climbs (the estimate overshoots after
                // one), unless it only followed the source: a layer that
                // stopped and comes back (a publisher's reconfiguration,
                // a short stall) is climbed to again at the usual pace.
                let followed_source = fallback.is_some() && target.map(usize::from) == fallback;
                if target < slot.current && !followed_source {
                    slot.last_down = Some(now);
                }
                if target.is_none() && slot.current.take().is_some() {
                    self.io.counters.layer_pauses += 1;
                }
            } else if !fresh {
                continue;
            }
            if let (Some(track), Some(layer)) = (slot.source, target)
                && slot.current != Some(layer)
            {
                self.io.want_keyframe(LayerKey { track, layer });
            }
        }
        if self.settings.bwe_initial_bps.is_none() {
            return;
        }
        // Probe toward what the simulcast slots would take at the sizes they
        // are shown, with the headroom a move up needs, on top of what is
        // used. Without simulcast there is nothing to probe for (probes and
        // padding cost every subscriber's link and the shard's CPU).
        let desired = if a.desired == 0 {
            0
        } else {
            a.fixed
                .saturating_add(audio)
                .saturating_add(a.desired.saturating_mul(5) / 4)
        };
        // While a climb is on trial, the BWE pads up to what it would take
        // (never above its estimate): a link that cannot carry it shows
        // delay or loss, and the estimate falls before the climb is made.
        let minimum = p.trial.map_or(0, |(_, rate, _)| rate);
        let moved = p.bwe_set.is_none_or(|(m, d)| {
            desired.abs_diff(d) > d / 10
                || minimum.abs_diff(m) > m / 10
                || (m == 0) != (minimum == 0)
        });
        if moved {
            p.bwe_set = Some((minimum, desired));
            let _ = guarded(&mut self.io, id, &mut p.poisoned, |_| {
                p.rtc
                    .bwe()
                    .set_bitrate(Bitrate::bps(minimum), Bitrate::bps(desired));
            });
        }
    }

    /// The room tick's share: roll the layer rates, reallocate every local
    /// subscriber, and settle dynacast.
    pub(super) fn tick_layers(&mut self, now: Instant) {
        self.sources.roll(now);
        let ids: Vec<ParticipantId> = self.participants.keys().copied().collect();
        for &id in &ids {
            self.allocate(now, id);
        }
        self.dynacast(now);
    }

    /// What subscribers here take of each source: a bit per layer.
    fn local_demand(&self) -> super::IdMap<TrackKey, u32> {
        let mut demand: super::IdMap<TrackKey, u32> = super::IdMap::default();
        for p in self.participants.values() {
            for s in p.slots.iter().filter(|s| s.kind == MediaKind::Video) {
                let Some(src) = s.source else { continue };
                let mut mask = 0u32;
                for l in [s.current, s.target].into_iter().flatten() {
                    mask |= 1 << l;
                }
                *demand.entry(src).or_default() |= mask;
            }
        }
        demand
    }

    /// Tells peer shards what subscribers here need of their publishers,
    /// and local publishers which layers anyone needs.
    fn dynacast(&mut self, now: Instant) {
        let demand = self.local_demand();
        // Remote publishers: send changes (and withdraw what is gone).
        let mut msgs = Vec::new();
        for (&track, &mask) in &demand {
            if self.participants.contains_key(&track.participant) {
                continue;
            }
            if self.demand_sent.get(&track) != Some(&mask) {
                msgs.push((track, mask));
            }
        }
        for &track in self.demand_sent.keys() {
            if !demand.contains_key(&track) {
                msgs.push((track, 0));
            }
        }
        for (track, mask) in msgs {
            if mask == 0 {
                self.demand_sent.remove(&track);
            } else {
                self.demand_sent.insert(track, mask);
            }
            let shard = self
                .rooms
                .values()
                .find_map(|r| r.member(track.participant))
                .map(|m| m.info.shard);
            if let Some(shard) = shard {
                self.io.out.peers.push((
                    shard,
                    PeerMsg::LayerDemand {
                        track,
                        from: self.shard,
                        mask,
                    },
                ));
            }
        }
        // Peer shards that left a publisher's room need nothing of it.
        let rooms = &self.rooms;
        let participants = &self.participants;
        self.demand_remote.retain(|(track, shard), _| {
            participants
                .get(&track.participant)
                .and_then(|p| rooms.get(&p.room))
                .is_some_and(|r| r.peer_shards.contains(shard))
        });
        // Local publishers: which layers to keep on.
        let mut notices = Vec::new();
        for (&pid, p) in self.participants.iter_mut() {
            for t in p.tracks.iter_mut().filter(|t| t.rids.len() > 1) {
                let key = TrackKey {
                    participant: pid,
                    mid: t.mid,
                };
                let mut needed = demand.get(&key).copied().unwrap_or(0);
                for ((track, _), mask) in &self.demand_remote {
                    if *track == key {
                        needed |= mask;
                    }
                }
                // Everything it was told to send has gone silent while some
                // layers are paused: it may have stopped them itself (an
                // app's `setParameters`) and would send a paused one. Resume
                // the lowest paused layer, one more each PROBE_SILENCE, and
                // keep them all on while the silence lasts; once one flows,
                // its subscribers move to it (nothing below the lowest layer
                // that flows is taken) and the hold lets the rest go. A muted camera costs one
                // notice per layer.
                let n = t.rids.len();
                let silent = self
                    .sources
                    .get(&key)
                    .is_none_or(|s| s.silent_for(now) >= PROBE_SILENCE);
                if silent {
                    for (l, last) in t.last_needed.iter_mut().enumerate().take(n) {
                        if t.active & (1 << l) != 0 {
                            *last = Some(now);
                        }
                    }
                    let due = t
                        .probed_at
                        .is_none_or(|at| now.saturating_duration_since(at) >= PROBE_SILENCE);
                    if let Some(l) = (0..n).find(|l| t.active & (1 << l) == 0)
                        && due
                        && let Some(last) = t.last_needed.get_mut(l)
                    {
                        *last = Some(now);
                        t.probed_at = Some(now);
                    }
                }
                // The lowest layer always flows: a new subscriber starts at
                // once, and a browser takes seconds to resume a layer.
                let mut active = 1u32;
                for (l, last) in t.last_needed.iter_mut().enumerate().take(t.rids.len()) {
                    if needed & (1 << l) != 0 {
                        *last = Some(now);
                    }
                    if last.is_some_and(|at| now.saturating_duration_since(at) < DYNACAST_HOLD) {
                        active |= 1 << l;
                    }
                }
                if active != t.active {
                    t.active = active;
                    let rids = t
                        .rids
                        .iter()
                        .enumerate()
                        .filter(|(l, _)| active & (1 << l) != 0)
                        .map(|(_, r)| r.to_string())
                        .collect();
                    notices.push((
                        pid,
                        RoomEvent::Layers {
                            mid: t.mid.to_string(),
                            active: rids,
                        },
                    ));
                }
            }
        }
        for (pid, ev) in notices {
            self.io.counters.dynacast_notices += 1;
            self.send_event(now, pid, &ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use str0m::media::Rid;

    use super::super::io::fixture::{HERE, add, engine, line, participant, room, track};
    use super::*;
    use crate::ids::ShardId;

    fn video_slot(current: Option<u8>, target: Option<u8>) -> Slot {
        let mut s = Slot::new("s0".into(), MediaKind::Video);
        s.current = current;
        s.target = target;
        s
    }

    #[test]
    fn a_climb_by_choice_is_above_both_the_shown_and_the_aimed_layer_and_the_floor() {
        // Shows 0, aims at 0: 1 is a climb; 0 is none.
        let s = video_slot(Some(0), Some(0));
        assert!(climbs_by_choice(&s, Some(1), 0));
        assert!(!climbs_by_choice(&s, Some(0), 0));
        assert!(!climbs_by_choice(&s, None, 0));
        // Already aiming at 2: 2 is no new climb, 3 is.
        let s = video_slot(Some(0), Some(2));
        assert!(!climbs_by_choice(&s, Some(2), 0));
        assert!(climbs_by_choice(&s, Some(3), 0));
        // Up to the lowest layer still flowing is forced, not chosen.
        let s = video_slot(Some(0), Some(0));
        assert!(!climbs_by_choice(&s, Some(1), 1));
        assert!(climbs_by_choice(&s, Some(2), 1));
        // A slot that shows nothing yet starts wherever: no climb.
        let s = video_slot(None, Some(0));
        assert!(!climbs_by_choice(&s, Some(2), 0));
    }

    /// Subscriber 1 here with video slots "s0", "s1" and an audio slot
    /// "s2"; publisher 2 on shard 1.
    fn setup(t0: Instant) -> Engine {
        let mut e = engine();
        add(
            &mut e,
            t0,
            1,
            &[],
            &[
                line("s0", MediaKind::Video),
                line("s1", MediaKind::Video),
                line("s2", MediaKind::Audio),
            ],
        );
        room(
            &mut e,
            &[
                (1, HERE, false, vec![]),
                (
                    2,
                    ShardId(1),
                    false,
                    vec![line("v", MediaKind::Video), line("a", MediaKind::Audio)],
                ),
            ],
        );
        e
    }

    fn demands(e: &mut Engine) -> Vec<(ShardId, TrackKey, u32)> {
        let peers = std::mem::take(&mut e.io.out.peers);
        peers
            .into_iter()
            .filter_map(|(s, m)| match m {
                PeerMsg::LayerDemand { track, from, mask } => {
                    assert_eq!(from, HERE);
                    Some((s, track, mask))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn demand_is_the_shown_and_aimed_layers_of_every_video_slot() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let v = track(2, "v");
        let p = participant(&mut e, 1);
        p.slots[0].set_source(Some(v));
        p.slots[0].current = Some(0);
        p.slots[0].target = Some(2);
        p.slots[1].set_source(Some(v));
        p.slots[1].current = Some(1);
        p.slots[1].target = Some(1);
        p.slots[2].set_source(Some(track(2, "a")));
        let demand = e.local_demand();
        assert_eq!(demand.len(), 1, "audio takes no layers");
        assert_eq!(demand.get(&v), Some(&0b111));
    }

    #[test]
    fn a_remote_publishers_shard_is_told_of_changes_only_and_of_the_end() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let v = track(2, "v");
        {
            let s = &mut participant(&mut e, 1).slots[0];
            s.set_source(Some(v));
            s.current = Some(0);
            s.target = Some(0);
        }
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![(ShardId(1), v, 0b1)]);
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![], "unchanged: not sent again");
        participant(&mut e, 1).slots[0].target = Some(1);
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![(ShardId(1), v, 0b11)]);
        participant(&mut e, 1).slots[0].set_source(None);
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![(ShardId(1), v, 0)], "withdrawn");
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![]);
    }

    #[test]
    fn a_layer_nobody_takes_is_paused_after_the_hold_and_the_lowest_always_flows() {
        let t0 = Instant::now();
        let mut e = engine();
        add(&mut e, t0, 2, &[line("v", MediaKind::Video)], &[]);
        room(
            &mut e,
            &[(2, HERE, false, vec![line("v", MediaKind::Video)])],
        );
        let v = track(2, "v");
        {
            let t = &mut participant(&mut e, 2).tracks[0];
            t.rids = vec![Rid::from("q"), Rid::from("h"), Rid::from("f")];
            t.active = 0b111;
            t.last_needed = [Some(t0); MAX_LAYERS];
        }
        // The source sends (not silent), nobody takes anything.
        let mut at = t0;
        while at < t0 + DYNACAST_HOLD {
            e.sources.note(v, 0, 3, 1000, at);
            e.dynacast(at);
            at += Duration::from_millis(500);
        }
        assert_eq!(participant(&mut e, 2).tracks[0].active, 0b111, "held");
        assert_eq!(e.io.counters.dynacast_notices, 0);
        e.sources.note(v, 0, 3, 1000, t0 + DYNACAST_HOLD);
        e.dynacast(t0 + DYNACAST_HOLD);
        assert_eq!(participant(&mut e, 2).tracks[0].active, 0b1);
        assert_eq!(e.io.counters.dynacast_notices, 1);

        // A peer shard's subscriber takes the top layer: it resumes.
        e.demand_remote.insert((v, ShardId(1)), 0b100);
        e.rooms
            .get_mut(&super::super::io::fixture::ROOM)
            .expect("room")
            .peer_shards
            .push(ShardId(1));
        let t1 = t0 + DYNACAST_HOLD + Duration::from_millis(100);
        e.sources.note(v, 0, 3, 1000, t1);
        e.dynacast(t1);
        assert_eq!(participant(&mut e, 2).tracks[0].active, 0b101);
        assert_eq!(e.io.counters.dynacast_notices, 2);
    }
}
