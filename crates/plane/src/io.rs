//! The I/O steps the shard loop and the work-stealing baseline share: the
//! send step of an engine step ([`send_datagrams`]), the socket dwell of a
//! read ([`record_dwell`]), and what the I/O layer counts beside the engine
//! ([`IoCounters`]).
//!
//! Must not: own a socket or a loop (the caller passes its socket and
//! batches), read a datagram's contents, or decide what the engine sends.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]

use std::time::Duration;

use corelay_core::Engine;
use corelay_core::metrics::{Counters, LatencyHistogram};
use corelay_udp::{RecvBatch, SendBatch, realtime};
use str0m::net::Protocol;

/// A duration in whole microseconds, saturating (histogram samples).
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Records the socket dwell of one read (its kernel receive time to now),
/// once per message: a GRO run waited in the socket's queue as one entry.
/// The read step of the shard loop and of the work-stealing reader alike.
pub fn record_dwell(recv: &RecvBatch, dwell: &mut LatencyHistogram) {
    let read_at = realtime();
    for k in recv.kernel_times() {
        dwell.record_us(micros(read_at.saturating_sub(k)));
    }
}

/// The counters the I/O layer keeps (the engine's are its own): copied into
/// each report beside the engine's ([`IoCounters::add_to`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct IoCounters {
    /// Datagrams the kernel refused (send buffer full), and ICE-TCP frames
    /// a full connection refused.
    pub dropped_send: u64,
    /// UDP messages the kernel took (a GSO run is one).
    pub tx_messages: u64,
    /// Cross-shard media a full lane dropped.
    pub cross_shard_dropped: u64,
}

impl IoCounters {
    /// `c` (the engine's counters) with these in their fields.
    pub fn add_to(&self, mut c: Counters) -> Counters {
        c.dropped_send += self.dropped_send;
        c.tx_messages += self.tx_messages;
        c.cross_shard_dropped += self.cross_shard_dropped;
        c
    }
}

/// Sends the UDP datagrams of one engine step in one `sendmmsg` batch, then
/// records each forwarded packet's latency (kernel receive to this send) in
/// `forward_local` (same shard) or `forward_cross` when `packet_metrics` is
/// on. What the socket refused counts in `io`'s `dropped_send` (where the
/// caller adds what its TCP sends refused). A GSO message the
/// kernel refused (its datagrams went out one by one) is logged at debug;
/// a device that takes no GSO at all turns it off for this sender, with one
/// warning. The send step of the shard loop and of the work-stealing tasks
/// alike.
pub fn send_datagrams(
    engine: &mut Engine,
    io: &mut IoCounters,
    send: &mut SendBatch,
    socket: &impl std::os::fd::AsRawFd,
    packet_metrics: bool,
    forward_local: &mut LatencyHistogram,
    forward_cross: &mut LatencyHistogram,
) {
    let out = engine.outputs();
    if !out.transmits.is_empty() {
        let gso = send.gso();
        let res = send.send(
            socket,
            out.transmits
                .iter()
                .filter(|t| t.proto == Protocol::Udp)
                .map(|t| (&t.destination, &t.contents[..])),
        );
        out.clear_transmits();
        let sent_at = if packet_metrics && !out.forwarded.is_empty() {
            realtime()
        } else {
            Duration::ZERO
        };
        for (rx, cross) in out.forwarded.drain(..) {
            let h = if cross {
                &mut *forward_cross
            } else {
                &mut *forward_local
            };
            h.record_us(micros(sent_at.saturating_sub(rx)));
        }
        if res.gso_refused > 0 {
            if gso && !send.gso() {
                tracing::warn!(
                    "the network device refuses UDP GSO: this socket sends datagram by \
                     datagram from now on (corelay_udp_messages_out equals \
                     corelay_packets_out; --no-udp-offload turns offload off everywhere)"
                );
            } else {
                tracing::debug!(
                    refused = res.gso_refused,
                    "the kernel refused UDP GSO messages; their datagrams went out one by one"
                );
            }
        }
        io.dropped_send += res.dropped as u64;
        io.tx_messages += res.messages as u64;
    }
    engine.outputs().forwarded.clear();
}
