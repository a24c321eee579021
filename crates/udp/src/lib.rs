//! Batched UDP on Linux: `recvmmsg` with each datagram's kernel receive time
//! (`SO_TIMESTAMPNS`), and `sendmmsg` of borrowed ([`SendBatch`]) or copied
//! ([`CopyBatch`]) datagrams, on non-blocking sockets; optionally with UDP
//! GSO (a run of equal datagrams to one destination in one message) and
//! GRO (such runs read as one message and cut apart again). Shared by corelay's
//! shards, corelay-client's driver threads and the bench's cost floor, so
//! all three pay the same per-datagram kernel cost. With `IP_PKTINFO` one
//! socket bound to a wildcard address serves several local addresses: each
//! datagram read says which it came to, and each sent names its source.
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
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Datagrams per `recvmmsg`/`sendmmsg` call.
pub const BATCH: usize = 32;
/// Largest datagram we accept; WebRTC media stays under ~1200 bytes.
const BUF_SIZE: usize = 2048;
/// Room for the control messages of one received message: a timestamp
/// (`SCM_TIMESTAMPNS`, 32 bytes), a GRO segment size (24) and a
/// destination address (`IP_PKTINFO` 32, `IPV6_PKTINFO` 40).
const CMSG_SPACE: usize = 128;

/// One received datagram: its bytes live in the batch's buffers.
pub struct Datagram<'a> {
    /// Who sent it.
    pub source: SocketAddr,
    /// Its bytes.
    pub data: &'a [u8],
    /// Kernel receive time (CLOCK_REALTIME) if the kernel provided one.
    pub kernel_rx: Option<Duration>,
    /// The address it was sent to, on a socket with [`enable_pktinfo`]
    /// on (one bound to a wildcard address serves several).
    pub dest: Option<IpAddr>,
}

/// Largest message a socket with `UDP_GRO` on hands over: datagrams of one
/// flow joined, up to an IP datagram's 64 KiB.
const GRO_BUF_SIZE: usize = 65_536;

/// What one received message's control messages said.
#[derive(Clone, Copy, Default)]
struct Meta {
    /// `UDP_GRO`: the size of each joined datagram (the last may be
    /// shorter); 0 for a message that is one datagram.
    segment: usize,
    /// `SCM_TIMESTAMPNS`, CLOCK_REALTIME.
    kernel_rx: Option<Duration>,
    /// `IP_PKTINFO` / `IPV6_PKTINFO`: the destination address.
    dest: Option<IpAddr>,
}

/// Buffers for one `recvmmsg` (reused across calls and sockets).
pub struct RecvBatch {
    /// `BATCH` slots of `slot` bytes.
    bufs: Vec<u8>,
    slot: usize,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u8; CMSG_SPACE]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    meta: Vec<Meta>,
    /// Messages the last `recv` read.
    messages: usize,
    /// Datagrams in them (more than `len` where GRO joined some).
    datagrams: usize,
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
    /// Allocates the buffers, each for one datagram of up to 2 KiB.
    pub fn new() -> Self {
        Self::with_slot(BUF_SIZE)
    }

    /// Allocates buffers for a socket with [`enable_gro`] on: each message
    /// may be 64 KiB of joined datagrams (2 MiB in all, touched only as
    /// far as messages fill them).
    pub fn with_gro() -> Self {
        Self::with_slot(GRO_BUF_SIZE)
    }

    /// Buffers for `socket`: with [`enable_gro`] turned on first when `gro`
    /// is asked for and the kernel takes it, plain otherwise.
    pub fn for_socket(socket: &impl AsRawFd, gro: bool) -> Self {
        if gro && enable_gro(socket).is_ok() {
            Self::with_gro()
        } else {
            Self::new()
        }
    }

    fn with_slot(slot: usize) -> Self {
        RecvBatch {
            bufs: vec![0; slot * BATCH],
            slot,
            // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C structs
            // for which all-zero bytes are a valid value.
            names: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            cmsgs: vec![[0; CMSG_SPACE]; BATCH],
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            meta: vec![Meta::default(); BATCH],
            messages: 0,
            datagrams: 0,
        }
    }

    /// Reads up to [`BATCH`] messages without blocking. `Ok(0)` never happens:
    /// an empty socket is `Err(WouldBlock)`.
    pub fn recv(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        self.recv_max(socket, BATCH)
    }

    /// Reads up to `max` messages (1 to [`BATCH`]) without blocking, a
    /// caller's read budget, and returns how many it read: each is one
    /// datagram, or on a socket with `UDP_GRO` on, a run of them
    /// ([`len`](Self::len) counts datagrams). An empty socket is
    /// `Err(WouldBlock)`.
    pub fn recv_max(&mut self, socket: &impl AsRawFd, max: usize) -> io::Result<usize> {
        let max = max.clamp(1, BATCH);
        let slot = self.slot;
        let slots = self
            .bufs
            .chunks_exact_mut(slot)
            .zip(self.names.iter_mut())
            .zip(self.cmsgs.iter_mut())
            .zip(self.iovs.iter_mut())
            .zip(self.hdrs.iter_mut())
            .take(max);
        for ((((buf, name), cmsg), iov), hdr) in slots {
            *iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: slot,
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
            self.messages = 0;
            self.datagrams = 0;
            return Err(io::Error::last_os_error());
        }
        self.messages = n as usize;
        self.datagrams = 0;
        for (hdr, meta) in self
            .hdrs
            .iter()
            .zip(self.meta.iter_mut())
            .take(self.messages)
        {
            *meta = meta_of(&hdr.msg_hdr);
            let len = (hdr.msg_len as usize).min(slot);
            self.datagrams += match meta.segment {
                0 => 1,
                seg => len.div_ceil(seg).max(1),
            };
        }
        Ok(self.messages)
    }

    /// How many datagrams the last `recv` read.
    pub fn len(&self) -> usize {
        self.datagrams
    }

    /// Whether the last `recv` read nothing.
    pub fn is_empty(&self) -> bool {
        self.datagrams == 0
    }

    /// The `i`th datagram of the last `recv` (None past the end, or for a
    /// source address that is neither IPv4 nor IPv6).
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        if self.datagrams == self.messages {
            // One datagram per message: no walk.
            return self.message(i).and_then(|m| m.segments().next());
        }
        self.iter().nth(i)
    }

    /// The datagrams of the last `recv`, in order.
    pub fn iter(&self) -> impl Iterator<Item = Datagram<'_>> {
        (0..self.messages)
            .filter_map(move |i| self.message(i))
            .flat_map(Message::segments)
    }

    /// The kernel receive time of each message of the last `recv` that has
    /// one: one per socket read, a GRO run once (it waited in the socket's
    /// queue as one entry), which is what socket dwell is measured on.
    pub fn kernel_times(&self) -> impl Iterator<Item = Duration> + '_ {
        self.meta
            .iter()
            .take(self.messages)
            .filter_map(|m| m.kernel_rx)
    }

    /// The `i`th message of the last `recv`.
    fn message(&self, i: usize) -> Option<Message<'_>> {
        if i >= self.messages {
            return None;
        }
        let hdr = self.hdrs.get(i)?;
        let meta = self.meta.get(i)?;
        let len = (hdr.msg_len as usize).min(self.slot);
        let start = i.checked_mul(self.slot)?;
        Some(Message {
            source: sockaddr_to_std(self.names.get(i)?)?,
            data: self.bufs.get(start..start.checked_add(len)?)?,
            meta: *meta,
        })
    }
}

/// One received message: a datagram, or a run of them joined by GRO.
struct Message<'a> {
    source: SocketAddr,
    data: &'a [u8],
    meta: Meta,
}

impl<'a> Message<'a> {
    /// Its datagrams: cut at the GRO segment size, or the whole (even
    /// empty) message.
    fn segments(self) -> impl Iterator<Item = Datagram<'a>> {
        let Message { source, data, meta } = self;
        let size = match meta.segment {
            0 => usize::MAX,
            s => s,
        };
        let mut rest = Some(data);
        std::iter::from_fn(move || {
            let d = rest.take()?;
            let data = match d.split_at_checked(size) {
                Some((head, tail)) if !tail.is_empty() => {
                    rest = Some(tail);
                    head
                }
                _ => d,
            };
            Some(Datagram {
                source,
                data,
                kernel_rx: meta.kernel_rx,
                dest: meta.dest,
            })
        })
    }
}

/// Reads the `SCM_TIMESTAMPNS` and `UDP_GRO` control messages of a
/// received header.
fn meta_of(h: &libc::msghdr) -> Meta {
    let mut meta = Meta::default();
    // SAFETY: the header was filled by recvmmsg; CMSG_* walk its control buffer
    // within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    meta.kernel_rx = Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
                }
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    let seg: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    meta.segment = usize::try_from(seg).unwrap_or(0);
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let pi: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    meta.dest = Some(Ipv4Addr::from(u32::from_be(pi.ipi_addr.s_addr)).into());
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let pi: libc::in6_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    meta.dest = Some(Ipv6Addr::from(pi.ipi6_addr.s6_addr).into());
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    meta
}

/// Turns on `UDP_GRO`: the kernel may hand over a run of one sender's
/// datagrams of one size as one message (read them with
/// [`RecvBatch::with_gro`], which cuts them apart again). One queueing and
/// one wake-up for the run instead of one per datagram.
pub fn enable_gro(socket: &impl AsRawFd) -> io::Result<()> {
    set_flag(socket, libc::SOL_UDP, libc::UDP_GRO)
}

/// Turns on `IP_PKTINFO` (and `IPV6_PKTINFO` on an IPv6 socket): each
/// received datagram carries the address it was sent to
/// ([`Datagram::dest`]), so one socket bound to a wildcard address can
/// serve several local addresses, answering from each with
/// [`CopyBatch::push_from`].
pub fn enable_pktinfo(socket: &UdpSocket) -> io::Result<()> {
    match socket.local_addr()? {
        SocketAddr::V4(_) => set_flag(socket, libc::IPPROTO_IP, libc::IP_PKTINFO),
        SocketAddr::V6(_) => set_flag(socket, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO),
    }
}

/// Sets a boolean socket option to 1.
fn set_flag(socket: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: valid fd, option value points at a c_int of the given size.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
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
    /// Messages the kernel took: fewer than `sent` where UDP GSO carried
    /// several datagrams in one.
    pub messages: usize,
    /// GSO messages the kernel refused, whose datagrams went out again one
    /// by one (counted in `sent`, `dropped` and `messages` as such).
    pub gso_refused: usize,
}

/// Most datagrams one GSO message carries (the kernel allows 64).
const MAX_GSO_SEGMENTS: usize = BATCH;
/// Most payload bytes one GSO message carries: an IP datagram's 64 KiB,
/// less room for the headers.
const MAX_GSO_BYTES: usize = 60_000;

/// Room for the control messages of one sent message: a source address
/// (`IP_PKTINFO`, 32 bytes, or `IPV6_PKTINFO`, 40) then a `UDP_SEGMENT`
/// (24), aligned as a `cmsghdr` must be.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct SegmentCmsg([u8; 64]);

/// Whether this kernel takes `UDP_SEGMENT` (Linux 4.18 and later): the
/// socket option reads back without error.
pub fn gso_supported(socket: &impl AsRawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid fd; value and length point at locals of the right size.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0
}

/// The `sendmmsg` headers of one call, each carrying one datagram or, with
/// UDP GSO on, a run of consecutive datagrams to one destination whose
/// sizes are equal but for a shorter last one (the kernel cuts the run back
/// into datagrams of the first one's size; a receiver without `UDP_GRO`
/// reads them one by one, as if sent one by one). A run costs the sender
/// one pass through the UDP and IP output path instead of one per datagram.
struct Messages {
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<SegmentCmsg>,
    hdrs: Vec<libc::mmsghdr>,
    /// Datagrams in each header.
    segs: Vec<usize>,
    /// Bytes of each header's control buffer that hold its source address
    /// (0 without one): kept when a refused GSO run goes out one by one.
    src_cmsg: Vec<usize>,
    gso: bool,
    /// The source of every datagram not given one of its own.
    source: Option<IpAddr>,
}

impl Messages {
    fn new() -> Self {
        Messages {
            // SAFETY: plain C structs for which all-zero bytes are valid.
            names: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            cmsgs: vec![SegmentCmsg([0; 64]); BATCH],
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            segs: vec![0; BATCH],
            src_cmsg: vec![0; BATCH],
            gso: false,
            source: None,
        }
    }

    /// Sends the datagrams `iovs` to `dests` (pairwise, at most [`BATCH`]),
    /// in order, each from its address in `srcs` where that is given
    /// (`srcs` is empty or pairs with `dests`), else from `source` (`None`:
    /// the kernel picks), joining runs into GSO messages when `gso` is on.
    ///
    /// # Safety
    /// Every iovec must point at a buffer that is live for the call.
    unsafe fn send(
        &mut self,
        socket: &impl AsRawFd,
        dests: &[SocketAddr],
        srcs: &[Option<IpAddr>],
        iovs: &mut [libc::iovec],
        res: &mut SendResult,
    ) {
        let n = dests.len().min(iovs.len()).min(BATCH);
        let iov_base = iovs.as_mut_ptr();
        let mut i = 0;
        let mut m = 0;
        let messages = self
            .names
            .iter_mut()
            .zip(self.cmsgs.iter_mut())
            .zip(self.hdrs.iter_mut())
            .zip(self.segs.iter_mut())
            .zip(self.src_cmsg.iter_mut());
        for ((((name, cmsg), hdr), segs), src_cmsg) in messages {
            let (Some(dest), Some(first)) = (dests.get(i), iovs.get(i)) else {
                break;
            };
            if i >= n {
                break;
            }
            let src_of = |j: usize| srcs.get(j).copied().flatten().or(self.source);
            let src = src_of(i);
            let size = first.iov_len;
            let mut k = 1;
            if self.gso && size > 0 {
                let mut bytes = size;
                let rest = dests
                    .iter()
                    .zip(iovs.iter())
                    .enumerate()
                    .take(n)
                    .skip(i + 1);
                for (j, (d, iov)) in rest {
                    let len = iov.iov_len;
                    if k == MAX_GSO_SEGMENTS
                        || d != dest
                        || src_of(j) != src
                        || len == 0
                        || len > size
                        || bytes + len > MAX_GSO_BYTES
                    {
                        break;
                    }
                    k += 1;
                    bytes += len;
                    if len < size {
                        break; // only the last one may be shorter
                    }
                }
            }
            // SAFETY: zeroed storage is a valid starting value.
            *name = unsafe { MaybeUninit::zeroed().assume_init() };
            let namelen = std_to_sockaddr(dest, name);
            let h = &mut hdr.msg_hdr;
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            // SAFETY: i < n <= iovs.len(), and i + k <= n.
            h.msg_iov = unsafe { iov_base.add(i) };
            h.msg_iovlen = k;
            h.msg_flags = 0;
            hdr.msg_len = 0;
            // SAFETY: the control buffer is aligned for a cmsghdr and has
            // room for a source address and a segment size (see
            // SegmentCmsg); `fill_cmsgs` writes within it.
            let (len, src_len) = unsafe { fill_cmsgs(&mut cmsg.0, src, (k > 1).then_some(size)) };
            if len > 0 {
                h.msg_control = cmsg.0.as_mut_ptr().cast();
                h.msg_controllen = len;
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            *src_cmsg = src_len;
            *segs = k;
            i += k;
            m += 1;
        }
        if let (Some(hdrs), Some(segs), Some(src_cmsg)) = (
            self.hdrs.get_mut(..m),
            self.segs.get(..m),
            self.src_cmsg.get(..m),
        ) {
            // SAFETY: these headers were just pointed at live names,
            // control buffers and the caller's iovecs.
            if unsafe { send_all(socket, hdrs, segs, src_cmsg, res) } {
                self.gso = false;
            }
        }
    }
}

/// Headers for `sendmmsg` of datagrams the caller owns (they must outlive
/// [`SendBatch::send`]).
pub struct SendBatch {
    dests: Vec<SocketAddr>,
    iovs: Vec<libc::iovec>,
    msgs: Messages,
}

// See RecvBatch: pointers are rebuilt per call and point at caller data.
unsafe impl Send for SendBatch {}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// Allocates the headers; GSO off.
    pub fn new() -> Self {
        SendBatch {
            dests: Vec::with_capacity(BATCH),
            // SAFETY: plain C structs, all-zero is valid.
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            msgs: Messages::new(),
        }
    }

    /// Turns UDP GSO on or off for later sends. On, it stays on until a
    /// device refuses it (`EIO`: no checksum offload on the way out);
    /// a refused message is sent again datagram by datagram.
    pub fn set_gso(&mut self, on: bool) {
        self.msgs.gso = on;
    }

    /// Whether GSO is on.
    pub fn gso(&self) -> bool {
        self.msgs.gso
    }

    /// Sends every later datagram from `source` (`None`: the kernel picks,
    /// the default). For a socket bound to a wildcard address on a host of
    /// several: the kernel would pick by route, which need not be the
    /// address the peer sent to, and a peer (ICE) may take an answer only
    /// from there. `source` must be an address of this host.
    pub fn set_source(&mut self, source: Option<IpAddr>) {
        self.msgs.source = source;
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
            self.dests.clear();
            // Slots first: zip must not pull an item it has no slot for.
            for (iov, (dst, data)) in self.iovs.iter_mut().zip(it.by_ref()) {
                *iov = libc::iovec {
                    iov_base: data.as_ptr() as *mut libc::c_void,
                    iov_len: data.len(),
                };
                self.dests.push(*dst);
            }
            // SAFETY: the iovecs point at the caller's datagrams, which
            // outlive this call.
            unsafe {
                self.msgs
                    .send(socket, &self.dests, &[], &mut self.iovs, &mut res)
            };
        }
        res
    }
}

/// Writes into `buf` an `IP_PKTINFO` (or `IPV6_PKTINFO`) control message
/// naming `src` as the source address, then a `UDP_SEGMENT` of `segment`;
/// either may be absent. Returns the control length in all and that of
/// the source address's message alone (0 without one).
///
/// # Safety
/// `buf` must be aligned for a `cmsghdr` (SegmentCmsg is).
unsafe fn fill_cmsgs(
    buf: &mut [u8; 64],
    src: Option<IpAddr>,
    segment: Option<usize>,
) -> (usize, usize) {
    let base = buf.as_mut_ptr();
    // SAFETY (both calls): each message is written at an offset that is a
    // multiple of CMSG_SPACE's alignment, and the two together take at
    // most CMSG_SPACE(20) + CMSG_SPACE(2) = 64 bytes, the buffer's size.
    let src_len = match src {
        Some(IpAddr::V4(ip)) => unsafe {
            let pi = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from(ip).to_be(),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            put_cmsg(base, libc::IPPROTO_IP, libc::IP_PKTINFO, pi)
        },
        Some(IpAddr::V6(ip)) => unsafe {
            let pi = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: 0,
            };
            put_cmsg(base, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, pi)
        },
        None => 0,
    };
    let mut off = src_len;
    if let Some(size) = segment {
        // SAFETY: as above.
        off += unsafe { put_cmsg(base.add(off), libc::SOL_UDP, libc::UDP_SEGMENT, size as u16) };
    }
    (off, src_len)
}

/// Writes one control message carrying `value` at `at`; returns the
/// space it takes (`CMSG_SPACE`).
///
/// # Safety
/// `at` must be aligned for a `cmsghdr` and have `CMSG_SPACE` of `T`'s
/// size writable.
unsafe fn put_cmsg<T>(at: *mut u8, level: libc::c_int, ty: libc::c_int, value: T) -> usize {
    let len = size_of::<T>() as u32;
    // SAFETY: the caller vouches for alignment and room.
    unsafe {
        let c = at.cast::<libc::cmsghdr>();
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(len) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<T>(), value);
        libc::CMSG_SPACE(len) as usize
    }
}

/// `sendmmsg` until every header is sent or dropped, never blocking: a
/// datagram the kernel refuses (full buffer, unreachable destination, wrong
/// family) is counted in `dropped` and the rest still go, in order. A GSO
/// message the kernel refuses is sent again datagram by datagram; true when
/// one was refused with `EIO` (the device cannot take GSO at all).
///
/// # Safety
/// Every header must point at a name, control buffer, iovecs and buffers
/// that are live for the call; `segs` holds each header's iovec count,
/// `src_cmsg` the length of its source address's control message.
unsafe fn send_all(
    socket: &impl AsRawFd,
    hdrs: &mut [libc::mmsghdr],
    segs: &[usize],
    src_cmsg: &[usize],
    res: &mut SendResult,
) -> bool {
    let n = hdrs.len();
    let mut off = 0;
    let mut refused = false;
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
            let r = r as usize;
            res.sent += segs.iter().skip(off).take(r).sum::<usize>();
            res.messages += r;
            off += r;
            continue;
        }
        let err = io::Error::last_os_error();
        if r < 0 && err.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // The first message failed: drop it and go on with the rest, or,
        // if it was a GSO run, send its datagrams one by one.
        match (segs.get(off).copied(), hdrs.get(off)) {
            (Some(k), Some(h)) if k > 1 => {
                refused |= err.raw_os_error() == Some(libc::EIO);
                res.gso_refused += 1;
                let keep = src_cmsg.get(off).copied().unwrap_or(0);
                // SAFETY: the header is live and carries k iovecs; its
                // control buffer starts with `keep` bytes of source address.
                unsafe { send_each(socket, &h.msg_hdr, k, keep, res) };
            }
            _ => res.dropped += 1,
        }
        off += 1;
    }
    refused
}

/// Sends the `k` iovecs of a refused GSO message as `k` datagrams, each
/// with the first `keep` bytes of its control buffer (its source address).
///
/// # Safety
/// `h` must point at a live name, `k` live iovecs and, where `keep` > 0, a
/// control buffer starting with that many bytes of control messages.
unsafe fn send_each(
    socket: &impl AsRawFd,
    h: &libc::msghdr,
    k: usize,
    keep: usize,
    res: &mut SendResult,
) {
    let mut one = *h;
    one.msg_iovlen = 1;
    if keep == 0 {
        one.msg_control = std::ptr::null_mut();
    }
    one.msg_controllen = keep;
    for j in 0..k {
        // SAFETY: j < k, the header's iovec count.
        one.msg_iov = unsafe { h.msg_iov.add(j) };
        loop {
            // SAFETY: the header points at a live name and one live iovec.
            let r = unsafe { libc::sendmsg(socket.as_raw_fd(), &one, libc::MSG_DONTWAIT) };
            if r >= 0 {
                res.sent += 1;
                res.messages += 1;
            } else if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            } else {
                res.dropped += 1;
            }
            break;
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
    dests: Vec<SocketAddr>,
    /// Source address of each queued datagram (None: the kernel picks).
    srcs: Vec<Option<IpAddr>>,
    iovs: Vec<libc::iovec>,
    msgs: Messages,
}

// As for RecvBatch: pointers only into its own vectors, rebuilt per call.
unsafe impl Send for CopyBatch {}

impl Default for CopyBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl CopyBatch {
    /// Allocates the buffers; GSO off.
    pub fn new() -> Self {
        CopyBatch {
            bufs: vec![[0; BUF_SIZE]; BATCH],
            lens: vec![0; BATCH],
            dests: Vec::with_capacity(BATCH),
            srcs: Vec::with_capacity(BATCH),
            // SAFETY: plain C structs for which all-zero bytes are valid.
            iovs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            msgs: Messages::new(),
        }
    }

    /// As [`SendBatch::set_gso`].
    pub fn set_gso(&mut self, on: bool) {
        self.msgs.gso = on;
    }

    /// Whether GSO is on.
    pub fn gso(&self) -> bool {
        self.msgs.gso
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
        self.push_from(socket, None, dest, data, res);
    }

    /// [`push`](Self::push) from source address `src` (`None`: the kernel
    /// picks), for a socket bound to a wildcard address that serves several
    /// local addresses ([`enable_pktinfo`]).
    pub fn push_from(
        &mut self,
        socket: &impl AsRawFd,
        src: Option<IpAddr>,
        dest: SocketAddr,
        data: &[u8],
        res: &mut SendResult,
    ) {
        if self.dests.len() == BATCH {
            self.flush(socket, res);
        }
        let i = self.dests.len();
        let (Some(buf), Some(len)) = (self.bufs.get_mut(i), self.lens.get_mut(i)) else {
            res.dropped += 1;
            return;
        };
        let Some(dst) = buf.get_mut(..data.len()) else {
            res.dropped += 1;
            return;
        };
        dst.copy_from_slice(data);
        *len = data.len();
        self.dests.push(dest);
        self.srcs.push(src);
    }

    /// Sends everything queued, in order (see [`send_all`] for refusals).
    pub fn flush(&mut self, socket: &impl AsRawFd, res: &mut SendResult) {
        let n = self.dests.len();
        let slots = self
            .bufs
            .iter_mut()
            .zip(self.lens.iter())
            .zip(self.iovs.iter_mut())
            .take(n);
        for ((buf, len), iov) in slots {
            *iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: *len,
            };
        }
        // SAFETY: the first n iovecs were just pointed into buffers owned
        // by `self`, which outlive the call.
        unsafe {
            self.msgs
                .send(socket, &self.dests, &self.srcs, &mut self.iovs, res)
        };
        self.dests.clear();
        self.srcs.clear();
    }
}

/// Turns on `SO_TIMESTAMPNS` so `recvmmsg` reports kernel receive times.
pub fn enable_rx_timestamps(socket: &UdpSocket) -> io::Result<()> {
    set_flag(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS)
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

    /// Reads every datagram waiting on `rx` (bounded), with its source.
    fn drain_all(rx: &UdpSocket, want: usize) -> Vec<(SocketAddr, Vec<u8>)> {
        rx.set_nonblocking(true).unwrap();
        read_all(rx, &mut RecvBatch::new(), want)
            .into_iter()
            .map(|(source, _, data)| (source, data))
            .collect()
    }

    /// Datagrams of the given (destination index, length), each filled with
    /// its own index so that order and boundaries show.
    fn datagrams(plan: &[(usize, usize)]) -> Vec<(usize, Vec<u8>)> {
        plan.iter()
            .enumerate()
            .map(|(i, &(d, len))| (d, vec![i as u8; len]))
            .collect()
    }

    /// Runs to one destination, equal sizes but a shorter last: one
    /// message each; a longer datagram, another destination or a datagram
    /// after a shorter one starts a new message.
    const GSO_PLAN: &[(usize, usize)] = &[
        (0, 100),
        (0, 100),
        (0, 100),
        (0, 50),
        (0, 100),
        (1, 100),
        (1, 100),
        (1, 120),
        (0, 7),
    ];
    const GSO_PLAN_MESSAGES: usize = 5;

    fn check_received(rxs: &[UdpSocket], tx: &UdpSocket, sent: &[(usize, Vec<u8>)]) {
        for (r, rx) in rxs.iter().enumerate() {
            let want: Vec<Vec<u8>> = sent
                .iter()
                .filter(|(d, _)| *d == r)
                .map(|(_, p)| p.clone())
                .collect();
            let got = drain_all(rx, want.len());
            assert!(
                got.iter()
                    .all(|(from, _)| *from == tx.local_addr().unwrap())
            );
            let got: Vec<Vec<u8>> = got.into_iter().map(|(_, p)| p).collect();
            assert_eq!(got, want, "receiver {r}");
        }
    }

    fn two_receivers_and_a_sender() -> ([UdpSocket; 2], Vec<SocketAddr>, UdpSocket) {
        let rxs = [
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        ];
        let dsts = rxs.iter().map(|r| r.local_addr().unwrap()).collect();
        (rxs, dsts, UdpSocket::bind("127.0.0.1:0").unwrap())
    }

    #[test]
    fn gso_joins_runs_and_receivers_read_the_datagrams_as_sent() {
        let (rxs, dsts, tx) = two_receivers_and_a_sender();
        assert!(gso_supported(&tx), "this kernel has UDP_SEGMENT");
        let sent = datagrams(GSO_PLAN);

        let mut sb = SendBatch::new();
        sb.set_gso(true);
        let res = sb.send(&tx, sent.iter().map(|(d, p)| (&dsts[*d], p.as_slice())));
        assert_eq!((res.sent, res.dropped), (sent.len(), 0));
        assert_eq!(res.messages, GSO_PLAN_MESSAGES);
        check_received(&rxs, &tx, &sent);

        let mut cb = CopyBatch::new();
        cb.set_gso(true);
        let mut out = SendResult::default();
        for (d, p) in &sent {
            cb.push(&tx, dsts[*d], p, &mut out);
        }
        cb.flush(&tx, &mut out);
        assert_eq!((out.sent, out.dropped), (sent.len(), 0));
        assert_eq!(out.messages, GSO_PLAN_MESSAGES);
        check_received(&rxs, &tx, &sent);

        // Off (the default): one message per datagram.
        let res = SendBatch::new().send(&tx, sent.iter().map(|(d, p)| (&dsts[*d], p.as_slice())));
        assert_eq!((res.sent, res.messages), (sent.len(), sent.len()));
        check_received(&rxs, &tx, &sent);
    }

    #[test]
    fn a_gro_receiver_reads_a_gso_run_as_one_message_and_gets_its_datagrams() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        enable_rx_timestamps(&rx).unwrap();
        enable_gro(&rx).unwrap();
        let dst = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let plan: Vec<(usize, usize)> = GSO_PLAN.iter().map(|&(_, len)| (0, len)).collect();
        let sent = datagrams(&plan);
        let mut sb = SendBatch::new();
        sb.set_gso(true);
        let res = sb.send(&tx, sent.iter().map(|(_, p)| (&dst, p.as_slice())));
        assert_eq!(res.sent, sent.len());
        let mut rb = RecvBatch::with_gro();
        let (mut messages, mut got) = (0, Vec::new());
        for _ in 0..200 {
            match rb.recv(&rx) {
                Ok(n) => {
                    messages += n;
                    assert!(rb.len() >= n);
                    assert_eq!(rb.kernel_times().count(), n, "one time per message");
                    for (i, d) in rb.iter().enumerate() {
                        assert!(d.kernel_rx.is_some());
                        assert_eq!(rb.get(i).unwrap().data, d.data);
                        got.push(d.data.to_vec());
                    }
                    assert!(rb.get(rb.len()).is_none());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if got.len() >= sent.len() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
        let want: Vec<Vec<u8>> = sent.into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, want);
        assert!(
            messages < want.len(),
            "{messages} messages for {} datagrams",
            want.len()
        );
    }

    #[test]
    fn a_refused_gso_message_goes_out_datagram_by_datagram() {
        let (rxs, dsts, tx) = two_receivers_and_a_sender();
        // Without UDP checksums the kernel refuses every GSO message
        // (EINVAL), as a device without checksum offload does (EIO).
        set_flag(&tx, libc::SOL_SOCKET, libc::SO_NO_CHECK).unwrap();
        let sent = datagrams(GSO_PLAN);
        let mut sb = SendBatch::new();
        sb.set_gso(true);
        let res = sb.send(&tx, sent.iter().map(|(d, p)| (&dsts[*d], p.as_slice())));
        assert_eq!((res.sent, res.dropped), (sent.len(), 0));
        assert_eq!(res.messages, sent.len(), "every datagram on its own");
        // The plan's two runs of more than one datagram (4 to receiver 0,
        // 2 to receiver 1), each refused once.
        assert_eq!(res.gso_refused, 2);
        assert!(sb.gso(), "EINVAL is this message's, not the device's");
        check_received(&rxs, &tx, &sent);
    }

    /// Reads every datagram waiting on `rx` (bounded: 200 polls of 5 ms
    /// once `want` have come): (source, destination, bytes).
    fn read_all(
        rx: &UdpSocket,
        rb: &mut RecvBatch,
        want: usize,
    ) -> Vec<(SocketAddr, Option<IpAddr>, Vec<u8>)> {
        let mut got = Vec::new();
        for _ in 0..200 {
            match rb.recv(rx) {
                Ok(_) => got.extend(rb.iter().map(|d| (d.source, d.dest, d.data.to_vec()))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if got.len() >= want {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
        got
    }

    /// One socket bound to the wildcard address serves two loopback
    /// addresses: what is sent to each is read with that destination, and
    /// what is sent from each (GSO runs included, never joined across two
    /// sources) arrives from it; a refused run keeps its source too.
    #[test]
    fn a_wildcard_socket_answers_from_the_address_each_datagram_came_to() {
        let shared = UdpSocket::bind("0.0.0.0:0").unwrap();
        shared.set_nonblocking(true).unwrap();
        enable_pktinfo(&shared).unwrap();
        enable_gro(&shared).unwrap();
        let port = shared.local_addr().unwrap().port();
        let a: IpAddr = Ipv4Addr::new(127, 1, 0, 5).into();
        let b: IpAddr = Ipv4Addr::new(127, 1, 0, 6).into();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_nonblocking(true).unwrap();
        let to = peer.local_addr().unwrap();

        peer.send_to(b"to a", (a, port)).unwrap();
        peer.send_to(b"to b", (b, port)).unwrap();
        let mut rb = RecvBatch::with_gro();
        let got = read_all(&shared, &mut rb, 2);
        let dests: Vec<(Option<IpAddr>, &[u8])> =
            got.iter().map(|(_, d, p)| (*d, p.as_slice())).collect();
        assert_eq!(dests, [(Some(a), &b"to a"[..]), (Some(b), &b"to b"[..])]);
        assert!(got.iter().all(|(s, _, _)| *s == to));

        // Three equal datagrams from a, then two from b and one unnamed
        // (the kernel picks 127.0.0.1): one GSO run may not take in the
        // next source.
        let plan: [(Option<IpAddr>, u8); 6] = [
            (Some(a), 1),
            (Some(a), 2),
            (Some(a), 3),
            (Some(b), 4),
            (Some(b), 5),
            (None, 6),
        ];
        for refuse in [false, true] {
            if refuse {
                // As in a_refused_gso_message_goes_out_datagram_by_datagram.
                set_flag(&shared, libc::SOL_SOCKET, libc::SO_NO_CHECK).unwrap();
            }
            let mut cb = CopyBatch::new();
            cb.set_gso(true);
            let mut res = SendResult::default();
            for (src, tag) in plan {
                cb.push_from(&shared, src, to, &[tag; 100], &mut res);
            }
            cb.flush(&shared, &mut res);
            assert_eq!((res.sent, res.dropped), (6, 0), "refused: {refuse}");
            if refuse {
                assert_eq!((res.messages, res.gso_refused), (6, 2));
            } else {
                assert_eq!(res.messages, 3, "a run per source");
            }
            let got = read_all(&peer, &mut RecvBatch::new(), 6);
            let froms: Vec<(IpAddr, u16, u8)> = got
                .iter()
                .map(|(s, _, p)| (s.ip(), s.port(), p[0]))
                .collect();
            let local: IpAddr = Ipv4Addr::LOCALHOST.into();
            let want: Vec<(IpAddr, u16, u8)> = plan
                .iter()
                .map(|(src, tag)| (src.unwrap_or(local), port, *tag))
                .collect();
            assert_eq!(froms, want, "refused: {refuse}");
        }
    }

    #[test]
    fn a_send_batch_with_a_source_sends_every_datagram_from_it() {
        let wild = UdpSocket::bind("0.0.0.0:0").unwrap();
        wild.set_nonblocking(true).unwrap();
        let port = wild.local_addr().unwrap().port();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_nonblocking(true).unwrap();
        let to = peer.local_addr().unwrap();
        let other: IpAddr = Ipv4Addr::new(127, 0, 0, 2).into();
        let local: IpAddr = Ipv4Addr::LOCALHOST.into();
        // Unset, the kernel picks 127.0.0.1 (the loopback route's source);
        // set, every datagram of the GSO run comes from it.
        for (source, want) in [(None, local), (Some(other), other)] {
            let mut sb = SendBatch::new();
            sb.set_gso(true);
            sb.set_source(source);
            let data = [[1u8; 100], [2; 100], [3; 100], [4; 100]];
            let dests = [to; 4];
            let items = dests.iter().zip(data.iter().map(|d| &d[..]));
            let res = sb.send(&wild, items);
            assert_eq!((res.sent, res.dropped, res.messages), (4, 0, 1));
            let got = read_all(&peer, &mut RecvBatch::new(), 4);
            let froms: Vec<(IpAddr, u16, u8)> = got
                .iter()
                .map(|(s, _, p)| (s.ip(), s.port(), p[0]))
                .collect();
            let expect: Vec<(IpAddr, u16, u8)> = (1..=4).map(|t| (want, port, t)).collect();
            assert_eq!(froms, expect, "source {source:?}");
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
