//! Batched UDP on Linux: `recvmmsg` with each datagram's kernel receive time
//! (`SO_TIMESTAMPNS`), and `sendmmsg` of borrowed ([`SendBatch`]) or copied
//! ([`CopyBatch`]) datagrams, on non-blocking sockets. Shared by corelay's
//! shards, corelay-client's driver threads and the bench's cost floor, so
//! all three pay the same per-datagram kernel cost.
//!
//! Hand-written over libc because quinn-udp's releases (0.5) do not hand out
//! the receive timestamps corelay measures socket dwell with; its main
//! branch has added them, and this crate should give way to it once a
//! release carries them.
//!
//! Owns the buffers (allocated once) and the `libc` calls with their safety
//! arguments; must not: interpret packets, log, or decide what a refused
//! datagram means (callers count them).

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io;
use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Datagrams per `recvmmsg`/`sendmmsg` call.
pub const BATCH: usize = 32;
/// Largest datagram we accept; WebRTC media stays under ~1200 bytes.
const BUF_SIZE: usize = 2048;
/// Room for one `SCM_TIMESTAMPNS` control message.
const CMSG_SPACE: usize = 64;

/// One received datagram: its bytes live in the batch's buffers.
pub struct Datagram<'a> {
    /// Who sent it.
    pub source: SocketAddr,
    /// Its bytes.
    pub data: &'a [u8],
    /// Kernel receive time (CLOCK_REALTIME) if the kernel provided one.
    pub kernel_rx: Option<Duration>,
}

/// Buffers for one `recvmmsg` (reused across calls and sockets).
pub struct RecvBatch {
    bufs: Vec<[u8; BUF_SIZE]>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u8; CMSG_SPACE]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    len: usize,
}

// The raw pointers inside only ever point into the struct's own vectors,
// rebuilt before every call; the batch is used by one thread at a time.
unsafe impl Send for RecvBatch {}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Allocates the buffers.
    pub fn new() -> Self {
        RecvBatch {
            bufs: vec![[0; BUF_SIZE]; BATCH],
            // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C structs
            // for which all-zero bytes are a valid value.
            names: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            cmsgs: vec![[0; CMSG_SPACE]; BATCH],
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            len: 0,
        }
    }

    /// Reads up to [`BATCH`] datagrams without blocking. `Ok(0)` never happens:
    /// an empty socket is `Err(WouldBlock)`.
    pub fn recv(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        self.recv_max(socket, BATCH)
    }

    /// Reads up to `max` datagrams (1 to [`BATCH`]) without blocking; a
    /// caller's read budget. An empty socket is `Err(WouldBlock)`.
    pub fn recv_max(&mut self, socket: &impl AsRawFd, max: usize) -> io::Result<usize> {
        let max = max.clamp(1, BATCH);
        let slots = self
            .bufs
            .iter_mut()
            .zip(self.names.iter_mut())
            .zip(self.cmsgs.iter_mut())
            .zip(self.iovs.iter_mut())
            .zip(self.hdrs.iter_mut())
            .take(max);
        for ((((buf, name), cmsg), iov), hdr) in slots {
            *iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: BUF_SIZE,
            };
            let h = &mut hdr.msg_hdr;
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            h.msg_control = cmsg.as_mut_ptr().cast();
            h.msg_controllen = CMSG_SPACE;
            h.msg_flags = 0;
            hdr.msg_len = 0;
        }
        // SAFETY: the first `max` headers point into buffers owned by `self`
        // that outlive the call; `max` is at most the array length.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                max as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.len = 0;
            return Err(io::Error::last_os_error());
        }
        self.len = n as usize;
        Ok(self.len)
    }

    /// How many datagrams the last `recv` read.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the last `recv` read nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`th datagram of the last `recv` (None past the end, or for a
    /// source address that is neither IPv4 nor IPv6).
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        if i >= self.len {
            return None;
        }
        let hdr = self.hdrs.get(i)?;
        let len = (hdr.msg_len as usize).min(BUF_SIZE);
        let source = sockaddr_to_std(self.names.get(i)?)?;
        let data = self.bufs.get(i)?.get(..len)?;
        Some(Datagram {
            source,
            data,
            kernel_rx: timestamp_of(&hdr.msg_hdr),
        })
    }

    /// The datagrams of the last `recv`.
    pub fn iter(&self) -> impl Iterator<Item = Datagram<'_>> {
        (0..self.len).filter_map(move |i| self.get(i))
    }
}

/// Reads the `SCM_TIMESTAMPNS` control message of a received header.
fn timestamp_of(h: &libc::msghdr) -> Option<Duration> {
    // SAFETY: the header was filled by recvmmsg; CMSG_* walk its control buffer
    // within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn std_to_sockaddr(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s: &mut libc::sockaddr_in =
                unsafe { &mut *(out as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr = libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let s: &mut libc::sockaddr_in6 =
                unsafe { &mut *(out as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_addr = libc::in6_addr {
                s6_addr: v6.ip().octets(),
            };
            s.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Outcome of sending a batch.
#[derive(Default, Debug, Clone, Copy)]
pub struct SendResult {
    /// Datagrams the kernel took.
    pub sent: usize,
    /// Datagrams the kernel would not take (buffer full) or refused.
    pub dropped: usize,
}

/// Headers for `sendmmsg` of datagrams the caller owns (they must outlive
/// [`SendBatch::send`]).
pub struct SendBatch {
    names: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// See RecvBatch: pointers are rebuilt per call and point at caller data.
unsafe impl Send for SendBatch {}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// Allocates the headers.
    pub fn new() -> Self {
        SendBatch {
            // SAFETY: plain C structs, all-zero is valid.
            names: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
        }
    }

    /// Sends every datagram, [`BATCH`] per syscall. Never blocks: what the
    /// kernel will not take now is dropped and counted (real-time media is
    /// better late-dropped than queued).
    pub fn send<'a, I>(&mut self, socket: &impl AsRawFd, items: I) -> SendResult
    where
        I: IntoIterator<Item = (&'a SocketAddr, &'a [u8])>,
    {
        let mut res = SendResult::default();
        let mut it = items.into_iter().peekable();
        while it.peek().is_some() {
            let mut n = 0;
            // Slots first: zip must not pull an item it has no slot for.
            let slots = self
                .names
                .iter_mut()
                .zip(self.iovs.iter_mut())
                .zip(self.hdrs.iter_mut());
            for (((name, iov), hdr), (dst, data)) in slots.zip(it.by_ref()) {
                // SAFETY: zeroed storage is a valid starting value.
                *name = unsafe { MaybeUninit::zeroed().assume_init() };
                let namelen = std_to_sockaddr(dst, name);
                *iov = libc::iovec {
                    iov_base: data.as_ptr() as *mut libc::c_void,
                    iov_len: data.len(),
                };
                let h = &mut hdr.msg_hdr;
                h.msg_name = (name as *mut libc::sockaddr_storage).cast();
                h.msg_namelen = namelen;
                h.msg_iov = iov;
                h.msg_iovlen = 1;
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
                h.msg_flags = 0;
                n += 1;
            }
            if let Some(hdrs) = self.hdrs.get_mut(..n) {
                // SAFETY: these headers were just pointed at the caller's
                // live buffers and our own names/iovecs.
                unsafe { send_all(socket, hdrs, &mut res) };
            }
        }
        res
    }
}

/// `sendmmsg` until every header is sent or dropped, never blocking: a
/// datagram the kernel refuses (full buffer, unreachable destination, wrong
/// family) is counted in `dropped` and the rest still go, in order.
///
/// # Safety
/// Every header must point at a name, iovec and buffer that are live for
/// the call.
unsafe fn send_all(socket: &impl AsRawFd, hdrs: &mut [libc::mmsghdr], res: &mut SendResult) {
    let n = hdrs.len();
    let mut off = 0;
    while off < n {
        let Some(pending) = hdrs.get_mut(off..) else {
            break;
        };
        // SAFETY: the caller vouches for the headers; the count is the
        // slice's length.
        let r = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                pending.as_mut_ptr(),
                pending.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r > 0 {
            res.sent += r as usize;
            off += r as usize;
        } else {
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The first datagram failed: drop it and go on with the rest.
            res.dropped += 1;
            off += 1;
        }
    }
}

/// Datagrams copied in and sent together with one `sendmmsg` per
/// [`BATCH`]: for callers whose bytes are only lent for a moment (str0m
/// lends each transmit until its next poll). One copy per datagram, into
/// buffers allocated once.
pub struct CopyBatch {
    bufs: Vec<[u8; BUF_SIZE]>,
    lens: Vec<usize>,
    names: Vec<libc::sockaddr_storage>,
    namelens: Vec<libc::socklen_t>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    len: usize,
}

// As for RecvBatch: pointers only into its own vectors, rebuilt per call.
unsafe impl Send for CopyBatch {}

impl Default for CopyBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl CopyBatch {
    /// Allocates the buffers.
    pub fn new() -> Self {
        CopyBatch {
            bufs: vec![[0; BUF_SIZE]; BATCH],
            lens: vec![0; BATCH],
            // SAFETY: plain C structs for which all-zero bytes are valid.
            names: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            namelens: vec![0; BATCH],
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            len: 0,
        }
    }

    /// Queues one datagram, sending the batch first when it is full. A
    /// datagram longer than the buffers is counted as dropped.
    pub fn push(
        &mut self,
        socket: &impl AsRawFd,
        dest: SocketAddr,
        data: &[u8],
        res: &mut SendResult,
    ) {
        if self.len == BATCH {
            self.flush(socket, res);
        }
        let i = self.len;
        let (Some(buf), Some(len), Some(name), Some(namelen)) = (
            self.bufs.get_mut(i),
            self.lens.get_mut(i),
            self.names.get_mut(i),
            self.namelens.get_mut(i),
        ) else {
            res.dropped += 1;
            return;
        };
        let Some(dst) = buf.get_mut(..data.len()) else {
            res.dropped += 1;
            return;
        };
        dst.copy_from_slice(data);
        *len = data.len();
        *namelen = std_to_sockaddr(&dest, name);
        self.len += 1;
    }

    /// Sends everything queued, in order (see [`send_all`] for refusals).
    pub fn flush(&mut self, socket: &impl AsRawFd, res: &mut SendResult) {
        let n = std::mem::take(&mut self.len);
        let slots = self
            .bufs
            .iter_mut()
            .zip(self.lens.iter())
            .zip(self.names.iter_mut())
            .zip(self.namelens.iter())
            .zip(self.iovs.iter_mut())
            .zip(self.hdrs.iter_mut())
            .take(n);
        for (((((buf, len), name), namelen), iov), hdr) in slots {
            *iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: *len,
            };
            let h = &mut hdr.msg_hdr;
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = *namelen;
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            hdr.msg_len = 0;
        }
        if let Some(hdrs) = self.hdrs.get_mut(..n) {
            // SAFETY: the first n headers were just pointed into buffers
            // owned by `self`, which outlive the call.
            unsafe { send_all(socket, hdrs, res) };
        }
    }
}

/// Turns on `SO_TIMESTAMPNS` so `recvmmsg` reports kernel receive times.
pub fn enable_rx_timestamps(socket: &UdpSocket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: valid fd, option value points at a c_int of the given size.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CLOCK_REALTIME now, as a duration since the epoch: the clock of
/// `SO_TIMESTAMPNS`.
pub fn realtime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Maps kernel receive times (CLOCK_REALTIME) onto `Instant`s through one
/// pair of clock reads taken after the `recvmmsg` that returned them.
#[derive(Debug, Clone, Copy)]
pub struct RxClock {
    now: Instant,
    real: Duration,
}

/// A kernel time further back than this is not trusted (a realtime clock
/// step); the read time is used instead.
const MAX_DWELL: Duration = Duration::from_secs(1);

impl RxClock {
    /// Samples both clocks now.
    pub fn sample() -> RxClock {
        let real = realtime();
        RxClock {
            now: Instant::now(),
            real,
        }
    }

    /// The instant a datagram with kernel time `k` arrived: never later than
    /// the sample, and the sample itself without a plausible kernel time.
    pub fn at(&self, k: Option<Duration>) -> Instant {
        match k.and_then(|k| self.real.checked_sub(k)) {
            Some(dwell) if dwell <= MAX_DWELL => self.now.checked_sub(dwell).unwrap_or(self.now),
            _ => self.now,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trip_with_timestamps() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        enable_rx_timestamps(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 10 + i as usize]).collect();
        let mut sb = SendBatch::new();
        let res = sb.send(&tx, payloads.iter().map(|p| (&dst, p.as_slice())));
        assert_eq!(res.sent, 40);
        let mut rb = RecvBatch::new();
        let mut got = Vec::new();
        for _ in 0..100 {
            match rb.recv(&rx) {
                Ok(_) => {
                    for d in rb.iter() {
                        assert_eq!(d.source, tx.local_addr().unwrap());
                        assert!(d.kernel_rx.is_some());
                        got.push(d.data.to_vec());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if got.len() == 40 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, payloads);
    }

    #[test]
    fn copy_batch_sends_in_order_and_skips_what_is_refused() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = rx.local_addr().unwrap();
        let mut cb = CopyBatch::new();
        let mut out = SendResult::default();
        // More than one batch, with one datagram too large for the buffers
        // in between and one the kernel refuses (IPv6 on an IPv4 socket) last.
        for i in 0..40u8 {
            if i == 7 {
                cb.push(&tx, dst, &[0u8; BUF_SIZE + 1], &mut out);
            }
            cb.push(&tx, dst, &vec![i; 10 + i as usize], &mut out);
        }
        let v6 = "[::1]:9".parse().unwrap();
        cb.push(&tx, v6, b"wrong family", &mut out);
        cb.flush(&tx, &mut out);
        assert_eq!((out.sent, out.dropped), (40, 2));
        let mut buf = [0u8; 100];
        for i in 0..40u8 {
            let (n, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(from, tx.local_addr().unwrap());
            assert_eq!(&buf[..n], vec![i; 10 + i as usize].as_slice());
        }
    }

    /// Linux turns receive timestamping on for the whole stack in a
    /// deferred work item when the first socket asks for it; until that has
    /// run, a datagram gets its time when it is read. Wait (bounded) until a
    /// datagram that waited 5 ms shows it, so that the test below measures
    /// the mapping and not how busy the machine was when it started.
    fn until_kernel_stamps_on_arrival(rx: &UdpSocket, tx: &UdpSocket) {
        let mut rb = RecvBatch::new();
        for _ in 0..200 {
            tx.send_to(&[0xff], rx.local_addr().unwrap()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            if rb.recv(rx).unwrap() == 1 {
                let clock = RxClock::sample();
                let at = clock.at(rb.get(0).unwrap().kernel_rx);
                if at + Duration::from_millis(3) <= clock.now {
                    return;
                }
            }
        }
        panic!("no kernel receive timestamps on arrival after 200 tries");
    }

    #[test]
    fn recv_max_reads_no_more_than_asked_and_times_map_to_instants() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        enable_rx_timestamps(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        until_kernel_stamps_on_arrival(&rx, &tx);
        let before = Instant::now();
        for i in 0..5u8 {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut rb = RecvBatch::new();
        assert_eq!(rb.recv_max(&rx, 3).unwrap(), 3);
        let clock = RxClock::sample();
        for i in 0..rb.len() {
            let d = rb.get(i).unwrap();
            assert_eq!(d.data, &[i as u8]);
            let at = clock.at(d.kernel_rx);
            // Received after we started sending (allowing for the µs the two
            // clock reads are apart), and about 20 ms before the sample.
            assert!(at + Duration::from_millis(1) >= before);
            assert!(at + Duration::from_millis(15) <= Instant::now());
        }
        assert!(rb.get(3).is_none());
        assert_eq!(rb.recv(&rx).unwrap(), 2);
        assert_eq!(rb.get(0).unwrap().data, &[3]);
    }

    #[test]
    fn implausible_kernel_times_fall_back_to_the_sample() {
        let c = RxClock::sample();
        assert_eq!(c.at(None), c.now);
        // In the future (clock stepped back) or far in the past.
        assert_eq!(c.at(Some(c.real + Duration::from_secs(1))), c.now);
        assert_eq!(c.at(Some(c.real - Duration::from_secs(5))), c.now);
        let d = Duration::from_micros(300);
        assert_eq!(c.at(Some(c.real - d)), c.now - d);
    }
}
