//! One recording's thread: reads its queue (the shards' [`Feed`]s fill it),
//! hands each packet to its track's [`TrackRec`], asks the shards for the
//! keyframes the tracks want, publishes its status for `GET` a few times a
//! second, and at the end finalizes every file and writes the sidecar
//! `recording.json`. The first failure (a full disk) is told to the room
//! once, as a `recording` event with its error, through the shards.
//!
//! A thread of its own, outside the shards: file I/O never runs on one.
#![allow(
    clippy::disallowed_types,
    reason = "the recording's status, shared with the control thread only; shards never see it"
)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use corelay_core::engine::TapChange;
use corelay_core::events::RoomEvent;
use corelay_core::{RoomId, TrackKey};
use corelay_plane::ShardCommand;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use super::feed::Item;
use super::track::{FileStatus, TrackRec};

/// Tracks one recording writes at most (one file each).
const MAX_TRACKS: usize = 64;
/// Packets taken from the queue between two looks at the tracks' timers.
const ROUND: usize = 256;
/// The pause when the queue was empty: at most this much of the queue
/// fills between two rounds (at 3000 packets a second, about 30 of 4096).
const POLL: Duration = Duration::from_millis(10);
/// How often the status is published.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// A recording as `GET` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub id: String,
    pub room: String,
    /// `recording`, `stopped`, or `failed` (it stopped, and a file has an
    /// error).
    pub state: &'static str,
    pub dir: String,
    /// Unix milliseconds.
    pub started_ms: u64,
    pub stopped_ms: Option<u64>,
    /// Packets the recorder's queue refused (it fell behind).
    pub dropped_packets: u64,
    /// The first failure, if any (also in the `recording` event).
    pub error: Option<String>,
    pub files: Vec<FileStatus>,
}

pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What the thread needs.
pub struct Session {
    pub id: String,
    pub room_id: RoomId,
    pub dir: PathBuf,
    pub rx: Receiver<Item>,
    /// Per shard: where its keyframe wishes go.
    pub wants: Vec<SyncSender<TrackKey>>,
    /// The shards, to tell the room of a failure.
    pub shards: Vec<UnboundedSender<ShardCommand>>,
    pub status: Arc<Mutex<Status>>,
    pub stop: Arc<AtomicBool>,
    /// The tests' hung disk: a stall after the first packet (zero but in a
    /// `fault-injection` build's tests).
    pub stall: Duration,
}

impl Session {
    pub fn run(self) {
        let mut tracks: Vec<TrackRec> = Vec::new();
        let mut refused: Vec<FileStatus> = Vec::new();
        let mut dropped = 0u64;
        let mut told_failure = false;
        let mut published = Instant::now();
        let mut stalled = false;
        loop {
            let stopping = self.stop.load(Ordering::Acquire);
            // The queue is polled, never waited on: a shard's send then
            // never has a sleeping thread to wake (a futex call on the
            // shard per packet, measured at a few µs), and a round takes
            // what came since the last one.
            let mut taken = 0;
            let mut gone = false;
            while taken < ROUND {
                match self.rx.try_recv() {
                    Ok(item) => {
                        taken += 1;
                        dropped += item.dropped_before;
                        self.on_item(item, Instant::now(), &mut tracks, &mut refused);
                        if !stalled && !self.stall.is_zero() {
                            stalled = true;
                            std::thread::sleep(self.stall);
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        gone = true;
                        break;
                    }
                }
            }
            if gone || (stopping && taken == 0) {
                break;
            }
            if taken == 0 {
                std::thread::sleep(POLL);
            }
            let now = Instant::now();
            for t in &mut tracks {
                t.release(now);
                if t.wants_keyframe(now)
                    && let Some(tx) = self.wants.get(t.shard)
                {
                    let _ = tx.try_send(t.key);
                }
            }
            if now >= published + PUBLISH_EVERY {
                published = now;
                let error = self.publish(&tracks, &refused, dropped, None);
                if let Some(e) = error
                    && !told_failure
                {
                    told_failure = true;
                    tracing::warn!(recording = %self.id, "recording failed: {e}");
                    self.tell_room(true, Some(e));
                }
            }
        }
        for t in &mut tracks {
            t.finish();
        }
        let stopped = unix_ms(SystemTime::now());
        self.publish(&tracks, &refused, dropped, Some(stopped));
        let sidecar = self.status.lock().map(|s| s.clone()).ok();
        if let Some(s) = sidecar {
            let path = self.dir.join("recording.json");
            if let Err(e) = serde_json::to_vec_pretty(&s)
                .map_err(std::io::Error::other)
                .and_then(|b| std::fs::write(&path, b))
            {
                tracing::warn!(recording = %self.id, "cannot write {}: {e}", path.display());
            }
        }
        tracing::info!(recording = %self.id, files = tracks.len(), dropped, "recording stopped");
    }

    fn on_item(
        &self,
        item: Item,
        now: Instant,
        tracks: &mut Vec<TrackRec>,
        refused: &mut Vec<FileStatus>,
    ) {
        let key = item.media.track;
        let behind = item.dropped_before > 0;
        if behind {
            // The shard's queue dropped packets of some of its tracks.
            for t in tracks.iter_mut().filter(|t| t.shard == item.shard) {
                t.note_behind();
            }
        }
        if let Some(t) = tracks.iter_mut().find(|t| t.key == key) {
            t.push(item.media, now);
            return;
        }
        if refused
            .iter()
            .any(|f| f.participant == key.participant.to_string() && f.mid == key.mid.to_string())
        {
            return;
        }
        if tracks.len() + refused.len() >= MAX_TRACKS {
            return;
        }
        match TrackRec::new(&item.media, item.shard, &self.dir) {
            Ok(mut t) => {
                tracing::info!(recording = %self.id, file = %t.status.file, "recording a track");
                t.push(item.media, now);
                tracks.push(t);
            }
            Err(f) => refused.push(*f),
        }
    }

    /// Publishes the status; returns the first error of a file.
    fn publish(
        &self,
        tracks: &[TrackRec],
        refused: &[FileStatus],
        dropped: u64,
        stopped: Option<u64>,
    ) -> Option<String> {
        let files: Vec<FileStatus> = tracks
            .iter()
            .map(|t| t.status.clone())
            .chain(refused.iter().cloned())
            .collect();
        let error = tracks
            .iter()
            .filter(|t| t.failed())
            .find_map(|t| t.status.error.clone())
            .map(|e| format!("{}: {e}", self.dir.display()));
        if let Ok(mut s) = self.status.lock() {
            s.files = files;
            s.dropped_packets = dropped;
            if s.error.is_none() {
                s.error.clone_from(&error);
            }
            if let Some(t) = stopped {
                s.stopped_ms = Some(t);
                s.state = if s.error.is_some() {
                    "failed"
                } else {
                    "stopped"
                };
            }
        }
        error
    }

    fn tell_room(&self, active: bool, error: Option<String>) {
        let notice = RoomEvent::Recording {
            active,
            id: self.id.clone(),
            error,
        };
        for tx in &self.shards {
            let _ = tx.send(ShardCommand::Recording {
                room: self.room_id,
                change: TapChange::Notice,
                notice: notice.clone(),
            });
        }
    }
}
