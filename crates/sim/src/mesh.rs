//! The simulated mesh between shards: what the server's `shard::mesh` is
//! (two bounded lanes per ordered shard pair, a lossy media lane and a
//! control lane that never loses, through each sender's
//! [`ControlOutbox`]), in deques, so a test can fill a lane or hold a
//! shard's draining and see what crosses.
//!
//! Must not: decide lanes or coalescing itself: [`PeerMsg::lane`] and
//! [`ControlOutbox`] are the engine crate's, used here as the server uses
//! them.

use std::collections::VecDeque;

use corelay_core::{ControlOutbox, Lane, PeerMsg, ShardId};

/// The server's capacities (`shard::mesh`): 4096 media, 256 control.
pub const MEDIA_CAPACITY: usize = 4096;
pub const CONTROL_CAPACITY: usize = 256;

#[derive(Default)]
struct Pair {
    media: VecDeque<PeerMsg>,
    control: VecDeque<PeerMsg>,
    media_capacity: usize,
    control_capacity: usize,
}

/// Lanes for `n` shards, an outbox each, and what was dropped.
pub struct SimMesh {
    n: usize,
    /// `pairs[from * n + to]`.
    pairs: Vec<Pair>,
    outboxes: Vec<ControlOutbox>,
    held: Vec<bool>,
    /// Media messages a full lane dropped (the shard's `cross_shard_dropped`).
    pub media_dropped: u64,
    /// Control messages handed to a peer, and media.
    pub control_delivered: u64,
    pub media_delivered: u64,
}

impl SimMesh {
    pub fn new(n: usize) -> SimMesh {
        SimMesh {
            n,
            pairs: (0..n * n)
                .map(|_| Pair {
                    media_capacity: MEDIA_CAPACITY,
                    control_capacity: CONTROL_CAPACITY,
                    ..Pair::default()
                })
                .collect(),
            outboxes: (0..n).map(|_| ControlOutbox::new()).collect(),
            held: vec![false; n],
            media_dropped: 0,
            control_delivered: 0,
            media_delivered: 0,
        }
    }

    /// Sets the capacities of the lanes from `from` to `to` (0: the lane is
    /// full, every push refused).
    pub fn set_capacity(&mut self, from: usize, to: usize, media: usize, control: usize) {
        if let Some(p) = self.pairs.get_mut(from * self.n + to) {
            p.media_capacity = media;
            p.control_capacity = control;
        }
    }

    /// A held shard drains none of its lanes (as a shard busy elsewhere):
    /// its lanes fill up.
    pub fn hold(&mut self, shard: usize, held: bool) {
        if let Some(h) = self.held.get_mut(shard) {
            *h = held;
        }
    }

    /// Control messages shard `from` still holds in its outbox.
    pub fn outbox_len(&self, from: usize) -> usize {
        self.outboxes.get(from).map_or(0, ControlOutbox::len)
    }

    /// Messages waiting in the lanes into `to`: (media, control).
    pub fn queued_into(&self, to: usize) -> (usize, usize) {
        (0..self.n)
            .filter_map(|f| self.pairs.get(f * self.n + to))
            .fold((0, 0), |(m, c), p| (m + p.media.len(), c + p.control.len()))
    }

    /// Routes shard `from`'s peer messages: its outbox first, then each
    /// message onto its lane. Returns whether anything moved.
    #[allow(
        clippy::result_large_err,
        reason = "the message comes back by value, as the server's lanes give it"
    )]
    pub fn route(&mut self, from: usize, msgs: Vec<(ShardId, PeerMsg)>) -> bool {
        let n = self.n;
        let Some(outbox) = self.outboxes.get_mut(from) else {
            return false;
        };
        let pairs = &mut self.pairs;
        let mut moved = outbox.flush(|t, m| push(pairs, n, from, t, m)) != 0;
        for (to, msg) in msgs {
            moved = true;
            if msg.lane() == Lane::Control {
                outbox.send(to, msg, |t, m| push(pairs, n, from, t, m));
            } else if push(pairs, n, from, to, msg).is_err() {
                self.media_dropped += 1;
            }
        }
        moved
    }

    /// Takes what shard `to` drains now (nothing while it is held): every
    /// peer's control first, then media, as the server's shard does.
    pub fn drain(&mut self, to: usize) -> Vec<PeerMsg> {
        let mut got = Vec::new();
        if self.held.get(to).copied().unwrap_or(true) {
            return got;
        }
        for from in 0..self.n {
            if let Some(p) = self.pairs.get_mut(from * self.n + to) {
                self.control_delivered += p.control.len() as u64;
                got.extend(p.control.drain(..));
            }
        }
        for from in 0..self.n {
            if let Some(p) = self.pairs.get_mut(from * self.n + to) {
                self.media_delivered += p.media.len() as u64;
                got.extend(p.media.drain(..));
            }
        }
        got
    }
}

/// Puts `m` on its lane from `from` to `to`, or gives it back when that
/// lane is full. A message for no peer is refused too (media counts it as
/// dropped; the outbox would keep it, so control for no peer is let go).
#[allow(
    clippy::result_large_err,
    reason = "the message comes back by value, as the server's lanes give it"
)]
fn push(pairs: &mut [Pair], n: usize, from: usize, to: ShardId, m: PeerMsg) -> Result<(), PeerMsg> {
    let lane = m.lane();
    let Some(p) = pairs
        .get_mut(from * n + to.0)
        .filter(|_| to.0 != from && to.0 < n)
    else {
        return if lane == Lane::Control {
            Ok(())
        } else {
            Err(m)
        };
    };
    let (queue, capacity) = match lane {
        Lane::Media => (&mut p.media, p.media_capacity),
        Lane::Control => (&mut p.control, p.control_capacity),
    };
    if queue.len() < capacity {
        queue.push_back(m);
        Ok(())
    } else {
        Err(m)
    }
}
