//! The engine acting on simulcast: each subscriber's slots and estimate
//! handed to its [`Downlink`](super::downlink::Downlink) (which decides the layer each slot aims at
//! and what its BWE pads up to and probes toward), the decisions carried
//! out (slot targets, keyframe requests, the BWE's rates), and dynacast: a
//! publisher is told which of its layers some subscriber (on any shard)
//! takes, so the others pause at the source (and, when the ones it was
//! told to send go silent, one paused layer more each second, in case it
//! stopped them itself). Runs when a subscriber's estimate, slots or views
//! change, and on the room tick.
//!
//! Must not: decide layers itself ([`super::downlink`] does), forward
//! media (the slot switches on a keyframe in [`super::forward`]) or decide
//! what a slot shows ([`super::policy`]).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use str0m::Event;
use str0m::bwe::Bitrate;
use str0m::media::MediaKind;

use super::downlink::{SlotIn, Trial};
use super::io::guarded;
use super::layers::AUDIO_BPS;
use super::{Engine, MAX_LAYERS, PeerMsg};
use crate::events::RoomEvent;
use crate::ids::{LayerKey, ParticipantId, TrackKey};

/// A layer nobody takes stays on at the publisher this long (a subscriber
/// that moves between layers does not make it flap; Chromium takes one to
/// four seconds to resume an encoding).
const DYNACAST_HOLD: Duration = Duration::from_secs(5);
/// A simulcast source that sends nothing on the layers it was told to send
/// for this long gets a paused layer resumed (see [`Engine::dynacast`]).
const PROBE_SILENCE: Duration = Duration::from_secs(1);
/// A spatial layer of one scalable encoding nobody takes is left out at the
/// encoder after this long: a publisher that drops or adds a spatial layer
/// reconfigures its encoder (Chromium restarts it on a keyframe), which
/// costs every viewer a keyframe, so it happens rarely, unlike pausing a
/// simulcast encoding.
const SVC_HOLD: Duration = Duration::from_secs(30);
/// Demand crosses to another node's shard as a datagram that can be lost,
/// so it is sent again in full this often (the state is re-sent, not
/// acknowledged: docs/architecture.md, "Cluster")...
const REMOTE_DEMAND_REFRESH: Duration = Duration::from_secs(1);
/// ...and demand from another node's shard that was not sent again for
/// this long is gone (its subscribers left, or its node did).
const REMOTE_DEMAND_EXPIRY: Duration = Duration::from_secs(3);

/// What a peer shard takes of a track here: a bit per layer, and when it
/// last said so.
#[derive(Clone, Copy, Debug)]
pub(super) struct Demand {
    pub(super) mask: u32,
    pub(super) at: Instant,
}

impl Engine {
    /// Chooses a layer for each of `id`'s video slots from its estimate
    /// ([`Downlink::step`](super::downlink::Downlink::step)) and carries the choice out.
    pub(super) fn allocate(&mut self, now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let speaker = self.rooms.get(&p.room).and_then(|r| r.speaker);
        let audio = p
            .subscriber
            .slots
            .iter()
            .filter(|s| s.kind == MediaKind::Audio && s.source.is_some())
            .count() as u64
            * AUDIO_BPS;
        let mut inputs = Vec::new();
        // Each input's slot.
        let mut at = Vec::new();
        for (i, slot) in p.subscriber.slots.iter().enumerate() {
            let Some(src) = slot.source.filter(|_| slot.kind == MediaKind::Video) else {
                continue;
            };
            let source = self.sources.get(&src);
            let (rates, n) = source.map_or(([0; MAX_LAYERS], 1), |s| s.rates());
            let (current, target) = (slot.layer.current, slot.layer.target);
            // The layer it shows stopped at the source while a lower one
            // flows: down to that one now, unless it is climbing to a layer
            // that flows (that one's keyframe ends the wait).
            let fallback = current.map(usize::from).zip(source).and_then(|(c, s)| {
                let f = s.fallback(c)?;
                let climbing = target
                    .map(usize::from)
                    .is_some_and(|t| t > c && s.flowing(t));
                (!climbing).then_some(f)
            });
            let v = slot.view;
            let max_rank = (v.width > 0 && v.height > 0).then(|| {
                let needed = source.map_or(0, |s| s.rank_for(v.width));
                needed.min(usize::from(v.max_rank))
            });
            inputs.push(SlotIn {
                priority: (
                    slot.pinned,
                    speaker == Some(src.participant),
                    u32::from(v.width) * u32::from(v.height),
                ),
                rates,
                n,
                max_rank,
                at: (current, target),
                moved: (slot.layer.last_move, slot.layer.last_down),
                fallback,
                // Nothing below the lowest layer that flows: when the
                // publisher stopped its lowest itself (dynacast never
                // pauses it), up to the next one.
                floor: source.map_or(0, |s| s.lowest_flowing()),
            });
            // What its size asks for, up to the highest layer the source
            // still sends (a publisher's own cut is not the downlink's).
            let top = source.and_then(|s| (0..n).rev().find(|&l| s.flowing(l)));
            let wanted = max_rank
                .map(|r| top.map_or(r, |t| r.min(t)))
                .and_then(|r| u8::try_from(r).ok());
            at.push((i, wanted));
        }
        let initial = self.settings.bwe_initial_bps;
        // Its receiver reports of the last stats interval, complete: its
        // estimate when it gives no other.
        if let (Some(start), Some(loss)) = (initial, p.subscriber.downlink.reports.take())
            && p.subscriber.downlink.note_report(now, start, loss)
        {
            tracing::trace!(
                participant = %id,
                ?loss,
                estimate = ?p.subscriber.downlink.estimate(),
                "loss-based estimate"
            );
        }
        // The loss its TWCC feedback shows, else its receiver reports'.
        let loss = p
            .session
            .stats
            .egress_loss
            .or(p.subscriber.downlink.report_loss());
        let d = p
            .subscriber
            .downlink
            .step(now, initial, loss, audio, &inputs);
        let (estimate, sure) = d.estimate;
        match d.trial {
            Trial::Started { rate } => {
                tracing::debug!(participant = %id, rate, estimate, sure, "climb trial starts");
            }
            Trial::Failed { backoff } => {
                tracing::debug!(participant = %id, estimate, sure, ?backoff, "climb trial failed");
            }
            Trial::None | Trial::Waiting | Trial::Passed => {}
        }
        for (((i, wanted), input), out) in at.into_iter().zip(&inputs).zip(d.slots) {
            let Some(slot) = p.subscriber.slots.get_mut(i) else {
                continue;
            };
            slot.out.temporal.want = out.temporal;
            slot.layer.wanted = wanted;
            let fresh = std::mem::take(&mut slot.layer.fresh);
            let target = out.target;
            if slot.layer.target != target {
                tracing::debug!(
                    participant = %id,
                    mid = %slot.mid,
                    current = ?slot.layer.current,
                    from = ?slot.layer.target,
                    to = ?target,
                    estimate,
                    sure,
                    rates = ?input.rates,
                    "slot target moves"
                );
                slot.layer.target = target;
                slot.layer.last_move = Some(now);
                if out.down {
                    slot.layer.last_down = Some(now);
                }
                if target.is_none() && slot.layer.current.take().is_some() {
                    self.io.counters.layer_pauses += 1;
                }
            } else if !fresh {
                continue;
            }
            if let (Some(track), Some(layer)) = (slot.source, target)
                && slot.layer.current != Some(layer)
            {
                self.io.want_keyframe(LayerKey { track, layer });
            }
        }
        if let Some((minimum, desired)) = d.bwe {
            let rtc = &mut p.session.rtc;
            let _ = guarded(&mut self.io, id, &mut p.session.poisoned, |_| {
                rtc.bwe()
                    .set_bitrate(Bitrate::bps(minimum), Bitrate::bps(desired));
            });
        }
    }

    /// A statistics event of subscriber `id`, for its estimate from
    /// receiver reports: its figures (an interval starts), then each send
    /// stream's packets and reported loss; the
    /// reallocation after the batch takes the interval.
    pub(super) fn note_reports(&mut self, id: ParticipantId, ev: &Event) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let reports = &mut p.subscriber.downlink.reports;
        match ev {
            // Its byte count misses what the shard's own egress sends: what
            // it was sent is what its slots took (the downlink's figure).
            Event::PeerStats(_) => reports.peer(),
            Event::MediaEgressStats(st) => {
                let mut h = DefaultHasher::new();
                (st.mid, st.rid).hash(&mut h);
                reports.stream(h.finish(), st.packets, st.loss);
                self.io.todo.realloc.push(id);
            }
            _ => {}
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
            for s in p
                .subscriber
                .slots
                .iter()
                .filter(|s| s.kind == MediaKind::Video)
            {
                let Some(src) = s.source else { continue };
                let mut mask = 0u32;
                for l in [s.layer.current, s.layer.target].into_iter().flatten() {
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
        // Other nodes' shards hear it all again every second: a datagram
        // of the relay may be lost, and a change is sent once.
        let refresh = self
            .demand_refreshed
            .is_none_or(|at| now.saturating_duration_since(at) >= REMOTE_DEMAND_REFRESH);
        if refresh {
            self.demand_refreshed = Some(now);
            let rooms = &self.rooms;
            let remote = |track: &TrackKey| {
                rooms
                    .values()
                    .find_map(|r| r.member(track.participant))
                    .is_some_and(|m| m.info.shard.is_remote())
            };
            for (&track, &mask) in &self.demand_sent {
                if demand.get(&track) == Some(&mask) && remote(&track) {
                    msgs.push((track, mask));
                }
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
        self.demand_remote.retain(|(track, shard), d| {
            (!shard.is_remote() || now.saturating_duration_since(d.at) < REMOTE_DEMAND_EXPIRY)
                && participants
                    .get(&track.participant)
                    .and_then(|p| rooms.get(&p.room))
                    .is_some_and(|r| r.peer_shards.contains(shard))
        });
        // Local publishers: which layers to keep on.
        let mut notices = Vec::new();
        for (&pid, p) in self.participants.iter_mut() {
            for t in p.publisher.tracks.iter_mut().filter(|t| t.rids.len() > 1) {
                let key = TrackKey {
                    participant: pid,
                    mid: t.mid,
                };
                let mut needed = demand.get(&key).copied().unwrap_or(0);
                for ((track, _), d) in &self.demand_remote {
                    if *track == key {
                        needed |= d.mask;
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
                // A muted track's packets stop at the shard: its silence
                // here is ours, not the publisher's.
                let n = t.rids.len();
                let silent = !t.flow.muted()
                    && self
                        .sources
                        .get(&key)
                        .is_none_or(|s| s.silent_for(now) >= PROBE_SILENCE);
                if silent {
                    for (l, last) in t.dynacast.last_needed.iter_mut().enumerate().take(n) {
                        if t.dynacast.active & (1 << l) != 0 {
                            *last = Some(now);
                        }
                    }
                    let due = t
                        .dynacast
                        .probed_at
                        .is_none_or(|at| now.saturating_duration_since(at) >= PROBE_SILENCE);
                    if let Some(l) = (0..n).find(|l| t.dynacast.active & (1 << l) == 0)
                        && due
                        && let Some(last) = t.dynacast.last_needed.get_mut(l)
                    {
                        *last = Some(now);
                        t.dynacast.probed_at = Some(now);
                    }
                }
                // The lowest layer always flows: a new subscriber starts at
                // once, and a browser takes seconds to resume a layer.
                let mut active = 1u32;
                for (l, last) in t
                    .dynacast
                    .last_needed
                    .iter_mut()
                    .enumerate()
                    .take(t.rids.len())
                {
                    if needed & (1 << l) != 0 {
                        *last = Some(now);
                    }
                    if last.is_some_and(|at| now.saturating_duration_since(at) < DYNACAST_HOLD) {
                        active |= 1 << l;
                    }
                }
                if active != t.dynacast.active {
                    t.dynacast.active = active;
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
        // Local publishers of one scalable encoding: how many spatial
        // layers to encode, with a longer hold (a spatial layer the encoder
        // adds back starts on a keyframe).
        for (&pid, p) in self.participants.iter_mut() {
            for t in p.publisher.tracks.iter_mut().filter(|t| t.rids.len() <= 1) {
                let key = TrackKey {
                    participant: pid,
                    mid: t.mid,
                };
                let Some(source) = self.sources.get(&key).filter(|s| s.svc) else {
                    continue;
                };
                let mut needed = demand.get(&key).copied().unwrap_or(0);
                for ((track, _), d) in &self.demand_remote {
                    if *track == key {
                        needed |= d.mask;
                    }
                }
                let n = usize::from(source.count);
                let mut spatial = 1u8;
                for (l, last) in t.dynacast.last_needed.iter_mut().enumerate().take(n) {
                    if needed & (1 << l) != 0 {
                        *last = Some(now);
                    }
                    if last.is_some_and(|at| now.saturating_duration_since(at) < SVC_HOLD) {
                        spatial = spatial.max(l as u8 + 1);
                    }
                }
                // All of them until the first notice.
                if spatial != t.dynacast.svc_told.unwrap_or(source.count) {
                    t.dynacast.svc_told = Some(spatial);
                    notices.push((
                        pid,
                        RoomEvent::Svc {
                            mid: t.mid.to_string(),
                            spatial,
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

    /// Subscriber 1's figures as the stats give them.
    fn figures(e: &Engine) -> crate::metrics::ParticipantStats {
        e.participant_stats()
            .into_iter()
            .find(|st| st.id == ParticipantId(1))
            .expect("its figures")
    }

    fn settle_event(e: &mut Engine, now: Instant, event: Event) {
        e.io.events.push_back(super::super::io::Queued {
            id: ParticipantId(1),
            event,
            kernel_rx: None,
        });
        e.settle(now);
    }

    /// One stats interval as str0m gives it: the peer's figures, then its
    /// send stream "s0" with `packets` sent in all and `loss` reported.
    fn interval(e: &mut Engine, at: Instant, packets: u64, loss: Option<f32>) {
        use str0m::stats::{MediaEgressStats, PeerStats};
        settle_event(
            e,
            at,
            Event::PeerStats(PeerStats {
                peer_bytes_rx: 0,
                peer_bytes_tx: 0,
                bytes_rx: 0,
                bytes_tx: 0,
                timestamp: at,
                bwe_tx: None,
                egress_loss_fraction: None,
                ingress_loss_fraction: None,
                rtt: None,
                selected_candidate_pair: None,
            }),
        );
        settle_event(
            e,
            at,
            Event::MediaEgressStats(MediaEgressStats {
                mid: "s0".into(),
                rid: None,
                bytes: 0,
                packets,
                firs: 0,
                plis: 0,
                nacks: 0,
                rtt: None,
                loss,
                timestamp: at,
                remote: None,
            }),
        );
    }

    #[test]
    fn without_twcc_the_estimate_is_the_rembs_else_the_receiver_reports() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        assert_eq!(figures(&e).estimate_source, None);
        // Receiver reports, nothing else: a loss-based estimate from the
        // start value, and the loss figure TWCC would have given.
        interval(&mut e, t0, 0, None);
        interval(&mut e, t0 + Duration::from_secs(1), 100, Some(0.0));
        let st = figures(&e);
        assert_eq!(st.estimate_source, Some("loss"));
        assert!(st.estimate_bps.is_some_and(|b| b > 0), "{st:?}");
        assert_eq!(st.egress_loss, Some(0.0));
        // A REMB takes over.
        let remb = str0m::bwe::BweKind::Remb {
            estimate: Bitrate::bps(900_000),
            mid: "s0".into(),
        };
        settle_event(
            &mut e,
            t0 + Duration::from_secs(1),
            Event::EgressBitrateEstimate(remb),
        );
        let st = figures(&e);
        assert_eq!(
            (st.estimate_source, st.estimate_bps),
            (Some("remb"), Some(900_000))
        );
        // TWCC over both.
        let twcc = str0m::bwe::BweKind::Twcc {
            estimate: Bitrate::bps(2_000_000),
            can_probe: true,
        };
        settle_event(
            &mut e,
            t0 + Duration::from_secs(2),
            Event::EgressBitrateEstimate(twcc),
        );
        interval(&mut e, t0 + Duration::from_secs(2), 200, Some(0.0));
        let st = figures(&e);
        assert_eq!(
            (st.estimate_source, st.estimate_bps),
            (Some("twcc"), Some(2_000_000))
        );
    }

    #[test]
    fn demand_is_the_shown_and_aimed_layers_of_every_video_slot() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let v = track(2, "v");
        let p = participant(&mut e, 1);
        p.subscriber.slots[0].set_source(Some(v));
        p.subscriber.slots[0].layer.current = Some(0);
        p.subscriber.slots[0].layer.target = Some(2);
        p.subscriber.slots[1].set_source(Some(v));
        p.subscriber.slots[1].layer.current = Some(1);
        p.subscriber.slots[1].layer.target = Some(1);
        p.subscriber.slots[2].set_source(Some(track(2, "a")));
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
            let s = &mut participant(&mut e, 1).subscriber.slots[0];
            s.set_source(Some(v));
            s.layer.current = Some(0);
            s.layer.target = Some(0);
        }
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![(ShardId(1), v, 0b1)]);
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![], "unchanged: not sent again");
        participant(&mut e, 1).subscriber.slots[0].layer.target = Some(1);
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![(ShardId(1), v, 0b11)]);
        participant(&mut e, 1).subscriber.slots[0].set_source(None);
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![(ShardId(1), v, 0)], "withdrawn");
        e.dynacast(t0);
        assert_eq!(demands(&mut e), vec![]);
    }

    /// Publisher 2 here, alone in its room, with video track "v".
    fn local_publisher(t0: Instant) -> (Engine, TrackKey) {
        let mut e = engine();
        add(&mut e, t0, 2, &[line("v", MediaKind::Video)], &[]);
        room(
            &mut e,
            &[(2, HERE, false, vec![line("v", MediaKind::Video)])],
        );
        (e, track(2, "v"))
    }

    #[test]
    fn a_layer_nobody_takes_is_paused_after_the_hold_and_the_lowest_always_flows() {
        let t0 = Instant::now();
        let (mut e, v) = local_publisher(t0);
        {
            let t = &mut participant(&mut e, 2).publisher.tracks[0];
            t.rids = vec![Rid::from("q"), Rid::from("h"), Rid::from("f")];
            t.dynacast.active = 0b111;
            t.dynacast.last_needed = [Some(t0); MAX_LAYERS];
        }
        // The source sends (not silent), nobody takes anything.
        let mut at = t0;
        while at < t0 + DYNACAST_HOLD {
            e.sources.note(v, 0, 3, false, 1000, at);
            e.dynacast(at);
            at += Duration::from_millis(500);
        }
        assert_eq!(
            participant(&mut e, 2).publisher.tracks[0].dynacast.active,
            0b111,
            "held"
        );
        assert_eq!(e.io.counters.dynacast_notices, 0);
        e.sources.note(v, 0, 3, false, 1000, t0 + DYNACAST_HOLD);
        e.dynacast(t0 + DYNACAST_HOLD);
        assert_eq!(
            participant(&mut e, 2).publisher.tracks[0].dynacast.active,
            0b1
        );
        assert_eq!(e.io.counters.dynacast_notices, 1);

        // A peer shard's subscriber takes the top layer: it resumes.
        e.demand_remote.insert(
            (v, ShardId(1)),
            Demand {
                mask: 0b100,
                at: t0,
            },
        );
        e.rooms
            .get_mut(&super::super::io::fixture::ROOM)
            .expect("room")
            .peer_shards
            .push(ShardId(1));
        let t1 = t0 + DYNACAST_HOLD + Duration::from_millis(100);
        e.sources.note(v, 0, 3, false, 1000, t1);
        e.dynacast(t1);
        assert_eq!(
            participant(&mut e, 2).publisher.tracks[0].dynacast.active,
            0b101
        );
        assert_eq!(e.io.counters.dynacast_notices, 2);
    }

    #[test]
    fn an_svc_publisher_is_told_the_spatial_layers_taken_after_the_hold() {
        let t0 = Instant::now();
        let (mut e, v) = local_publisher(t0);
        participant(&mut e, 2).publisher.tracks[0]
            .dynacast
            .last_needed = [Some(t0); MAX_LAYERS];
        let told = |e: &mut Engine| participant(e, 2).publisher.tracks[0].dynacast.svc_told;
        // Three spatial layers arrive; nobody takes any.
        let mut at = t0;
        while at < t0 + SVC_HOLD {
            for l in 0..3 {
                e.sources.note(v, l, 3, true, 1000, at);
            }
            e.dynacast(at);
            at += Duration::from_millis(500);
        }
        assert_eq!(told(&mut e), None, "held: all of them");
        e.dynacast(t0 + SVC_HOLD);
        assert_eq!(told(&mut e), Some(1), "the lowest always");
        assert_eq!(e.io.counters.dynacast_notices, 1);
        e.dynacast(t0 + SVC_HOLD);
        assert_eq!(e.io.counters.dynacast_notices, 1, "told once");
        // A peer shard's subscriber takes layer 1: two layers.
        e.demand_remote
            .insert((v, ShardId(1)), Demand { mask: 0b11, at: t0 });
        e.rooms
            .get_mut(&super::super::io::fixture::ROOM)
            .expect("room")
            .peer_shards
            .push(ShardId(1));
        e.dynacast(t0 + SVC_HOLD);
        assert_eq!(told(&mut e), Some(2));
        assert_eq!(e.io.counters.dynacast_notices, 2);
    }
}
