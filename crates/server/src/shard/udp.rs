//! Batched UDP for one shard: `recvmmsg` with each datagram's kernel receive
//! time (`SO_TIMESTAMPNS`) and `sendmmsg`, on a non-blocking socket.
//!
//! Hand-written over libc because quinn-udp's releases (0.5) do not hand out
//! the receive timestamps this server measures socket dwell with; its main
//! branch has added them, and this file should give way to it once a release
//! carries them.
//! Owns the buffers (allocated once); must not: interpret packets.

use std::io;
use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Datagrams per `recvmmsg`/`sendmmsg` call.
pub const BATCH: usize = 32;
/// Largest datagram we accept; WebRTC media stays under ~1200 bytes.
const BUF_SIZE: usize = 2048;
/// Room for one `SCM_TIMESTAMPNS` control message.
const CMSG_SPACE: usize = 64;

/// One received datagram: its bytes live in the batch's buffers.
pub struct Datagram<'a> {
    pub source: SocketAddr,
    pub data: &'a [u8],
    /// Kernel receive time (CLOCK_REALTIME) if the kernel provided one.
    pub kernel_rx: Option<Duration>,
}

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
        let slots = self
            .bufs
            .iter_mut()
            .zip(self.names.iter_mut())
            .zip(self.cmsgs.iter_mut())
            .zip(self.iovs.iter_mut())
            .zip(self.hdrs.iter_mut());
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
        // SAFETY: every header points into buffers owned by `self` that outlive
        // the call; the count matches the array length.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
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

    /// The datagrams of the last `recv`.
    pub fn iter(&self) -> impl Iterator<Item = Datagram<'_>> {
        (0..self.len).filter_map(move |i| {
            let hdr = self.hdrs.get(i)?;
            let len = (hdr.msg_len as usize).min(BUF_SIZE);
            let source = sockaddr_to_std(self.names.get(i)?)?;
            let data = self.bufs.get(i)?.get(..len)?;
            Some(Datagram {
                source,
                data,
                kernel_rx: timestamp_of(&hdr.msg_hdr),
            })
        })
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
    pub sent: usize,
    /// Datagrams the kernel would not take (buffer full) or refused.
    pub dropped: usize,
}

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
            let mut off = 0;
            while off < n {
                let Some(pending) = self.hdrs.get_mut(off..n) else {
                    break;
                };
                // SAFETY: headers off..n point at live caller buffers and our
                // own names/iovecs.
                let r = unsafe {
                    libc::sendmmsg(
                        socket.as_raw_fd(),
                        pending.as_mut_ptr(),
                        (n - off) as libc::c_uint,
                        libc::MSG_DONTWAIT,
                    )
                };
                if r > 0 {
                    res.sent += r as usize;
                    off += r as usize;
                } else {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    // The first datagram failed (full buffer, unreachable
                    // destination...): drop it and go on with the rest.
                    res.dropped += 1;
                    off += 1;
                }
            }
        }
        res
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
}
