//! The simulated network: one link per client (client ↔ server), each
//! direction with its own one-way delay, jitter, loss, reordering and a
//! bandwidth cap (a token bucket with a bounded queue), drawn from a seeded
//! RNG per direction (derived from the network's seed and the client's
//! address), so what happens to a link's n-th datagram depends only on the
//! seed and that link's own traffic, not on how links interleave. A link can be cut (everything sent on
//! it is dropped) to simulate a client that vanished.
//!
//! Owns datagrams in flight and per-direction counters. Must not: know
//! anything about WebRTC, read a clock or sleep (time is the `now` it is
//! given; delivery times are values).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How one direction of a link behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkParams {
    /// Base one-way delay.
    pub delay: Duration,
    /// Extra delay, uniform in `0..=jitter` per datagram (reorders when larger
    /// than the gap between datagrams).
    pub jitter: Duration,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is held back by `reorder_delay` (reordering).
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    pub reorder_delay: Duration,
    /// Bandwidth cap in bits per second (`None`: unlimited).
    pub rate_bps: Option<u64>,
    /// Token bucket size: bytes that may leave back to back at line rate.
    pub burst_bytes: usize,
    /// Bytes that may wait for tokens; a datagram that would exceed it is dropped.
    pub queue_bytes: usize,
}

impl Default for LinkParams {
    /// 5 ms one way, no jitter, no loss, no cap.
    fn default() -> Self {
        LinkParams {
            delay: Duration::from_millis(5),
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(15),
            rate_bps: None,
            burst_bytes: 15_000,
            queue_bytes: 64 * 1024,
        }
    }
}

/// Datagrams a [`Dir::tap`] keeps at most.
pub const TAP_MAX: usize = 20_000;

/// What happened to the datagrams sent in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Datagrams offered to the link.
    pub sent: u64,
    /// Lost at random.
    pub lost: u64,
    /// Dropped because the bandwidth queue was full.
    pub queue_drops: u64,
    /// Dropped because the link was cut.
    pub cut_drops: u64,
    /// Held back to reorder.
    pub reordered: u64,
    /// Handed to the receiver.
    pub delivered: u64,
}

/// One direction: parameters, token bucket, counters.
#[derive(Debug, Clone)]
pub struct Dir {
    /// Behaviour.
    pub params: LinkParams,
    /// Counters.
    pub stats: DirStats,
    /// When set, a copy of each datagram handed to the receiver, up to
    /// [`TAP_MAX`] (what an attacker on the path sees, to replay or alter).
    pub tap: Option<Vec<Vec<u8>>>,
    /// Token bucket as GCRA: when the bucket would be full again (the
    /// "theoretical arrival time" of the next datagram at line rate).
    tat: Option<Instant>,
    rng: fastrand::Rng,
}

impl Dir {
    fn new(seed: u64) -> Self {
        Dir {
            params: LinkParams::default(),
            stats: DirStats::default(),
            tap: None,
            tat: None,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// When a datagram of `size` bytes offered at `now` leaves, or `None`
    /// when the queue in front of the cap is full.
    fn depart(&mut self, now: Instant, size: usize) -> Option<Instant> {
        let Some(rate) = self.params.rate_bps.filter(|r| *r > 0) else {
            return Some(now);
        };
        let bytes_time = |b: usize| Duration::from_nanos((b as u64 * 8 * 1_000_000_000) / rate);
        let burst = bytes_time(self.params.burst_bytes);
        let tat = self.tat.unwrap_or(now).max(now) + bytes_time(size);
        // Conforming (tokens left) leaves now; otherwise it waits until the
        // bucket has refilled enough, unless that wait exceeds the queue.
        let depart = now.max(tat.checked_sub(burst).unwrap_or(now));
        if depart.saturating_duration_since(now) > bytes_time(self.params.queue_bytes) {
            return None;
        }
        self.tat = Some(tat);
        Some(depart)
    }
}

/// Both directions of one client's link.
#[derive(Debug, Clone)]
pub struct Link {
    /// Client → server.
    pub up: Dir,
    /// Server → client.
    pub down: Dir,
    /// Cut: everything sent either way is dropped.
    pub cut: bool,
}

/// A datagram on its way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// When it arrives.
    pub at: Instant,
    /// Sender.
    pub from: SocketAddr,
    /// Receiver.
    pub to: SocketAddr,
    /// Bytes.
    pub data: Vec<u8>,
    /// Tie-break: order of sending (keeps delivery deterministic).
    seq: u64,
}

impl Ord for Datagram {
    fn cmp(&self, other: &Self) -> Ordering {
        // Min-heap on (at, seq).
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Datagram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Every link and every datagram in flight.
pub struct Net {
    links: HashMap<SocketAddr, Link>,
    inflight: BinaryHeap<Datagram>,
    seq: u64,
    seed: u64,
}

impl Net {
    /// An empty network whose randomness comes from `seed`.
    pub fn new(seed: u64) -> Self {
        Net {
            links: HashMap::new(),
            inflight: BinaryHeap::new(),
            seq: 0,
            seed,
        }
    }

    fn new_link(&self, client: SocketAddr) -> Link {
        // FNV-1a over the address text: stable across runs and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ self.seed;
        for b in client.to_string().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Link {
            up: Dir::new(h),
            down: Dir::new(h.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15),
            cut: false,
        }
    }

    /// The link of the client at `client` (created with defaults).
    pub fn link_mut(&mut self, client: SocketAddr) -> &mut Link {
        if !self.links.contains_key(&client) {
            let l = self.new_link(client);
            self.links.insert(client, l);
        }
        self.links.get_mut(&client).expect("inserted above")
    }

    /// The link of the client at `client`, if it has one.
    pub fn link(&self, client: SocketAddr) -> Option<&Link> {
        self.links.get(&client)
    }

    /// Offer a datagram to `client`'s link: `up` from the client, else to it.
    pub fn send(
        &mut self,
        now: Instant,
        client: SocketAddr,
        up: bool,
        from: SocketAddr,
        to: SocketAddr,
        data: &[u8],
    ) {
        let link = self.link_mut(client);
        let cut = link.cut;
        let dir = if up { &mut link.up } else { &mut link.down };
        dir.stats.sent += 1;
        if cut {
            dir.stats.cut_drops += 1;
            return;
        }
        // Draw every random number for every datagram, in the same order,
        // so one parameter change does not reshuffle the others' outcomes.
        let lost = dir.rng.f64() < dir.params.loss;
        let jitter_draw = dir.rng.f64();
        let reordered = dir.rng.f64() < dir.params.reorder;
        if lost {
            dir.stats.lost += 1;
            return;
        }
        let Some(depart) = dir.depart(now, data.len()) else {
            dir.stats.queue_drops += 1;
            return;
        };
        let mut at = depart + dir.params.delay + dir.params.jitter.mul_f64(jitter_draw);
        if reordered {
            dir.stats.reordered += 1;
            at += dir.params.reorder_delay;
        }
        dir.stats.delivered += 1;
        if let Some(tap) = dir.tap.as_mut().filter(|t| t.len() < TAP_MAX) {
            tap.push(data.to_vec());
        }
        self.seq += 1;
        self.inflight.push(Datagram {
            at,
            from,
            to,
            data: data.to_vec(),
            seq: self.seq,
        });
    }

    /// When the next datagram arrives.
    pub fn next_at(&self) -> Option<Instant> {
        self.inflight.peek().map(|d| d.at)
    }

    /// The next datagram due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Datagram> {
        if self.inflight.peek().is_some_and(|d| d.at <= now) {
            self.inflight.pop()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], p))
    }

    #[test]
    fn token_bucket_caps_and_drops() {
        let now = Instant::now();
        let mut net = Net::new(1);
        let c = addr(1);
        {
            let l = net.link_mut(c);
            l.up.params.delay = Duration::ZERO;
            l.up.params.rate_bps = Some(800_000); // 100 kB/s: 1000 bytes per 10 ms
            l.up.params.burst_bytes = 1000;
            l.up.params.queue_bytes = 5000;
        }
        for _ in 0..20 {
            net.send(now, c, true, c, addr(2), &[0u8; 1000]);
        }
        let st = net.link(c).unwrap().up.stats;
        assert_eq!(st.sent, 20);
        // One bucket plus five queued (~6) get through; the rest is dropped.
        assert!((5..=7).contains(&st.delivered), "{st:?}");
        assert_eq!(st.delivered + st.queue_drops, 20);
        let mut last = now;
        while let Some(d) = net.pop_due(now + Duration::from_secs(1)) {
            assert!(d.at >= last);
            last = d.at;
        }
        assert!(last >= now + Duration::from_millis(50), "{:?}", last - now);
    }

    #[test]
    fn loss_is_seeded_and_cut_drops_everything() {
        let run = |seed| {
            let now = Instant::now();
            let mut net = Net::new(seed);
            let c = addr(1);
            net.link_mut(c).down.params.loss = 0.3;
            for _ in 0..1000 {
                net.send(now, c, false, addr(2), c, &[1]);
            }
            net.link(c).unwrap().down.stats.lost
        };
        assert_eq!(run(7), run(7));
        assert!((200..400).contains(&run(7)));
        let now = Instant::now();
        let mut net = Net::new(1);
        net.link_mut(addr(1)).cut = true;
        net.send(now, addr(1), true, addr(1), addr(2), &[1]);
        assert_eq!(net.next_at(), None);
        assert_eq!(net.link(addr(1)).unwrap().up.stats.cut_drops, 1);
    }
}
