//! An emulated downlink bottleneck: a token bucket at a fixed rate with a
//! bounded queue, applied to datagrams from the server before the
//! participant's str0m sees them (see [`crate::driver`]).
//!
//! Sans-I/O: time is the caller's `now`. A datagram that finds tokens and
//! an empty queue passes at once ([`Verdict::Pass`]); otherwise it waits in
//! the queue until the bucket has drained the bytes ahead of it
//! ([`Verdict::Queued`], released by [`Shaper::pop_due`] at its release
//! time, which the driver hands to str0m as the receive time: the server's
//! bandwidth estimator sees the queueing delay in the TWCC feedback), or,
//! when the queue would exceed its byte limit, it is dropped
//! ([`Verdict::Dropped`]: loss, as a router's tail drop).
//!
//! The bucket is kept as one "theoretical drain time" (GCRA): the instant
//! at which everything admitted so far has gone through at `rate`. A
//! datagram of `n` bytes arriving at `now` departs at
//! `max(now, drain - burst)` and moves `drain` to `max(drain, now) + n/rate`:
//! exactly a token bucket of depth `burst` (in time at `rate`) refilled at
//! `rate`. Departures are in arrival order.
//!
//! Bounded: queued bytes never exceed the limit and queued datagrams never
//! exceed [`MAX_QUEUED`]; buffers are recycled.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Largest number of datagrams held (beyond it they are dropped even if
/// the byte limit would allow them: tiny datagrams cannot grow the queue).
pub const MAX_QUEUED: usize = 1024;
/// Bucket depth: one full-size datagram passes without delay on an idle link.
pub const BURST_BYTES: usize = 1500;
/// Queue limit: this much time at the rate...
pub const QUEUE_TIME: Duration = Duration::from_millis(50);
/// ...but at least this many full-size datagrams.
pub const QUEUE_MIN_PACKETS: usize = 2;
const FULL_PACKET: usize = 1500;
const POOL: usize = 64;

/// What happened to an offered datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver now (the shaper kept no copy).
    Pass,
    /// Copied into the queue; comes out of [`Shaper::pop_due`].
    Queued,
    /// Dropped (queue full).
    Dropped,
}

/// Counters of one shaper.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShaperStats {
    /// Datagrams delivered without delay.
    pub passed: u64,
    /// Datagrams delayed in the queue.
    pub queued: u64,
    /// Datagrams dropped because the queue was full.
    pub dropped: u64,
    /// Bytes dropped.
    pub dropped_bytes: u64,
    /// Longest queueing delay given, µs.
    pub max_delay_us: u64,
}

/// A queued datagram as [`Shaper::pop_due`] returns it.
#[derive(Debug)]
pub struct Released {
    /// When it leaves the bottleneck (its receive time).
    pub at: Instant,
    /// Source address.
    pub source: SocketAddr,
    /// The bytes (give the buffer back with [`Shaper::recycle`]).
    pub data: Vec<u8>,
}

/// Token bucket + bounded FIFO.
#[derive(Debug)]
pub struct Shaper {
    rate_bps: u64,
    burst: Duration,
    limit_bytes: usize,
    drain: Option<Instant>,
    queue: VecDeque<Released>,
    queued_bytes: usize,
    pool: Vec<Vec<u8>>,
    stats: ShaperStats,
}

impl Shaper {
    /// A bottleneck of `rate_bps` bits per second (at least 1000), queue
    /// limit [`QUEUE_TIME`] at that rate, at least [`QUEUE_MIN_PACKETS`]
    /// full-size datagrams.
    pub fn new(rate_bps: u64) -> Shaper {
        let rate_bps = rate_bps.max(1000);
        let by_time = (u128::from(rate_bps) * QUEUE_TIME.as_nanos() / 8 / 1_000_000_000) as usize;
        Shaper::with_limit(rate_bps, by_time.max(QUEUE_MIN_PACKETS * FULL_PACKET))
    }

    /// A bottleneck with an explicit queue limit in bytes.
    pub fn with_limit(rate_bps: u64, limit_bytes: usize) -> Shaper {
        let rate_bps = rate_bps.max(1000);
        let mut s = Shaper {
            rate_bps,
            burst: Duration::ZERO,
            limit_bytes,
            drain: None,
            queue: VecDeque::new(),
            queued_bytes: 0,
            pool: Vec::new(),
            stats: ShaperStats::default(),
        };
        s.burst = s.time_of(BURST_BYTES);
        s
    }

    /// The rate, bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// The queue limit, bytes.
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    /// Counters so far.
    pub fn stats(&self) -> ShaperStats {
        self.stats
    }

    /// Bytes waiting now.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    fn time_of(&self, bytes: usize) -> Duration {
        Duration::from_nanos(
            (bytes as u128 * 8 * 1_000_000_000 / u128::from(self.rate_bps))
                .min(u128::from(u64::MAX)) as u64,
        )
    }

    /// A datagram arrived at `now`. Release what is due first
    /// ([`pop_due`](Self::pop_due)): the order of delivery is the order of
    /// arrival only if the caller does.
    pub fn offer(&mut self, now: Instant, source: SocketAddr, data: &[u8]) -> Verdict {
        let drain = self.drain.map_or(now, |d| d.max(now));
        let depart = (drain.checked_sub(self.burst).unwrap_or(now)).max(now);
        if depart <= now && self.queue.is_empty() {
            self.drain = Some(drain + self.time_of(data.len()));
            self.stats.passed += 1;
            return Verdict::Pass;
        }
        if self.queued_bytes + data.len() > self.limit_bytes || self.queue.len() >= MAX_QUEUED {
            self.stats.dropped += 1;
            self.stats.dropped_bytes += data.len() as u64;
            return Verdict::Dropped;
        }
        self.drain = Some(drain + self.time_of(data.len()));
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        self.queued_bytes += data.len();
        self.stats.queued += 1;
        let delay = depart.saturating_duration_since(now);
        self.stats.max_delay_us = self.stats.max_delay_us.max(delay.as_micros() as u64);
        // `depart` never decreases (drain and now do not), so the queue
        // stays sorted by release time.
        self.queue.push_back(Released {
            at: depart.max(now),
            source,
            data: buf,
        });
        Verdict::Queued
    }

    /// When the next queued datagram is due.
    pub fn next_release(&self) -> Option<Instant> {
        self.queue.front().map(|r| r.at)
    }

    /// The next datagram due at or before `now`, in arrival order.
    pub fn pop_due(&mut self, now: Instant) -> Option<Released> {
        if self.queue.front()?.at > now {
            return None;
        }
        let r = self.queue.pop_front()?;
        self.queued_bytes -= r.data.len();
        Some(r)
    }

    /// Give a released datagram's buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL {
            self.pool.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const SRC: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn limits_follow_the_rate() {
        // 300 kbit/s: 50 ms is 1875 bytes, less than two full packets.
        assert_eq!(Shaper::new(300_000).limit_bytes(), 3000);
        // 2 Mbit/s: 50 ms is 12500 bytes.
        assert_eq!(Shaper::new(2_000_000).limit_bytes(), 12_500);
    }

    #[test]
    fn burst_passes_then_queues_at_the_rate_then_drops() {
        let t0 = Instant::now();
        // 800 kbit/s = 100 bytes per ms; queue limit 3000 bytes.
        let mut s = Shaper::with_limit(800_000, 3000);
        let pkt = [7u8; 1000];
        // Bucket depth 1500 bytes = 15 ms at this rate: the first two
        // 1000-byte packets pass (the second departs at drain - burst =
        // 10 ms - 15 ms < now).
        assert_eq!(s.offer(t0, SRC, &pkt), Verdict::Pass);
        assert_eq!(s.offer(t0, SRC, &pkt), Verdict::Pass);
        // Drain is at 20 ms: the third departs at 5 ms.
        assert_eq!(s.offer(t0, SRC, &pkt), Verdict::Queued);
        assert_eq!(s.next_release(), Some(t0 + ms(5)));
        assert_eq!(s.offer(t0, SRC, &pkt), Verdict::Queued);
        assert_eq!(s.offer(t0, SRC, &pkt), Verdict::Queued);
        // 3000 bytes queued: the next is dropped and does not use the link.
        assert_eq!(s.offer(t0, SRC, &pkt), Verdict::Dropped);
        assert_eq!(s.queued_bytes(), 3000);
        let st = s.stats();
        assert_eq!(
            (st.passed, st.queued, st.dropped, st.dropped_bytes),
            (2, 3, 1, 1000)
        );
        assert_eq!(st.max_delay_us, 25_000);
        // Releases at 5, 15, 25 ms, in order, none early.
        assert!(s.pop_due(t0 + ms(4)).is_none());
        let mut at = Vec::new();
        let mut now = t0;
        while now <= t0 + ms(30) {
            while let Some(r) = s.pop_due(now) {
                assert_eq!(r.data.len(), 1000);
                assert_eq!(r.source, SRC);
                at.push(r.at - t0);
                s.recycle(r.data);
            }
            now += ms(1);
        }
        assert_eq!(at, vec![ms(5), ms(15), ms(25)]);
        assert_eq!(s.queued_bytes(), 0);
        // Idle for a while: the bucket is full again.
        assert_eq!(s.offer(t0 + ms(100), SRC, &pkt), Verdict::Pass);
    }

    #[test]
    fn long_run_throughput_is_the_rate() {
        // Offer 2x the rate for 10 s: about the rate gets through (the
        // rest is dropped), and no datagram waits longer than the queue.
        let t0 = Instant::now();
        let mut s = Shaper::new(1_000_000);
        let pkt = [1u8; 1250]; // 10 kbit
        let mut delivered_bits = 0u64;
        for i in 0..2000u64 {
            // 200 packets/s = 2 Mbit/s
            let now = t0 + ms(5 * i);
            while let Some(r) = s.pop_due(now) {
                delivered_bits += r.data.len() as u64 * 8;
                s.recycle(r.data);
            }
            match s.offer(now, SRC, &pkt) {
                Verdict::Pass => delivered_bits += 10_000,
                Verdict::Queued | Verdict::Dropped => {}
            }
        }
        let kbps = delivered_bits as f64 / 10.0 / 1000.0;
        assert!((950.0..=1020.0).contains(&kbps), "{kbps}");
        // Queue limit 6250 bytes = 50 ms at 1 Mbit/s, plus one packet.
        let st = s.stats();
        assert!(st.max_delay_us <= 61_000, "{st:?}");
        assert!(st.max_delay_us >= 30_000, "{st:?}");
        assert!(s.stats().dropped > 900, "{:?}", s.stats());
    }
}
