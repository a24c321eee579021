//! The cross-shard mesh: two bounded queues per ordered shard pair (a lossy
//! media lane and a lossless control lane) and one wake-up per shard.
//!
//! Media crosses at most one hop: the publisher's shard pushes a copy into the
//! media lane of each peer shard hosting the room, then wakes each touched
//! peer once per batch. A full media lane drops the packet and the sender
//! counts it: a shard never waits for another (docs/design.md rules 1-3).
//!
//! Control (layer demand, keyframe requests) takes its own lane, so media can
//! never crowd it out; what a full control lane refuses stays in the sender's
//! [`corelay_core::ControlOutbox`] and goes first at its next flush
//! ([`corelay_core::lanes`] says why control must not be lost).
//!
//! The receiver drains control first, then media from each peer in turn,
//! starting one peer further each time so that no peer's media always comes
//! first, and wakes itself again when its budget leaves messages behind.
//!
//! Must not: decide what a message means or which lane it takes
//! ([`corelay_core::PeerMsg::lane`]).

use crossbeam_queue::ArrayQueue;
use tokio::sync::Notify;

use corelay_core::{Lane, PeerMsg, ShardId};

/// Capacity of each media lane: ~100 ms of a busy room's media.
pub const QUEUE_CAPACITY: usize = 4096;
/// Capacity of each control lane. Control is a few messages per layer
/// switch or keyframe request; this is seconds of it, so a full control
/// lane means the peer is stalled, not busy.
pub const CONTROL_CAPACITY: usize = 256;

pub struct Mesh {
    /// `media[from * n + to]`.
    media: Vec<ArrayQueue<PeerMsg>>,
    /// `control[from * n + to]`.
    control: Vec<ArrayQueue<PeerMsg>>,
    wake: Vec<Notify>,
    n: usize,
}

/// What one [`Mesh::drain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Messages handed to the shard.
    pub messages: usize,
    /// Whether the budget left messages behind (the shard has been woken
    /// again for them).
    pub more: bool,
}

impl Mesh {
    pub fn new(n: usize) -> Self {
        Mesh {
            media: (0..n * n)
                .map(|_| ArrayQueue::new(QUEUE_CAPACITY))
                .collect(),
            control: (0..n * n)
                .map(|_| ArrayQueue::new(CONTROL_CAPACITY))
                .collect(),
            wake: (0..n).map(|_| Notify::new()).collect(),
            n,
        }
    }

    fn lane(&self, lane: Lane, from: usize, to: usize) -> Option<&ArrayQueue<PeerMsg>> {
        if from >= self.n || to >= self.n {
            return None;
        }
        match lane {
            Lane::Media => self.media.get(from * self.n + to),
            Lane::Control => self.control.get(from * self.n + to),
        }
    }

    /// Enqueues on the message's lane without waiting; gives the message
    /// back when that lane is full (or `to` is not a peer). A media message
    /// given back is dropped and counted by the caller; a control message
    /// goes to its outbox.
    #[allow(
        clippy::result_large_err,
        reason = "the message comes back by value, as ArrayQueue gives it: boxing it would cost an allocation per media packet"
    )]
    pub fn push(
        &self,
        ShardId(from): ShardId,
        ShardId(to): ShardId,
        msg: PeerMsg,
    ) -> Result<(), PeerMsg> {
        match self.lane(msg.lane(), from, to) {
            Some(q) if to != from => q.push(msg),
            _ => Err(msg),
        }
    }

    /// How many shards the mesh joins.
    pub fn shards(&self) -> usize {
        self.n
    }

    /// Wakes shard `to` (once per batch, however many messages were pushed).
    pub fn wake(&self, ShardId(to): ShardId) {
        if let Some(w) = self.wake.get(to) {
            w.notify_one();
        }
    }

    pub fn notified(&self, ShardId(me): ShardId) -> Option<&Notify> {
        self.wake.get(me)
    }

    /// Hands `f` up to `budget` messages for `me`: every peer's control
    /// first, then media, one peer after another from `start` (the caller
    /// rotates it). When the budget leaves messages behind, `me` is woken
    /// again so they are not left until the next push.
    pub fn drain(
        &self,
        ShardId(me): ShardId,
        start: usize,
        budget: usize,
        mut f: impl FnMut(PeerMsg),
    ) -> Drained {
        let mut n = 0;
        for lane in [Lane::Control, Lane::Media] {
            for i in 0..self.n {
                let from = start.wrapping_add(i) % self.n;
                let Some(q) = self.lane(lane, from, me) else {
                    continue;
                };
                while n < budget {
                    let Some(m) = q.pop() else { break };
                    f(m);
                    n += 1;
                }
            }
        }
        let more = n >= budget
            && (0..self.n).any(|from| {
                [Lane::Control, Lane::Media]
                    .into_iter()
                    .any(|l| self.lane(l, from, me).is_some_and(|q| !q.is_empty()))
            });
        if more {
            self.wake(ShardId(me));
        }
        Drained { messages: n, more }
    }
}

#[cfg(test)]
#[allow(
    clippy::unreachable,
    clippy::indexing_slicing,
    reason = "a test: a wrong shape should fail it loudly"
)]
mod tests {
    use super::*;
    use corelay_core::TrackKey;
    use corelay_core::ids::{LayerKey, ParticipantId, RoomId};
    use corelay_core::media::MediaCopy;

    fn keyframe(n: u64) -> PeerMsg {
        PeerMsg::KeyframeRequest {
            key: LayerKey {
                track: TrackKey {
                    participant: ParticipantId(n),
                    mid: str0m::media::Mid::from("0"),
                },
                layer: 0,
            },
        }
    }

    fn media() -> PeerMsg {
        use str0m::format::{Codec, CodecSpec, FormatParams};
        use str0m::media::{Frequency, MediaKind};
        let PeerMsg::KeyframeRequest { key } = keyframe(1) else {
            unreachable!()
        };
        PeerMsg::Media {
            room: RoomId(1),
            packet: MediaCopy {
                track: key.track,
                kind: MediaKind::Audio,
                spec: CodecSpec {
                    codec: Codec::Opus,
                    clock_rate: Frequency::FORTY_EIGHT_KHZ,
                    channels: Some(2),
                    format: FormatParams::default(),
                },
                seq: 0,
                timestamp: 0,
                marker: false,
                keyframe: false,
                layer: 0,
                layers: 1,
                temporal: None,
                vp8: None,
                svc: None,
                dd: None,
                ext: Default::default(),
                payload: Box::from(&[0u8; 8][..]),
                received: std::time::Instant::now(),
                kernel_rx: None,
            },
        }
    }

    #[test]
    fn a_full_media_lane_leaves_control_through() {
        let mesh = Mesh::new(2);
        let (a, b) = (ShardId(0), ShardId(1));
        let mut pushed = 0;
        while mesh.push(a, b, media()).is_ok() {
            pushed += 1;
        }
        assert_eq!(pushed, QUEUE_CAPACITY);
        assert!(mesh.push(a, b, keyframe(1)).is_ok());
        let mut got = Vec::new();
        let d = mesh.drain(b, 0, 1, |m| got.push(m.lane()));
        // Control comes first, and the budget's leftovers wake the shard.
        assert_eq!(got, vec![Lane::Control]);
        assert!(d.more);
    }

    #[test]
    fn a_full_control_lane_gives_the_message_back() {
        let mesh = Mesh::new(2);
        for i in 0..CONTROL_CAPACITY {
            assert!(
                mesh.push(ShardId(1), ShardId(0), keyframe(i as u64))
                    .is_ok()
            );
        }
        assert!(mesh.push(ShardId(1), ShardId(0), keyframe(9999)).is_err());
        assert!(mesh.push(ShardId(0), ShardId(0), keyframe(1)).is_err());
        assert!(mesh.push(ShardId(0), ShardId(5), keyframe(1)).is_err());
    }

    #[test]
    fn draining_starts_at_the_given_peer() {
        let mesh = Mesh::new(3);
        for from in [0, 1] {
            for _ in 0..3 {
                assert!(mesh.push(ShardId(from), ShardId(2), media()).is_ok());
            }
        }
        let mut count = 0;
        let d = mesh.drain(ShardId(2), 1, 3, |_| count += 1);
        assert_eq!((d.messages, d.more), (3, true));
        // Peer 1 went first: peer 0's three are left.
        assert_eq!(mesh.media[2].len(), 3);
        assert_eq!(mesh.media[5].len(), 0);
        let d = mesh.drain(ShardId(2), 0, 100, |_| count += 1);
        assert_eq!((d.messages, d.more), (3, false));
    }
}
