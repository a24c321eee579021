//! ICE-TCP, passive (RFC 6544), for one shard: a listener on the shard's UDP
//! port number, RFC 4571 framing (a 16-bit length before each packet), for
//! clients whose network blocks UDP.
//!
//! A connection's reader is a task on the shard's own runtime (same thread):
//! it cuts frames and hands them to the shard loop through a bounded channel,
//! so a slow shard pushes back on the client's TCP window instead of
//! queueing. The loop feeds each frame to the same [`Engine`] as a datagram
//! (`handle_tcp_frame`) and writes the answers straight to the socket from
//! [`TcpConns::send`]; what the kernel does not take at once waits in a
//! bounded per-connection buffer, written out at the next flush.
//!
//! Bounded: connections per shard (at most [`MAX_CONNS`], fewer when the
//! process's file descriptor limit is low: [`conns_per_shard`]), idle time before a
//! connection is closed ([`IDLE`]: a live ICE-TCP connection carries consent
//! checks every few seconds), bytes waiting per connection ([`MAX_PENDING`]).
//! A frame from an unknown client is dropped by the engine and counted there,
//! like a datagram.
//!
//! Must not: block, or hold more than the bounds above per client.
//!
//! [`Engine`]: corelay_core::Engine

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Open ICE-TCP connections per shard at most; more are closed at accept.
pub const MAX_CONNS: usize = 1024;
/// After a failed accept (out of file descriptors), the listener rests this
/// long instead of failing again at once in a loop.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Connections per shard: [`MAX_CONNS`], or less so that ICE-TCP can take
/// no more than a quarter of the process's `nofile` descriptors, leaving
/// the rest to HTTP, UDP sockets and the shards' own.
pub fn conns_per_shard(nofile: u64, shards: usize) -> usize {
    let quarter = usize::try_from(nofile / 4).unwrap_or(usize::MAX);
    (quarter / shards.max(1)).clamp(16, MAX_CONNS)
}
/// A connection that carries nothing for this long is closed.
pub const IDLE: Duration = Duration::from_secs(30);
/// Bytes waiting for the kernel per connection; past it, packets are dropped
/// (and counted as `dropped_send`), as a full UDP socket buffer would.
pub const MAX_PENDING: usize = 256 * 1024;
/// Frames read but not yet handled, all connections together.
const CHANNEL: usize = 1024;

/// What a connection's reader hands the loop.
pub enum Frame {
    Data(SocketAddr, Vec<u8>),
    Closed(SocketAddr),
}

/// Binds the shard's ICE-TCP listener on `addr` (the UDP socket's address).
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(128)?;
    Ok(s.into())
}

/// The shard's ICE-TCP connections, by the client's address.
pub struct TcpConns {
    conns: HashMap<SocketAddr, Conn>,
    max: usize,
    frames: mpsc::Sender<Frame>,
    /// Connections with bytes waiting: the flush skips the scan when zero.
    pending: usize,
}

struct Conn {
    write: OwnedWriteHalf,
    waiting: Vec<u8>,
    reader: AbortHandle,
}

impl TcpConns {
    /// At most `max` connections (see [`conns_per_shard`]).
    pub fn new(max: usize) -> (Self, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel(CHANNEL);
        let conns = TcpConns {
            conns: HashMap::new(),
            max,
            frames: tx,
            pending: 0,
        };
        (conns, rx)
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Takes a new connection (on the shard's runtime), or closes it when
    /// the shard has its maximum.
    pub fn accept(&mut self, stream: TcpStream, peer: SocketAddr) {
        if self.conns.len() >= self.max || self.conns.contains_key(&peer) {
            tracing::debug!(%peer, "ICE-TCP connection refused: too many");
            return;
        }
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let reader = tokio::spawn(read_frames(read, peer, self.frames.clone())).abort_handle();
        self.conns.insert(
            peer,
            Conn {
                write,
                waiting: Vec::new(),
                reader,
            },
        );
    }

    /// Forgets a connection whose reader ended (closed, idle or broken).
    pub fn closed(&mut self, peer: SocketAddr) {
        if let Some(c) = self.conns.remove(&peer) {
            c.reader.abort();
            if !c.waiting.is_empty() {
                self.pending = self.pending.saturating_sub(1);
            }
        }
    }

    /// Sends one packet framed to `peer`. False when it was dropped: no such
    /// connection, too large for a frame, or too much already waiting.
    pub fn send(&mut self, peer: &SocketAddr, packet: &[u8]) -> bool {
        let Some(c) = self.conns.get_mut(peer) else {
            return false;
        };
        let Ok(len) = u16::try_from(packet.len()) else {
            return false;
        };
        let header = len.to_be_bytes();
        if !c.waiting.is_empty() {
            if c.waiting.len() + 2 + packet.len() > MAX_PENDING {
                return false;
            }
            c.waiting.extend_from_slice(&header);
            c.waiting.extend_from_slice(packet);
            return true;
        }
        let bufs = [io::IoSlice::new(&header), io::IoSlice::new(packet)];
        let written = match c.write.try_write_vectored(&bufs) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            // The reader sees the broken connection and reports it closed.
            Err(_) => return false,
        };
        let total = 2 + packet.len();
        if written < total {
            // The rest of this frame waits; TCP cannot drop half a frame.
            let (h, p) = if written < 2 {
                (header.get(written..).unwrap_or_default(), packet)
            } else {
                (&[][..], packet.get(written - 2..).unwrap_or_default())
            };
            c.waiting.extend_from_slice(h);
            c.waiting.extend_from_slice(p);
            self.pending += 1;
        }
        true
    }

    /// Writes out what waits, as far as the kernel takes it.
    pub fn flush_waiting(&mut self) {
        if self.pending == 0 {
            return;
        }
        for c in self.conns.values_mut() {
            if c.waiting.is_empty() {
                continue;
            }
            match c.write.try_write(&c.waiting) {
                Ok(n) => {
                    c.waiting.drain(..n.min(c.waiting.len()));
                    if c.waiting.is_empty() {
                        self.pending = self.pending.saturating_sub(1);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    c.waiting.clear();
                    self.pending = self.pending.saturating_sub(1);
                }
            }
        }
    }
}

/// Waits for the next connection; never resolves without a listener.
pub async fn accept(listener: Option<&TcpListener>) -> io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// A new connection if one is waiting, without waiting: for the loop to
/// take connections while the UDP socket keeps it busy.
pub fn try_accept(listener: &TcpListener) -> Option<io::Result<(TcpStream, SocketAddr)>> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match listener.poll_accept(&mut cx) {
        std::task::Poll::Ready(r) => Some(r),
        std::task::Poll::Pending => None,
    }
}

/// One connection's reader: RFC 4571 frames to the loop until the client
/// closes, idles for [`IDLE`], or the loop is gone.
async fn read_frames(read: OwnedReadHalf, peer: SocketAddr, frames: mpsc::Sender<Frame>) {
    let mut read = BufReader::with_capacity(16 * 1024, read);
    loop {
        let mut header = [0u8; 2];
        match tokio::time::timeout(IDLE, read.read_exact(&mut header)).await {
            Ok(Ok(_)) => {}
            _ => break,
        }
        let len = usize::from(u16::from_be_bytes(header));
        let mut packet = vec![0u8; len];
        match tokio::time::timeout(IDLE, read.read_exact(&mut packet)).await {
            Ok(Ok(_)) => {}
            _ => break,
        }
        if len == 0 {
            continue;
        }
        if frames.send(Frame::Data(peer, packet)).await.is_err() {
            return;
        }
    }
    let _ = frames.send(Frame::Closed(peer)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_descriptors_at_most() {
        assert_eq!(conns_per_shard(1 << 20, 2), MAX_CONNS);
        // The usual soft limit of 1024 with 2 shards: 128 each.
        assert_eq!(conns_per_shard(1024, 2), 128);
        assert_eq!(conns_per_shard(10, 4), 16);
    }
}
