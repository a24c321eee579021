//! The cross-shard mesh: one bounded, lossy queue per ordered shard pair and
//! one wake-up per shard.
//!
//! Media crosses at most one hop: the publisher's shard pushes a copy into the
//! queue of each peer shard hosting the room, then wakes each touched peer once
//! per batch. A full queue drops the packet and the sender counts it: a shard
//! never waits for another (DESIGN.md rules 1-3).

use crossbeam_queue::ArrayQueue;
use tokio::sync::Notify;

use corelay_core::{PeerMsg, ShardId};

/// Capacity of each queue: ~100 ms of a busy room's media.
pub const QUEUE_CAPACITY: usize = 4096;

pub struct Mesh {
    /// `queues[from * n + to]`.
    queues: Vec<ArrayQueue<PeerMsg>>,
    wake: Vec<Notify>,
    n: usize,
}

impl Mesh {
    pub fn new(n: usize) -> Self {
        Mesh {
            queues: (0..n * n)
                .map(|_| ArrayQueue::new(QUEUE_CAPACITY))
                .collect(),
            wake: (0..n).map(|_| Notify::new()).collect(),
            n,
        }
    }

    /// Enqueues without waiting; false (and the message dropped) when the
    /// queue is full.
    pub fn push(&self, ShardId(from): ShardId, ShardId(to): ShardId, msg: PeerMsg) -> bool {
        match self.queues.get(from * self.n + to) {
            Some(q) if to != from => q.push(msg).is_ok(),
            _ => false,
        }
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

    /// Pops one message for `me` from any peer, up to `budget` per call.
    pub fn drain(&self, ShardId(me): ShardId, budget: usize, mut f: impl FnMut(PeerMsg)) -> usize {
        let mut n = 0;
        for from in 0..self.n {
            let Some(q) = self.queues.get(from * self.n + me) else {
                continue;
            };
            while n < budget {
                let Some(m) = q.pop() else { break };
                f(m);
                n += 1;
            }
        }
        n
    }
}
