//! What the kernel side accumulates, as plain values, and the per-interval
//! differences user space reports.

use std::collections::BTreeMap;

/// Upper edges (exclusive) of the first eight buckets, in microseconds. The
/// ninth bucket is `[50000 µs, +Inf)`. These are the edges of reference 003.
pub const BUCKET_EDGES_US: [u64; 8] = [10, 50, 100, 500, 1000, 5000, 10_000, 50_000];

/// Number of histogram buckets.
pub const NBUCKETS: usize = 9;

/// Bucket of a dwell time, exactly as the BPF program files it.
pub fn bucket_index(dwell_ns: u64) -> usize {
    BUCKET_EDGES_US
        .iter()
        .position(|&edge_us| dwell_ns < edge_us * 1000)
        .unwrap_or(NBUCKETS - 1)
}

/// Human label of bucket `i`, e.g. `"10-50us"` or `">=50ms"`.
pub fn bucket_label(i: usize) -> String {
    fn split(us: u64) -> (u64, &'static str) {
        if us >= 1000 && us.is_multiple_of(1000) {
            (us / 1000, "ms")
        } else {
            (us, "us")
        }
    }
    let last = BUCKET_EDGES_US.len() - 1;
    match i {
        0 => {
            let (v, u) = split(BUCKET_EDGES_US[0]);
            format!("<{v}{u}")
        }
        i if i <= last => {
            let (a, ua) = split(BUCKET_EDGES_US[i - 1]);
            let (b, ub) = split(BUCKET_EDGES_US[i]);
            if ua == ub {
                format!("{a}-{b}{ub}")
            } else {
                format!("{a}{ua}-{b}{ub}")
            }
        }
        _ => {
            let (v, u) = split(BUCKET_EDGES_US[last]);
            format!(">={v}{u}")
        }
    }
}

/// Cumulative statistics of one socket, as read from the kernel map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Kernel socket cookie (unique for the life of the system).
    pub cookie: u64,
    /// Local port.
    pub port: u16,
    /// Address family (2 = IPv4, 10 = IPv6).
    pub family: u16,
    /// Process that last read the socket; 0 when nobody read it yet.
    pub pid: u32,
    /// Command name of that process.
    pub comm: String,
    /// Histogram of dwell times (see [`BUCKET_EDGES_US`]).
    pub buckets: [u64; NBUCKETS],
    /// Sum of the dwell times counted in `buckets`, in nanoseconds.
    pub sum_ns: u64,
    /// Datagrams counted in `buckets`.
    pub count: u64,
    /// Largest dwell time seen, in nanoseconds.
    pub max_ns: u64,
    /// Reads of datagrams that were queued before tracing began.
    pub unknown: u64,
    /// Reads that found no enqueue timestamp to match.
    pub unmatched: u64,
    /// Timestamps discarded when resynchronising with the real queue length.
    pub trimmed: u64,
    /// Datagrams whose enqueue time was folded into the newest FIFO run's
    /// mean because the FIFO was full (bucket approximate, sum exact).
    pub overflow: u64,
    /// Monotonic time (ns) of the last read, 0 if none.
    pub last_read_ns: u64,
    /// Monotonic enqueue time (ns) of the oldest datagram still queued at the
    /// last event, 0 if none or unknown.
    pub oldest_ns: u64,
    /// Datagrams queued at the last event.
    pub queued: u32,
}

impl SocketStats {
    /// Mean dwell over the socket's life, in microseconds.
    pub fn mean_us(&self) -> Option<f64> {
        mean_us(self.sum_ns, self.count)
    }

    /// "ipv4", "ipv6" or the number.
    pub fn family_name(&self) -> String {
        match self.family {
            2 => "ipv4".into(),
            10 => "ipv6".into(),
            f => f.to_string(),
        }
    }
}

/// Mean in microseconds of `sum_ns` over `count`, `None` when `count` is 0.
pub fn mean_us(sum_ns: u64, count: u64) -> Option<f64> {
    (count > 0).then(|| sum_ns as f64 / count as f64 / 1000.0)
}

/// Global event counters of the BPF program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// `sk_data_ready` events on traced sockets.
    pub enqueue_events: u64,
    /// `sock_recv_length` events on traced sockets.
    pub reads: u64,
    /// Datagrams stamped into FIFOs.
    pub pushed: u64,
    /// Socket storage allocation failures.
    pub fifo_fail: u64,
    /// Sockets not recorded because the stats map was full.
    pub stats_full: u64,
}

impl Counters {
    /// Element-wise `self - prev`, never negative.
    pub fn since(&self, prev: &Counters) -> Counters {
        Counters {
            enqueue_events: self.enqueue_events.saturating_sub(prev.enqueue_events),
            reads: self.reads.saturating_sub(prev.reads),
            pushed: self.pushed.saturating_sub(prev.pushed),
            fifo_fail: self.fifo_fail.saturating_sub(prev.fifo_fail),
            stats_full: self.stats_full.saturating_sub(prev.stats_full),
        }
    }
}

/// Everything read from the kernel at one poll.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Per-socket statistics, by cookie.
    pub sockets: BTreeMap<u64, SocketStats>,
    /// Global counters.
    pub counters: Counters,
    /// Monotonic clock (ns, same clock as the BPF timestamps) at the poll.
    pub mono_ns: u64,
}

/// What changed on one socket during an interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delta {
    /// Histogram of the interval.
    pub buckets: [u64; NBUCKETS],
    /// Sum of dwell of the interval, ns.
    pub sum_ns: u64,
    /// Datagrams measured in the interval.
    pub count: u64,
    /// See [`SocketStats::unknown`].
    pub unknown: u64,
    /// See [`SocketStats::unmatched`].
    pub unmatched: u64,
    /// See [`SocketStats::trimmed`].
    pub trimmed: u64,
    /// See [`SocketStats::overflow`].
    pub overflow: u64,
}

impl Delta {
    /// Mean dwell of the interval, µs.
    pub fn mean_us(&self) -> Option<f64> {
        mean_us(self.sum_ns, self.count)
    }

    /// True when nothing happened.
    pub fn is_idle(&self) -> bool {
        self.count == 0
            && self.unknown == 0
            && self.unmatched == 0
            && self.trimmed == 0
            && self.overflow == 0
    }
}

/// One socket's line of an interval report.
#[derive(Clone, Debug)]
pub struct SocketInterval {
    /// Cumulative statistics at the end of the interval.
    pub total: SocketStats,
    /// Change during the interval.
    pub delta: Delta,
    /// Age (µs) of the oldest datagram still queued at the end of the
    /// interval, when known: a reader that stopped reading shows here even
    /// though no dwell sample completes.
    pub oldest_age_us: Option<f64>,
}

/// One interval.
#[derive(Clone, Debug)]
pub struct Report {
    /// Wall-clock time at the end of the interval (seconds since the epoch).
    pub unix_time: f64,
    /// Length of the interval, seconds.
    pub interval_s: f64,
    /// Sockets active in the interval (all known sockets if `all`).
    pub sockets: Vec<SocketInterval>,
    /// Counters of the interval.
    pub counters: Counters,
    /// Counters since start.
    pub counters_total: Counters,
}

/// Differences between two snapshots. Sockets with no activity in the
/// interval are left out unless `all`; sorted by interval count, busiest
/// first, then by port.
pub fn diff(prev: &Snapshot, cur: &Snapshot, all: bool) -> Vec<SocketInterval> {
    let empty = SocketStats::default();
    let mut out: Vec<SocketInterval> = cur
        .sockets
        .values()
        .filter_map(|s| {
            let p = prev.sockets.get(&s.cookie).unwrap_or(&empty);
            let mut d = Delta {
                sum_ns: s.sum_ns.saturating_sub(p.sum_ns),
                count: s.count.saturating_sub(p.count),
                unknown: s.unknown.saturating_sub(p.unknown),
                unmatched: s.unmatched.saturating_sub(p.unmatched),
                trimmed: s.trimmed.saturating_sub(p.trimmed),
                overflow: s.overflow.saturating_sub(p.overflow),
                ..Delta::default()
            };
            for (i, b) in d.buckets.iter_mut().enumerate() {
                *b = s.buckets[i].saturating_sub(p.buckets[i]);
            }
            let oldest_age_us = (s.queued > 0 && s.oldest_ns > 0 && cur.mono_ns > s.oldest_ns)
                .then(|| (cur.mono_ns - s.oldest_ns) as f64 / 1000.0);
            let active = !d.is_idle() || oldest_age_us.is_some();
            (all || active).then(|| SocketInterval {
                total: s.clone(),
                delta: d,
                oldest_age_us,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.delta
            .count
            .cmp(&a.delta.count)
            .then(a.total.port.cmp(&b.total.port))
            .then(a.total.cookie.cmp(&b.total.cookie))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_article_edges() {
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(9_999), 0);
        assert_eq!(bucket_index(10_000), 1);
        assert_eq!(bucket_index(49_999), 1);
        assert_eq!(bucket_index(50_000), 2);
        assert_eq!(bucket_index(99_999), 2);
        assert_eq!(bucket_index(100_000), 3);
        assert_eq!(bucket_index(500_000), 4);
        assert_eq!(bucket_index(1_000_000), 5);
        assert_eq!(bucket_index(5_000_000), 6);
        assert_eq!(bucket_index(10_000_000), 7);
        assert_eq!(bucket_index(49_999_999), 7);
        assert_eq!(bucket_index(50_000_000), 8);
        assert_eq!(bucket_index(u64::MAX), 8);
    }

    #[test]
    fn bucket_labels() {
        let labels: Vec<String> = (0..NBUCKETS).map(bucket_label).collect();
        assert_eq!(
            labels,
            [
                "<10us",
                "10-50us",
                "50-100us",
                "100-500us",
                "500us-1ms",
                "1-5ms",
                "5-10ms",
                "10-50ms",
                ">=50ms"
            ]
        );
    }

    fn sock(cookie: u64, count: u64, sum_ns: u64) -> SocketStats {
        let mut s = SocketStats {
            cookie,
            port: 4000 + cookie as u16,
            count,
            sum_ns,
            ..SocketStats::default()
        };
        s.buckets[3] = count;
        s
    }

    #[test]
    fn diff_reports_interval_changes_and_skips_idle_sockets() {
        let mut prev = Snapshot::default();
        prev.sockets.insert(1, sock(1, 10, 1_000_000));
        prev.sockets.insert(2, sock(2, 5, 500_000));
        let mut cur = Snapshot::default();
        cur.sockets.insert(1, sock(1, 30, 5_000_000));
        cur.sockets.insert(2, sock(2, 5, 500_000));
        cur.sockets.insert(3, sock(3, 1, 200_000));
        let d = diff(&prev, &cur, false);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].total.cookie, 1);
        assert_eq!(d[0].delta.count, 20);
        assert_eq!(d[0].delta.buckets[3], 20);
        assert_eq!(d[0].delta.mean_us(), Some(200.0));
        assert_eq!(d[1].total.cookie, 3);
        assert_eq!(d[1].delta.mean_us(), Some(200.0));
        assert_eq!(diff(&prev, &cur, true).len(), 3);
    }

    #[test]
    fn diff_never_underflows() {
        let mut prev = Snapshot::default();
        prev.sockets.insert(1, sock(1, 10, 1_000_000));
        let mut cur = Snapshot::default();
        cur.sockets.insert(1, sock(1, 3, 10));
        let d = diff(&prev, &cur, true);
        assert_eq!(d[0].delta.count, 0);
        assert_eq!(d[0].delta.mean_us(), None);
    }

    #[test]
    fn stuck_reader_shows_oldest_age() {
        let mut cur = Snapshot {
            mono_ns: 5_000_000_000,
            ..Snapshot::default()
        };
        let mut s = sock(7, 0, 0);
        s.queued = 3;
        s.oldest_ns = 4_000_000_000;
        cur.sockets.insert(7, s);
        let d = diff(&Snapshot::default(), &cur, false);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].oldest_age_us, Some(1_000_000.0));
    }
}
