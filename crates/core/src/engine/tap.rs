//! Recording taps (issue 53): a room being recorded has one tap on every
//! shard, and the shard hands it each packet it receives from a publisher
//! of that room, once, on the publisher's shard (copies that crossed from a
//! peer shard are not tapped again).
//!
//! The tap is the server's (`corelay::recorder`): a bounded, non-blocking
//! queue to a recorder thread outside the shards, which drops and counts
//! when it is full. The engine only holds it, hands it packets, asks for the
//! keyframes it wants through the shard's keyframe-request path, and tells
//! the room's members that a recording runs (a `recording` event, also on
//! each newcomer's data channel). With no recording the per-packet cost is
//! one branch on an empty `Vec`.
//!
//! Owns: the taps and the room's recording notice. Must not: block, write a
//! file, or decide what is recorded (the tap does).

use std::fmt::Debug;
use std::time::Instant;

use super::Engine;
use crate::events::RoomEvent;
use crate::ids::{LayerKey, ParticipantId, RoomId};
use crate::media::MediaPacket;

/// What a tap did with a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tapped {
    /// Queued for the recorder.
    pub queued: bool,
    /// Refused: the recorder's queue was full (or it is gone). Counted.
    pub dropped: bool,
    /// The recorder wants a keyframe of this packet's track (its start, or
    /// after a loss): the shard asks the publisher, within its rate limit.
    pub keyframe: bool,
}

/// A recorder's end inside one shard. Never blocks.
pub trait RoomTap: Send + Debug {
    /// A packet a publisher of the tapped room sent to this shard.
    fn offer(&mut self, media: &MediaPacket) -> Tapped;
}

/// A change to one room's recording on this shard.
#[derive(Debug)]
pub enum TapChange {
    /// A recording starts: this shard's tap for it.
    Start(Box<dyn RoomTap>),
    /// The recording goes on; only its notice changed (a failure).
    Notice,
    /// The recording ended: the tap is dropped (its queue's sender with it).
    Stop,
}

#[derive(Debug)]
struct Entry {
    room: RoomId,
    tap: Box<dyn RoomTap>,
    /// The `recording` event a member joining now is sent.
    notice: RoomEvent,
}

/// The taps of the rooms recorded now: empty almost always.
#[derive(Debug, Default)]
pub(super) struct Taps {
    entries: Vec<Entry>,
}

impl Taps {
    /// Whether any room is recorded: the one branch on the packet path.
    #[inline]
    pub(super) fn any(&self) -> bool {
        !self.entries.is_empty()
    }
}

impl Engine {
    /// Starts, updates or stops the recording of `room` on this shard, and
    /// sends `notice` (a `recording` event) to the room's local members.
    pub fn set_recording(
        &mut self,
        now: Instant,
        room: RoomId,
        change: TapChange,
        notice: RoomEvent,
    ) {
        let at = self.taps.entries.iter().position(|e| e.room == room);
        match (change, at) {
            (TapChange::Start(tap), Some(i)) => {
                if let Some(e) = self.taps.entries.get_mut(i) {
                    e.tap = tap;
                    e.notice = notice.clone();
                }
            }
            (TapChange::Start(tap), None) => self.taps.entries.push(Entry {
                room,
                tap,
                notice: notice.clone(),
            }),
            (TapChange::Notice, Some(i)) => {
                if let Some(e) = self.taps.entries.get_mut(i) {
                    e.notice = notice.clone();
                }
            }
            (TapChange::Notice, None) => {}
            (TapChange::Stop, Some(i)) => {
                self.taps.entries.swap_remove(i);
            }
            (TapChange::Stop, None) => {}
        }
        let local = self
            .rooms
            .get(&room)
            .map(|r| r.local.clone())
            .unwrap_or_default();
        for id in local {
            self.send_event(now, id, &notice);
        }
    }

    /// A publisher's packet received here, to the room's tap if it has one.
    pub(super) fn tap(&mut self, now: Instant, room: RoomId, media: &MediaPacket) {
        let Some(e) = self.taps.entries.iter_mut().find(|e| e.room == room) else {
            return;
        };
        let t = e.tap.offer(media);
        if t.queued {
            self.io.counters.recording_queued += 1;
        }
        if t.dropped {
            self.io.counters.recording_dropped += 1;
        }
        if t.keyframe {
            self.request_keyframe(
                now,
                LayerKey {
                    track: media.track,
                    layer: media.layer,
                },
            );
        }
    }

    /// A newcomer's data channel opened: the room's recording notice, if
    /// it is recorded.
    pub(super) fn send_recording_notice(&mut self, now: Instant, id: ParticipantId, room: RoomId) {
        let notice = self
            .taps
            .entries
            .iter()
            .find(|e| e.room == room)
            .map(|e| e.notice.clone());
        if let Some(n) = notice {
            self.send_event(now, id, &n);
        }
    }
}
