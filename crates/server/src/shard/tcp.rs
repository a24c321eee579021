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
//! process's file descriptor limit is low: [`conns_per_shard`]), connections
//! per client IP address per shard (`--ice-tcp-max-conns-per-ip`, default
//! [`MAX_CONNS_PER_IP`]; more are closed at accept and never take a slot),
//! time to authenticate (`--ice-tcp-auth-timeout`, default [`AUTH_TIMEOUT`]:
//! a connection none of whose frames the engine accepted for a known
//! participant by then is closed), idle time before a connection is closed
//! ([`IDLE`], counted from the last *accepted* frame only: a live ICE-TCP
//! connection carries consent checks every few seconds, while empty frames
//! and frames the engine drops keep nothing open), and bytes waiting per
//! connection ([`MAX_PENDING`]). A frame from an unknown client is dropped by
//! the engine and counted there, like a datagram. The deadlines are enforced
//! by the loop ([`TcpConns::sweep`]), whatever the reader is waiting for.
//!
//! Must not: block, or hold more than the bounds above per client.
//!
//! [`Engine`]: corelay_core::Engine

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

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
/// A connection that carries nothing the engine accepts for this long is
/// closed.
pub const IDLE: Duration = Duration::from_secs(30);
/// Default for `--ice-tcp-auth-timeout`: a new connection must carry a frame
/// the engine accepts for a known participant (in practice the client's
/// first STUN check, sent as soon as the connection is up) within this long,
/// or it is closed. A browser sends that check within a round trip of
/// connecting; 5 s leaves room for a slow network and a busy client.
#[cfg_attr(
    not(test),
    allow(
        dead_code,
        reason = "the flag's default (`default_value = \"5s\"`), held to it by a test in config.rs"
    )
)]
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Default for `--ice-tcp-max-conns-per-ip`: connections per client IP
/// address per shard. ICE-TCP serves networks that block UDP, typically
/// offices and hotels where many people share one NAT address, and a client
/// opens one connection per local address it tries: 32 lets a meeting room
/// of them join the same shard, while one address can take at most 1/32 of
/// a shard's 1024 slots (a quarter of the 128 at the usual `ulimit -n` of
/// 1024 with two shards), and only for [`AUTH_TIMEOUT`] unless it is a real
/// participant.
pub const MAX_CONNS_PER_IP: usize = 32;
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

/// How many connections a shard takes, and how long they may stay.
#[derive(Clone, Copy, Debug)]
pub struct TcpLimits {
    /// Connections per shard (see [`conns_per_shard`]).
    pub max: usize,
    /// Connections per client IP address per shard.
    pub max_per_ip: usize,
    /// Time a new connection has to carry a frame the engine accepts.
    pub auth_timeout: Duration,
}

/// The shard's ICE-TCP connections, by the client's address.
pub struct TcpConns {
    conns: HashMap<SocketAddr, Conn>,
    /// Connections per client IP address (entries at zero are removed).
    per_ip: HashMap<IpAddr, usize>,
    limits: TcpLimits,
    frames: mpsc::Sender<Frame>,
    /// Connections with bytes waiting: the flush skips the scan when zero.
    pending: usize,
}

struct Conn {
    write: OwnedWriteHalf,
    waiting: Vec<u8>,
    reader: AbortHandle,
    /// When it must be closed unless the engine accepts a frame from it:
    /// [`TcpLimits::auth_timeout`] after accept, then [`IDLE`] after the
    /// last accepted frame.
    deadline: Instant,
}

impl TcpConns {
    pub fn new(limits: TcpLimits) -> (Self, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel(CHANNEL);
        let conns = TcpConns {
            conns: HashMap::new(),
            per_ip: HashMap::new(),
            limits,
            frames: tx,
            pending: 0,
        };
        (conns, rx)
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Takes a new connection (on the shard's runtime), or closes it when
    /// the shard, or the client's IP address, has its maximum.
    pub fn accept(&mut self, stream: TcpStream, peer: SocketAddr, now: Instant) {
        if self.conns.len() >= self.limits.max || self.conns.contains_key(&peer) {
            tracing::debug!(%peer, "ICE-TCP connection refused: too many");
            return;
        }
        let from_ip = self.per_ip.entry(peer.ip()).or_insert(0);
        if *from_ip >= self.limits.max_per_ip {
            tracing::debug!(%peer, "ICE-TCP connection refused: too many from this address");
            return;
        }
        *from_ip += 1;
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let reader = tokio::spawn(read_frames(read, peer, self.frames.clone())).abort_handle();
        self.conns.insert(
            peer,
            Conn {
                write,
                waiting: Vec::new(),
                reader,
                deadline: now + self.limits.auth_timeout,
            },
        );
    }

    /// The engine accepted a frame from `peer` for a known participant: the
    /// connection may stay [`IDLE`] from now.
    pub fn accepted_frame(&mut self, peer: &SocketAddr, now: Instant) {
        if let Some(c) = self.conns.get_mut(peer) {
            c.deadline = now + IDLE;
        }
    }

    /// Closes the connections past their deadline (see [`Conn::deadline`]).
    pub fn sweep(&mut self, now: Instant) {
        let before = self.conns.len();
        let pending = &mut self.pending;
        let per_ip = &mut self.per_ip;
        self.conns.retain(|peer, c| {
            if c.deadline > now {
                return true;
            }
            tracing::debug!(%peer, "ICE-TCP connection closed: no ICE from it in time");
            forget(c, peer, pending, per_ip);
            false
        });
        if self.conns.len() < before {
            tracing::debug!(closed = before - self.conns.len(), "ICE-TCP sweep");
        }
    }

    /// Forgets a connection whose reader ended (closed or broken).
    pub fn closed(&mut self, peer: SocketAddr) {
        if let Some(c) = self.conns.remove(&peer) {
            forget(&c, &peer, &mut self.pending, &mut self.per_ip);
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

/// What closing `c` undoes: its reader, its count of waiting connections
/// and of its address's connections. Dropping `c` closes the socket.
fn forget(c: &Conn, peer: &SocketAddr, pending: &mut usize, per_ip: &mut HashMap<IpAddr, usize>) {
    c.reader.abort();
    if !c.waiting.is_empty() {
        *pending = pending.saturating_sub(1);
    }
    if let Some(n) = per_ip.get_mut(&peer.ip()) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            per_ip.remove(&peer.ip());
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
/// closes, or the loop is gone. No timer here: the loop closes the
/// connection at its deadline ([`TcpConns::sweep`]) and aborts this task,
/// whatever it waits for.
async fn read_frames(read: OwnedReadHalf, peer: SocketAddr, frames: mpsc::Sender<Frame>) {
    let mut read = BufReader::with_capacity(16 * 1024, read);
    loop {
        let mut header = [0u8; 2];
        if read.read_exact(&mut header).await.is_err() {
            break;
        }
        let len = usize::from(u16::from_be_bytes(header));
        let mut packet = vec![0u8; len];
        if read.read_exact(&mut packet).await.is_err() {
            break;
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

    /// One address gets `max_per_ip` connections; one that no frame
    /// authenticated is closed at the auth deadline, one that was stays
    /// [`IDLE`] from its last accepted frame; closing gives the address's
    /// slots back.
    #[tokio::test]
    async fn per_address_cap_and_deadlines() -> io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let auth = Duration::from_secs(5);
        let (mut conns, _frames) = TcpConns::new(TcpLimits {
            max: 16,
            max_per_ip: 2,
            auth_timeout: auth,
        });
        let now = Instant::now();
        let mut clients = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await?);
            let (stream, peer) = listener.accept().await?;
            conns.accept(stream, peer, now);
            peers.push(peer);
        }
        assert_eq!(conns.len(), 2, "the third from the address is refused");
        let genuine = peers.first().copied().ok_or(io::ErrorKind::NotFound)?;
        let accepted = now + Duration::from_secs(1);
        conns.accepted_frame(&genuine, accepted);
        conns.sweep(now + auth - Duration::from_millis(1));
        assert_eq!(conns.len(), 2, "nothing closes before the deadline");
        conns.sweep(now + auth);
        assert_eq!(conns.len(), 1, "the unauthenticated one is closed");
        assert!(conns.conns.contains_key(&genuine));
        assert_eq!(conns.per_ip.get(&addr.ip()), Some(&1));
        conns.sweep(accepted + IDLE);
        assert!(
            conns.is_empty(),
            "idle past IDLE since its last accepted frame"
        );
        assert!(conns.per_ip.is_empty(), "the address's slots are back");
        Ok(())
    }
}
