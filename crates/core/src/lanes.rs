//! The two lanes between shards, and the outbox that makes the control lane
//! lossless.
//!
//! Media crosses to a peer shard on a bounded lane that drops when full: a
//! shard never waits for another, and a lost packet is repaired by the next
//! keyframe or a NACK (docs/design.md rule 2). Control does not repair itself that
//! way. A [`PeerMsg::LayerDemand`] is sent when a mask changes, so a lost one
//! leaves the publisher's shard pausing a layer that subscribers elsewhere
//! want, with nothing to resend it; a lost [`PeerMsg::KeyframeRequest`] leaves
//! a slot frozen until the publisher's next periodic keyframe. So each ordered
//! shard pair has a second, small lane for control, and the sender keeps in a
//! [`ControlOutbox`] whatever that lane cannot take, first in line at its next
//! flush. A full control lane delays the sender's control work (back-pressure)
//! and never touches media.
//!
//! The outbox coalesces, so it stays bounded however long a peer is slow: a
//! newer demand for a track replaces the one queued for the same peer (only
//! the latest mask means anything), and a keyframe request already queued is
//! not queued twice. It holds at most one message per (peer, track) and per
//! (peer, layer), which is what the rooms hold, not what time brings.
//!
//! While the outbox holds anything, the sender tries again after
//! [`ControlOutbox::retry_in`]: 1 ms, doubling with each flush that hands
//! nothing over, up to 16 ms (a peer that is gone for good, with
//! `--on-shard-failure continue`, costs its senders about 60 wake-ups a
//! second, not 1 000), and back to 1 ms once a flush hands something over.
//!
//! Owns: which lane a message takes and the sender's outbox. Must not: know
//! how a lane is built (a lock-free queue between pinned threads, a channel
//! between tasks, the simulator's deques): the caller hands in `push`.

use std::collections::VecDeque;
use std::time::Duration;

use crate::engine::PeerMsg;
use crate::ids::ShardId;

/// Which lane a message takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Bounded and lossy: a full lane drops and counts.
    Media,
    /// Bounded and lossless: a full lane leaves the message in the sender's
    /// [`ControlOutbox`].
    Control,
}

impl PeerMsg {
    /// The lane this message takes.
    pub fn lane(&self) -> Lane {
        match self {
            PeerMsg::Media { .. } | PeerMsg::Datagram { .. } => Lane::Media,
            PeerMsg::KeyframeRequest { .. }
            | PeerMsg::LayerDemand { .. }
            | PeerMsg::Message { .. }
            | PeerMsg::Claim { .. } => Lane::Control,
        }
    }

    /// Whether `other`, sent later to the same peer, makes this one
    /// pointless: a newer demand for the same track, or the same keyframe
    /// request.
    fn superseded_by(&self, other: &PeerMsg) -> bool {
        match (self, other) {
            (PeerMsg::LayerDemand { track: a, .. }, PeerMsg::LayerDemand { track: b, .. }) => {
                a == b
            }
            (PeerMsg::KeyframeRequest { key: a }, PeerMsg::KeyframeRequest { key: b }) => a == b,
            _ => false,
        }
    }
}

/// Control messages a shard could not hand to a peer's lane yet, oldest
/// first. Empty nearly always: it fills only while a peer's control lane is
/// full.
#[derive(Debug, Default)]
pub struct ControlOutbox {
    pending: VecDeque<(ShardId, PeerMsg)>,
    /// Flushes in a row that handed nothing over while messages waited.
    misses: u32,
}

/// The first wait before the outbox tries a full lane again...
pub const RETRY_MIN: Duration = Duration::from_millis(1);
/// ...and the longest, after flushes that handed nothing over.
pub const RETRY_MAX: Duration = Duration::from_millis(16);

impl ControlOutbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `msg` to `to` behind anything already waiting for `to` (a
    /// peer sees one sender's control messages in the order they were
    /// made). `push` hands a message to the lane, or gives it back when the
    /// lane is full. Returns the peers that got something (a bit per shard
    /// below 64), to be woken once per batch.
    pub fn send(
        &mut self,
        to: ShardId,
        msg: PeerMsg,
        push: impl FnMut(ShardId, PeerMsg) -> Result<(), PeerMsg>,
    ) -> u64 {
        self.queue(to, msg);
        self.flush(push)
    }

    /// Hands the lanes what they take now, oldest first; stops for a peer
    /// at its first refusal, so that peer's order holds. Returns the peers
    /// that got something, as [`ControlOutbox::send`] does.
    pub fn flush(&mut self, mut push: impl FnMut(ShardId, PeerMsg) -> Result<(), PeerMsg>) -> u64 {
        let mut delivered = 0u64;
        if self.pending.is_empty() {
            return delivered;
        }
        // Peers whose lane refused a message in this flush (shards are
        // numbered from 0; one bit each, the 64th and beyond share a bit,
        // which only makes them wait for each other's next flush).
        let mut full = 0u64;
        let bit = |to: ShardId| 1u64 << to.0.min(63);
        let mut keep = VecDeque::new();
        while let Some((to, msg)) = self.pending.pop_front() {
            if full & bit(to) != 0 {
                keep.push_back((to, msg));
                continue;
            }
            match push(to, msg) {
                Ok(()) => delivered |= bit(to),
                Err(msg) => {
                    full |= bit(to);
                    keep.push_back((to, msg));
                }
            }
        }
        self.pending = keep;
        self.misses = if delivered != 0 || self.pending.is_empty() {
            0
        } else {
            self.misses.saturating_add(1)
        };
        delivered
    }

    /// When to flush again if nothing else wakes the sender: `None` while
    /// nothing waits; else [`RETRY_MIN`], doubled for each flush in a row
    /// that handed nothing over, up to [`RETRY_MAX`].
    pub fn retry_in(&self) -> Option<Duration> {
        if self.pending.is_empty() {
            return None;
        }
        let doublings = self.misses.saturating_sub(1).min(8);
        Some(RETRY_MIN.saturating_mul(1 << doublings).min(RETRY_MAX))
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Queues `msg`, or lets it replace the message it supersedes.
    fn queue(&mut self, to: ShardId, msg: PeerMsg) {
        if let Some(slot) = self
            .pending
            .iter_mut()
            .find(|(t, m)| *t == to && m.superseded_by(&msg))
        {
            slot.1 = msg;
        } else {
            self.pending.push_back((to, msg));
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::result_large_err,
    reason = "lanes give a refused message back by value, as the mesh does"
)]
mod tests {
    use super::*;
    use crate::ids::{LayerKey, ParticipantId, TrackKey};

    fn track(n: u64) -> TrackKey {
        TrackKey {
            participant: ParticipantId(n),
            mid: str0m::media::Mid::from("0"),
        }
    }

    fn demand(n: u64, mask: u32) -> PeerMsg {
        PeerMsg::LayerDemand {
            track: track(n),
            from: ShardId(1),
            mask,
        }
    }

    fn keyframe(n: u64) -> PeerMsg {
        PeerMsg::KeyframeRequest {
            key: LayerKey {
                track: track(n),
                layer: 0,
            },
        }
    }

    fn mask(m: &PeerMsg) -> Option<u32> {
        match m {
            PeerMsg::LayerDemand { mask, .. } => Some(*mask),
            _ => None,
        }
    }

    /// A lane that takes `room` messages, then refuses.
    struct Lane {
        got: Vec<(ShardId, PeerMsg)>,
        room: usize,
    }

    impl Lane {
        fn push(&mut self, to: ShardId, m: PeerMsg) -> Result<(), PeerMsg> {
            if self.got.len() < self.room {
                self.got.push((to, m));
                Ok(())
            } else {
                Err(m)
            }
        }
    }

    #[test]
    fn a_lane_that_stays_full_is_tried_less_often_and_one_with_room_at_once() {
        let ms = Duration::from_millis;
        let mut out = ControlOutbox::new();
        let mut lane = Lane {
            got: vec![],
            room: 0,
        };
        assert_eq!(out.retry_in(), None, "nothing waits");
        out.send(ShardId(1), keyframe(1), |t, m| lane.push(t, m));
        let mut waits = vec![out.retry_in()];
        for _ in 0..6 {
            out.flush(|t, m| lane.push(t, m));
            waits.push(out.retry_in());
        }
        let waits: Vec<Duration> = waits.into_iter().flatten().collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 16, 16].map(ms));
        // A message handed over (to this peer or another) starts over.
        out.send(ShardId(1), demand(2, 1), |t, m| lane.push(t, m));
        lane.room = 1;
        out.flush(|t, m| lane.push(t, m));
        assert_eq!(out.retry_in(), Some(RETRY_MIN), "one left, progress made");
        lane.room = 2;
        out.flush(|t, m| lane.push(t, m));
        assert_eq!(out.retry_in(), None);
    }

    #[test]
    fn a_free_lane_takes_the_message_at_once() {
        let mut out = ControlOutbox::new();
        let mut lane = Lane {
            got: vec![],
            room: 8,
        };
        let woken = out.send(ShardId(2), demand(1, 0b11), |t, m| lane.push(t, m));
        assert_eq!(woken, 0b100);
        assert!(out.is_empty());
        assert_eq!(lane.got.len(), 1);
    }

    #[test]
    fn a_full_lane_keeps_the_message_until_the_lane_has_room() {
        let mut out = ControlOutbox::new();
        let mut lane = Lane {
            got: vec![],
            room: 0,
        };
        assert_eq!(out.send(ShardId(0), keyframe(1), |t, m| lane.push(t, m)), 0);
        assert_eq!(
            out.send(ShardId(0), demand(1, 1), |t, m| lane.push(t, m)),
            0
        );
        assert_eq!(out.len(), 2);
        lane.room = 1;
        assert_eq!(out.flush(|t, m| lane.push(t, m)), 1);
        // Order holds: the request first, and the demand waits behind it.
        assert!(matches!(lane.got[0].1, PeerMsg::KeyframeRequest { .. }));
        assert_eq!(out.len(), 1);
        lane.room = 8;
        out.flush(|t, m| lane.push(t, m));
        assert!(out.is_empty());
        assert_eq!(mask(&lane.got[1].1), Some(1));
    }

    #[test]
    fn a_newer_demand_replaces_the_queued_one_and_requests_are_not_doubled() {
        let mut out = ControlOutbox::new();
        let mut refuse = |_: ShardId, m: PeerMsg| Err(m);
        for m in [0b001, 0b011, 0b111, 0b001] {
            out.send(ShardId(0), demand(7, m), &mut refuse);
        }
        for _ in 0..100 {
            out.send(ShardId(0), keyframe(7), &mut refuse);
        }
        // Another peer, another track: queued on their own.
        out.send(ShardId(1), demand(7, 0b010), &mut refuse);
        out.send(ShardId(0), demand(8, 0b100), &mut refuse);
        assert_eq!(out.len(), 4);
        let mut lane = Lane {
            got: vec![],
            room: 8,
        };
        out.flush(|t, m| lane.push(t, m));
        let masks: Vec<_> = lane.got.iter().map(|(t, m)| (t.0, mask(m))).collect();
        assert_eq!(
            masks,
            vec![
                (0, Some(0b001)),
                (0, None),
                (1, Some(0b010)),
                (0, Some(0b100))
            ]
        );
    }

    #[test]
    fn one_full_peer_does_not_hold_back_another() {
        let mut out = ControlOutbox::new();
        let mut got = Vec::new();
        let mut push = |t: ShardId, m: PeerMsg| {
            if t == ShardId(0) {
                Err(m)
            } else {
                got.push(t);
                Ok(())
            }
        };
        out.send(ShardId(0), keyframe(1), &mut push);
        let woken = out.send(ShardId(3), keyframe(2), &mut push);
        assert_eq!(woken, 0b1000);
        assert_eq!(got, vec![ShardId(3)]);
        assert_eq!(out.len(), 1);
    }
}
