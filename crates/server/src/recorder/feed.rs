//! A recording's end inside one shard ([`RoomTap`]): each packet a
//! publisher of the room sends to this shard goes, copied, into the
//! recorder's bounded queue with `try_send`. A full queue (the recorder fell
//! behind: a slow or full disk) drops the packet, counts it, and the next
//! packet that gets through carries the count, so the recorder knows where
//! the gap is. Never blocks, never touches a file.
//!
//! Runs on the shard: no panics, no locks, no shared atomics (the queue's
//! own synchronisation aside, which is what a bounded queue between threads
//! is).

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use corelay_core::TrackKey;
use corelay_core::engine::{RoomTap, Tapped};
use corelay_core::media::{MediaCopy, MediaPacket};
use str0m::media::MediaKind;

/// One packet for the recorder.
#[derive(Debug)]
pub struct Item {
    /// The shard it came from (where its track's keyframes are asked).
    pub shard: usize,
    /// Packets of this room this shard's queue refused since the last one
    /// it took.
    pub dropped_before: u64,
    pub media: MediaCopy,
}

/// The tap: a sender into the recorder's queue and the recorder's keyframe
/// wishes for this shard's tracks.
#[derive(Debug)]
pub struct Feed {
    pub shard: usize,
    pub tx: SyncSender<Item>,
    /// Tracks the recorder wants a keyframe of (at their start, after loss).
    pub wants: Receiver<TrackKey>,
    /// Wishes read but whose track has sent no packet here since.
    pub wanted: Vec<TrackKey>,
    pub dropped: u64,
}

/// Wishes kept at most (a recorder asks for a few tracks at a time).
const MAX_WANTED: usize = 64;

impl RoomTap for Feed {
    fn offer(&mut self, media: &MediaPacket) -> Tapped {
        let mut t = Tapped::default();
        // One simulcast layer is recorded: the lowest (layer 0), which
        // every simulcast publisher sends and a single-layer track is.
        if media.layer != 0 {
            return t;
        }
        while let Ok(k) = self.wants.try_recv() {
            if !self.wanted.contains(&k) && self.wanted.len() < MAX_WANTED {
                self.wanted.push(k);
            }
        }
        if media.kind == MediaKind::Video
            && let Some(i) = self.wanted.iter().position(|k| *k == media.track)
        {
            self.wanted.swap_remove(i);
            t.keyframe = true;
        }
        let item = Item {
            shard: self.shard,
            dropped_before: self.dropped,
            media: media.to_copy(),
        };
        match self.tx.try_send(item) {
            Ok(()) => {
                self.dropped = 0;
                t.queued = true;
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped = self.dropped.saturating_add(1);
                t.dropped = true;
            }
        }
        t
    }
}
