//! "Why is my call bad?", live (issue 52): once a second, when a shard's
//! per-participant figures arrive, each slot of each of its subscribers is
//! judged by [`corelay_core::diagnosis::judge`] from the subscriber's
//! figures, those of the publisher it shows (on any shard), the roster's
//! state of that track, and both shards' own figures over that second.
//!
//! Owns each shard's second (its dwell, forwarding and cross-shard hop
//! p99s, busy and drops,
//! from the differences of its reports) and the logging: one WARN when a
//! slot has been bad for 10 s (at most one a minute per participant),
//! naming the cause in words, and one line with the totals when the
//! participant leaves. The verdicts themselves, their history and totals
//! are the core's [`Board`], which the simulator keeps too. Must not: touch
//! media or the shards (it reads what they reported).

use std::collections::HashMap;
use std::time::Instant;

use corelay_core::ParticipantId;
use corelay_core::diagnosis::{Board, ShardSecond, ShardTotals, SlotOut, WARN_AFTER};
use corelay_core::metrics::ParticipantStats;
use corelay_plane::ShardReport;

use super::rooms::Directory;

/// Where a shard's current second started, and its last whole one.
#[derive(Default)]
struct ShardWindow {
    /// The shard's totals at the start of the current second.
    start: Option<ShardTotals>,
    /// The busiest report of the current second.
    busy: f64,
    last: ShardSecond,
}

impl ShardWindow {
    /// A report: the busiest of the second so far; with `close`, the
    /// second ends here.
    fn report(&mut self, r: &ShardReport, close: bool) {
        self.busy = self.busy.max(r.busy);
        if !close {
            return;
        }
        let mut forward = r.forward_local;
        forward.add(&r.forward_cross);
        let totals = ShardTotals {
            dwell: r.dwell,
            forward,
            peer_hop: r.peer_hop,
            drops: r.counters.dropped_send + r.counters.cross_shard_dropped,
        };
        self.last = match &self.start {
            Some(start) => ShardSecond::between(self.busy, start, &totals),
            None => ShardSecond {
                busy: self.busy,
                ..ShardSecond::default()
            },
        };
        self.start = Some(totals);
        self.busy = 0.0;
    }
}

/// The shards' seconds and the board of verdicts.
#[derive(Default)]
pub struct Diagnoses {
    shards: Vec<ShardWindow>,
    board: Board,
}

impl Diagnoses {
    pub fn new(shards: usize) -> Diagnoses {
        Diagnoses {
            shards: (0..shards).map(|_| ShardWindow::default()).collect(),
            board: Board::new(shards),
        }
    }

    /// A shard's report. When it carries per-participant figures (once a
    /// second: `judged`, their ids), the shard's second ends and those
    /// participants are judged: `detail` is every participant's latest
    /// figures (the publishers' included), `rooms` the directory.
    pub fn on_report(
        &mut self,
        now: Instant,
        r: &ShardReport,
        judged: Option<&[ParticipantId]>,
        detail: &HashMap<ParticipantId, ParticipantStats>,
        rooms: &Directory,
    ) {
        if let Some(w) = self.shards.get_mut(r.shard.0) {
            w.report(r, judged.is_some());
        }
        let seconds: Vec<ShardSecond> = self.shards.iter().map(|w| w.last).collect();
        for id in judged.unwrap_or_default() {
            let Some(st) = detail.get(id) else { continue };
            if let Some(words) = self.board.judge(now, r.shard, st, detail, rooms, &seconds) {
                let room = rooms.member(*id).map(|(room, _)| room).unwrap_or_default();
                tracing::warn!(participant = %id, room, "bad for {WARN_AFTER} s: {words}");
            }
        }
    }

    /// The participant left: one line with its slots' totals.
    pub fn left(&mut self, id: ParticipantId, room: &str) {
        if let Some(summary) = self.board.left(id) {
            tracing::info!(participant = %id, room, diagnosis = %summary, "call diagnosis");
        }
    }

    pub fn view(&self, id: ParticipantId) -> Option<Vec<SlotOut>> {
        self.board.view(id)
    }

    pub fn shard_seconds(&self, shard: usize) -> Vec<(&'static str, u64)> {
        self.board.shard_seconds(shard)
    }
}
