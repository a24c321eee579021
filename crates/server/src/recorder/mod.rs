//! Recording (issue 53): every published track of a room into its own WebM
//! file under `--recordings-dir`/ROOM/ID/, written as a subscriber inside
//! the server.
//!
//! - [`feed`]: the recording's end on each shard (a `RoomTap`): a copy of
//!   each packet the shard receives from a publisher of the room, into a
//!   bounded queue with `try_send`; full, it drops and counts, and never
//!   waits.
//! - [`session`]: the recording's own thread, outside the shards: reorders,
//!   depacketizes and writes ([`track`]), asks for keyframes, publishes its
//!   status, finalizes the files and writes `recording.json`.
//! - this module: [`Recordings`], the control thread's book of them: start
//!   (the directory checked writable, the taps to every shard, the thread),
//!   stop (the taps withdrawn, the thread joined), the listing; the limits.
//!
//! Must not: run on a shard (only `Feed::offer` does), or block the control
//! thread for longer than a directory check and a thread's last writes
//! (a stop's join runs on tokio's blocking pool).
#![allow(
    clippy::disallowed_types,
    reason = "a recording's status and stop flag, shared by the control thread and the recording's thread only; shards never see them"
)]

pub mod feed;
pub mod session;
pub mod track;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::SystemTime;

use corelay_core::RoomId;
use corelay_core::engine::TapChange;
use corelay_core::events::RoomEvent;
use corelay_plane::{ShardCommand, ShardHandle};

pub use self::session::Status;
use self::session::{Session, unix_ms};

/// Packets a recording's queue holds (about 11 s of a 4-party room's media
/// at 400 kbps video; each recording has its own): a recorder further
/// behind drops.
pub const QUEUE_PACKETS: usize = 4096;
/// Finished recordings `GET` still lists (the oldest go first).
const KEEP_FINISHED: usize = 64;

#[derive(Clone, Debug)]
pub struct Settings {
    pub dir: PathBuf,
    pub max_active: usize,
    /// Packets a recording's queue holds ([`QUEUE_PACKETS`]; the tests'
    /// `--test-recording-queue` makes it small).
    pub queue: usize,
    /// The tests' hung disk (`--test-recorder-stall-ms`): the thread stops
    /// this long after its first packet. Zero in any other build.
    pub stall: std::time::Duration,
}

/// Why a recording could not start or stop.
#[derive(Debug, PartialEq, Eq)]
pub enum RecError {
    /// The directory cannot be written, or this runtime cannot record.
    Unavailable(String),
    AlreadyRecording(String),
    TooMany(usize),
    NotFound,
}

struct Active {
    room_id: RoomId,
    status: Arc<Mutex<Status>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A stopped recording whose thread is finishing its files.
pub struct Stopping {
    thread: Option<JoinHandle<()>>,
    status: Arc<Mutex<Status>>,
}

impl Stopping {
    /// Waits for the files to be finalized (a blocking call: not on the
    /// control thread's runtime) and returns the final status.
    pub fn finish(mut self) -> Option<Status> {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.status.lock().ok().map(|s| s.clone())
    }
}

pub struct Recordings {
    settings: Settings,
    /// Whether the data plane can record (the pinned shards; not the
    /// work-stealing baseline).
    supported: bool,
    active: Vec<Active>,
    /// Stopped recordings (their thread may still be finishing), newest
    /// last.
    stopped: Vec<Arc<Mutex<Status>>>,
    counter: u64,
}

impl Recordings {
    pub fn new(settings: Settings, supported: bool) -> Self {
        Recordings {
            settings,
            supported,
            active: Vec::new(),
            stopped: Vec::new(),
            counter: 0,
        }
    }

    pub fn max_active(&self) -> usize {
        self.settings.max_active
    }

    /// Starts recording `room`: its directory made and checked, a tap on
    /// every shard, the thread. Returns its first status.
    pub fn start(
        &mut self,
        room: &str,
        room_id: RoomId,
        shards: &[ShardHandle],
    ) -> Result<Status, RecError> {
        if !self.supported {
            return Err(RecError::Unavailable(
                "recording needs the pinned shards (--runtime thread-per-core)".into(),
            ));
        }
        if let Some(a) = self.active.iter().find(|a| a.room_id == room_id) {
            let id = a.status.lock().map(|s| s.id.clone()).unwrap_or_default();
            return Err(RecError::AlreadyRecording(id));
        }
        if self.active.len() >= self.settings.max_active {
            return Err(RecError::TooMany(self.settings.max_active));
        }
        let started = SystemTime::now();
        self.counter += 1;
        let id = format!("rec-{}-{}", unix_ms(started), self.counter);
        let dir = self.settings.dir.join(room).join(&id);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("recording.json"), b"{}\n"))
            .map_err(|e| {
                RecError::Unavailable(format!("cannot write to {}: {e}", dir.display()))
            })?;
        let status = Arc::new(Mutex::new(Status {
            id: id.clone(),
            room: room.to_string(),
            state: "recording",
            dir: dir.display().to_string(),
            started_ms: unix_ms(started),
            stopped_ms: None,
            dropped_packets: 0,
            error: None,
            files: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel(self.settings.queue);
        let notice = RoomEvent::Recording {
            active: true,
            id: id.clone(),
            error: None,
        };
        let mut wants = Vec::new();
        for (i, s) in shards.iter().enumerate() {
            let (want_tx, want_rx) = sync_channel(64);
            wants.push(want_tx);
            let tap = feed::Feed {
                shard: i,
                tx: tx.clone(),
                wants: want_rx,
                wanted: Vec::new(),
                dropped: 0,
            };
            let _ = s.commands.send(ShardCommand::Recording {
                room: room_id,
                change: TapChange::Start(Box::new(tap)),
                notice: notice.clone(),
            });
        }
        drop(tx);
        let session = Session {
            id: id.clone(),
            room_id,
            dir,
            rx,
            wants,
            shards: shards.iter().map(|s| s.commands.clone()).collect(),
            status: status.clone(),
            stop: stop.clone(),
            stall: self.settings.stall,
        };
        let thread = std::thread::Builder::new()
            .name(format!("corelay-rec-{}", self.counter))
            .spawn(move || session.run())
            .map_err(|e| RecError::Unavailable(format!("cannot start its thread: {e}")))?;
        tracing::info!(recording = %id, room, "recording started");
        let first = status.lock().map(|s| s.clone()).ok();
        self.active.push(Active {
            room_id,
            status,
            stop,
            thread: Some(thread),
        });
        first.ok_or(RecError::NotFound)
    }

    /// Stops recording `id` of `room`: the shards' taps are withdrawn and
    /// the room told; the thread finishes its files. Returns the thread to
    /// join (off the control thread) and the status to read after it.
    pub fn stop(
        &mut self,
        room_id: RoomId,
        id: &str,
        shards: &[ShardHandle],
    ) -> Result<Stopping, RecError> {
        let at = self
            .active
            .iter()
            .position(|a| a.room_id == room_id && a.status.lock().is_ok_and(|s| s.id == id))
            .ok_or(RecError::NotFound)?;
        let mut a = self.active.swap_remove(at);
        a.stop.store(true, Ordering::Release);
        let notice = RoomEvent::Recording {
            active: false,
            id: id.to_string(),
            error: a.status.lock().ok().and_then(|s| s.error.clone()),
        };
        for s in shards {
            let _ = s.commands.send(ShardCommand::Recording {
                room: room_id,
                change: TapChange::Stop,
                notice: notice.clone(),
            });
        }
        let status = a.status.clone();
        self.finished_push(status.clone());
        Ok(Stopping {
            thread: a.thread.take(),
            status,
        })
    }

    /// Stops every running recording (the server shuts down): the threads
    /// to join so that their files are finalized.
    pub fn stop_all(&mut self, shards: &[ShardHandle]) -> Vec<Stopping> {
        let running: Vec<(RoomId, String)> = self
            .active
            .iter()
            .filter_map(|a| a.status.lock().ok().map(|s| (a.room_id, s.id.clone())))
            .collect();
        running
            .into_iter()
            .filter_map(|(room, id)| self.stop(room, &id, shards).ok())
            .collect()
    }

    fn finished_push(&mut self, status: Arc<Mutex<Status>>) {
        self.stopped.push(status);
        if self.stopped.len() > KEEP_FINISHED {
            self.stopped.remove(0);
        }
    }

    /// The recordings of `room`, running and stopped, oldest first.
    pub fn list(&self, room: &str) -> Vec<Status> {
        let mut out: Vec<Status> = self
            .stopped
            .iter()
            .chain(self.active.iter().map(|a| &a.status))
            .filter_map(|s| s.lock().ok().map(|s| s.clone()))
            .filter(|s| s.room == room)
            .collect();
        out.sort_by_key(|s| s.started_ms);
        out
    }

    /// The running recordings (for `/api/v1/stats` and the metrics).
    pub fn active_count(&self) -> usize {
        self.active.len()
    }
}
