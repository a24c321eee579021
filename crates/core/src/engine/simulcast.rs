//! The engine acting on simulcast: each subscriber's estimate turned into a
//! target layer per slot ([`layers::allocate`]), the BWE told what the
//! slots would take (so it probes toward it), and dynacast: a publisher is
//! told which of its layers some subscriber (on any shard) takes, so the
//! others pause at the source.
//!
//! Runs when a subscriber's estimate, slots or views change, and on the
//! room tick. Must not: forward media (the slot switches on a keyframe in
//! [`super::forward`]) or decide what a slot shows ([`super::policy`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use str0m::bwe::Bitrate;
use str0m::media::MediaKind;

use super::io::guarded;
use super::layers::{self, AUDIO_BPS, SlotWant};
use super::{Engine, MAX_LAYERS, PeerMsg};
use crate::events::RoomEvent;
use crate::ids::{LayerKey, ParticipantId, TrackKey};

/// A layer nobody takes stays on at the publisher this long (a subscriber
/// that moves between layers does not make it flap).
const DYNACAST_HOLD: Duration = Duration::from_secs(2);

impl Engine {
    /// Chooses a layer for each of `id`'s video slots from its estimate.
    pub(super) fn allocate(&mut self, _now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let speaker = self.rooms.get(&p.room).and_then(|r| r.speaker);
        let estimate = match self.settings.bwe_initial_bps {
            None => u64::MAX,
            Some(initial) => p.estimate.unwrap_or(initial),
        };
        let audio = p
            .slots
            .iter()
            .filter(|s| s.kind == MediaKind::Audio && s.source.is_some())
            .count() as u64
            * AUDIO_BPS;
        let mut wants = Vec::new();
        let mut at = Vec::new();
        for (i, slot) in p.slots.iter().enumerate() {
            let Some(src) = slot.source.filter(|_| slot.kind == MediaKind::Video) else {
                continue;
            };
            let (rates, ids, n) = match self.sources.get(&src) {
                Some(s) => s.rates(),
                None => {
                    let mut ids = [0u8; MAX_LAYERS];
                    ids.iter_mut().enumerate().for_each(|(i, id)| *id = i as u8);
                    ([0; MAX_LAYERS], ids, 1)
                }
            };
            let rank_of = |layer: u8| ids.iter().take(n).position(|&l| l == layer);
            let v = slot.view;
            let max_rank = (v.width > 0 && v.height > 0)
                .then(|| layers::rank_for_width(v.width, n).min(usize::from(v.max_rank)));
            wants.push(SlotWant {
                priority: (
                    slot.pinned,
                    speaker == Some(src.participant),
                    u32::from(v.width) * u32::from(v.height),
                ),
                rates,
                n,
                max_rank,
                current: slot.current.and_then(rank_of),
            });
            at.push((i, ids));
        }
        let a = layers::allocate(estimate.saturating_sub(audio), &wants);
        for ((i, ids), rank) in at.into_iter().zip(a.ranks) {
            let Some(slot) = p.slots.get_mut(i) else {
                continue;
            };
            let target = rank.and_then(|r| ids.get(r).copied());
            let fresh = std::mem::take(&mut slot.fresh);
            if slot.target != target {
                slot.target = target;
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
        // Probe toward what the slots would take at the sizes they are
        // shown, with the headroom a move up needs.
        let desired = a.desired.saturating_add(audio).saturating_mul(5) / 4;
        let moved = p.bwe_desired.is_none_or(|d| desired.abs_diff(d) > d / 10);
        if moved {
            p.bwe_desired = Some(desired);
            let _ = guarded(&mut self.io, id, &mut p.poisoned, |_| {
                p.rtc
                    .bwe()
                    .set_bitrate(Bitrate::ZERO, Bitrate::bps(desired));
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
    fn local_demand(&self) -> HashMap<TrackKey, u32> {
        let mut demand: HashMap<TrackKey, u32> = HashMap::new();
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
                let mut active = 0u32;
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
