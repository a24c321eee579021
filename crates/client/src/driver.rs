//! The I/O side: one OS thread drives many participants over non-blocking
//! UDP sockets with epoll (read in `recvmmsg` batches, each datagram at its
//! kernel receive time: [`corelay_udp`]; one str0m drain per participant
//! per batch of RTP and RTCP, at once after STUN or DTLS), a timer heap
//! keyed by each participant's next wake-up, and an eventfd for commands.
//! Thread-per-core on the client too: the load generator starts one driver
//! per core; `join()` starts one for a single participant.
//!
//! A driver started with [`Driver::spawn_shared`] also has one socket of
//! its own, bound to the wildcard address, for participants that have no
//! socket: each gets a loopback address of its own on that socket's port
//! ([`Driver::shared_local`]; 127.1.0.0/16), datagrams are told apart by
//! the address they were sent to (`IP_PKTINFO`) and sent from the
//! participant's. One `recvmmsg` then reads what arrived for every such
//! participant, one epoll entry serves them all, and what a read batch or a
//! pass over the timers makes them send goes out in one `sendmmsg`: a load
//! client's wake-ups and system calls per packet no longer grow with the
//! participants it drives (issue 12, item 3). Loopback only: a server
//! elsewhere needs sockets on a routable address.
//!
//! A participant whose config has a `downlink_limit_bps` receives through
//! an emulated bottleneck ([`crate::shaper`]): datagrams read from its
//! socket wait in the shaper's queue (or are dropped when it is full) and
//! are handed to str0m at their release time, on the participant's timer,
//! with that time as their receive time, so str0m's TWCC feedback tells
//! the server's bandwidth estimator the delay and loss it caused.
//!
//! Participants own their snapshots (no lock per packet); each is copied
//! into its shared handle when it connects or disconnects and when its data
//! channel opens or closes, on [`Command::Publish`] and
//! [`Command::PublishAll`], when the driver stops driving it, and at least
//! every [`PUBLISH_INTERVAL`]. A reader that needs the figures of now (a
//! measurement window's edge) asks for them; the copy is not free (its
//! lists and maps, for every participant), so it is not made every few
//! milliseconds for nobody.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::participant::Participant;
use crate::shaper::{Shaper, Verdict};
use crate::stats::Observer;
use crate::turn::Relay;
use corelay_udp::{self as udp, CopyBatch, RecvBatch, RxClock, SendResult};

/// A command to a driver thread.
pub enum Command {
    /// Start driving a participant. `id` must be unique per driver.
    Add {
        /// Key for later commands.
        id: u64,
        /// The participant (answer already applied).
        participant: Box<Participant>,
        /// Its socket (bound to its host candidate address); `None`: the
        /// driver's shared socket, at the participant's local address
        /// (from [`Driver::shared_local`]). Without a shared socket, or
        /// with that address taken, the participant is dropped, its
        /// snapshot's `failed` saying why.
        socket: Option<UdpSocket>,
    },
    /// [`Command::Add`] for a participant that reaches the server through
    /// a TURN relay allocated on its socket ([`crate::connect_relayed`]):
    /// everything it sends is wrapped for the relay, everything the relay
    /// hands back unwrapped, and the allocation is kept alive. It needs a
    /// socket of its own.
    AddRelayed {
        /// Key for later commands.
        id: u64,
        /// The participant (answer applied).
        participant: Box<Participant>,
        /// Its socket, the one the relay was allocated from.
        socket: UdpSocket,
        /// The allocation.
        relay: Box<Relay>,
    },
    /// Stop driving and drop a participant.
    Remove(u64),
    /// Send a text message on the participant's data channel.
    Event(u64, String),
    /// Send raw bytes from the participant's socket to the server's media address.
    Raw(u64, Vec<u8>),
    /// Speech on/off.
    Speaking(u64, bool),
    /// Opus DTX on/off.
    Dtx(u64, bool),
    /// Ask for a keyframe on the participant's next video frame.
    Keyframe(u64),
    /// Publish the participant's snapshot to its shared handle now, then
    /// signal (the sender is dropped unanswered if the participant is gone).
    Publish(u64, SyncSender<()>),
    /// Publish every participant's snapshot now, then signal.
    PublishAll(SyncSender<()>),
    /// Apply a renegotiation offer from the server to an answering
    /// participant ([`Participant::accept_offer`]: new m-lines become
    /// receive slots) and send back its SDP answer or why it was rejected
    /// (the sender is dropped unanswered if the participant is gone).
    Offer(u64, String, SyncSender<Result<String, String>>),
    /// Start an ICE restart ([`Participant::restart_ice`]) and send back
    /// the new SDP offer or why there is none.
    RestartIce(u64, SyncSender<Result<String, String>>),
    /// Apply the server's SDP answer to the participant's pending offer
    /// ([`Participant::accept_answer`]).
    Answer(u64, String, SyncSender<Result<(), String>>),
    /// Move a participant with its own socket to this new socket, as a NAT
    /// rebinding or a switch to another network does: what it sends leaves
    /// from the new address, its str0m session is not told (its candidate
    /// stays the old address), so the server sees the same ICE session from
    /// a new address. A nominating connectivity check goes out from the new
    /// socket at once ([`Participant::nominating_check`]), as a browser's
    /// ICE agent checks its new pair, and the participant notes the move
    /// ([`Participant::moved`]). The reply says whether it was moved.
    Rebind(u64, UdpSocket, SyncSender<bool>),
    /// Stop the thread (drops every participant).
    Shutdown,
}

/// Counters of one driver thread (read with [`Driver::stats`]).
#[derive(Debug, Default)]
pub struct DriverStats {
    /// Datagrams received.
    pub rx_datagrams: std::sync::atomic::AtomicU64,
    /// Datagrams sent.
    pub tx_datagrams: std::sync::atomic::AtomicU64,
    /// Datagrams that could not be sent (socket buffer full or error).
    pub tx_errors: std::sync::atomic::AtomicU64,
    /// Participants driven now.
    pub participants: std::sync::atomic::AtomicU64,
    /// Thread CPU time, ns (user + system of this thread).
    pub cpu_ns: std::sync::atomic::AtomicU64,
}

struct EventFd(i32);

impl EventFd {
    fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall, no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd(fd))
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd.
        let _ = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

/// An epoll instance (level-triggered, `EPOLLIN`), closed on drop: the
/// driver's, and any load thread that drains many sockets as it does.
pub struct Epoll(i32);

impl Epoll {
    /// A new instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll(fd))
    }

    /// Watch `fd` for input; `token` comes back with its events.
    pub fn add(&self, fd: i32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event; fds are open.
        let rc = unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn del(&self, fd: i32) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as above; errors (fd already gone) are ignored.
        unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Wait up to `timeout_ms` (−1: forever); the number of `events` filled.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: `events` is a valid, writable buffer of the given length.
        let n = unsafe {
            libc::epoll_wait(self.0, events.as_mut_ptr(), events.len() as i32, timeout_ms)
        };
        if n < 0 { 0 } else { n as usize }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

/// CPU time of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    u64::try_from(corelay_thread::thread_cpu().as_nanos()).unwrap_or(u64::MAX)
}

/// Pin the calling thread to one CPU (best effort).
pub use corelay_thread::pin_to_cpu;

/// Whether driver threads use UDP offload, unless
/// `CORELAY_CLIENT_NO_UDP_OFFLOAD` is set (to measure what it saves): GRO,
/// participants' sockets taking a sender's run of equal datagrams (the
/// server's GSO messages: a video frame's packets) as one message, one
/// wake-up instead of one per datagram; and GSO, a poll's runs sent so,
/// where the kernel supports it.
fn client_offload() -> bool {
    std::env::var_os("CORELAY_CLIENT_NO_UDP_OFFLOAD").is_none()
}

/// A borrowed file descriptor for the batch calls (the socket it belongs
/// to stays in its entry, which a read does not remove).
struct Fd(i32);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> i32 {
        self.0
    }
}

/// Read up to `max` messages from `fd` into `batch`; `None` once there
/// is nothing to read. WouldBlock: drained. ICMP port unreachable surfaces
/// as ConnectionRefused on Linux: taken like any other error.
fn recv_some(batch: &mut RecvBatch, fd: &Fd, max: usize) -> Option<usize> {
    // Bounded: only a signal retries.
    for _ in 0..100 {
        match batch.recv_max(fd, max) {
            Ok(n) => return Some(n),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Commands on their way to a driver thread. Not `std::sync::mpsc`: its
/// receiver spins (yielding) while a sender is between claiming a slot and
/// writing it, and a driver thread raised above its process's other threads
/// on the same core ([`corelay_thread::rise_above_siblings`], under
/// `chrt`) then never lets that sender finish: the driver spun on one core
/// for 20 minutes in a `RT=1` run. A lock puts the driver to sleep instead,
/// so the sender runs and lets go.
#[derive(Default)]
struct Mailbox(Mutex<VecDeque<Command>>);

impl Mailbox {
    fn push(&self, cmd: Command) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(cmd);
    }

    /// Everything sent so far, in order.
    fn take(&self, into: &mut VecDeque<Command>) {
        let mut q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::swap(&mut *q, into);
    }
}

/// A running driver thread.
pub struct Driver {
    tx: Arc<Mailbox>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<DriverStats>,
    /// The shared socket's port, if the driver has one.
    shared_port: Option<u16>,
    /// Local addresses handed out on it.
    shared_next: std::sync::atomic::AtomicU32,
}

/// The first loopback address [`Driver::shared_local`] hands out
/// (127.1.0.0/16: clear of 127.0.0.1, where servers listen).
pub const SHARED_BASE: u32 = u32::from_be_bytes([127, 1, 0, 0]);
/// Addresses in that range.
const SHARED_SPAN: u32 = 1 << 16;
/// Receive and send buffer size asked for the shared socket (the server's
/// shards ask as much).
const SHARED_BUFFER: usize = 4 << 20;

impl Driver {
    /// Start a driver thread. `pin` pins it to a CPU.
    pub fn spawn(
        name: &str,
        observer: Box<dyn Observer>,
        pin: Option<usize>,
    ) -> io::Result<Driver> {
        Self::start(name, observer, pin, None)
    }

    /// [`spawn`](Self::spawn) with a shared socket (see the module doc)
    /// for participants added without one of their own.
    pub fn spawn_shared(
        name: &str,
        observer: Box<dyn Observer>,
        pin: Option<usize>,
    ) -> io::Result<Driver> {
        use socket2::{Domain, Protocol, Socket, Type};
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        // It queues what a socket per participant would: large buffers
        // (best effort: the kernel caps them at net.core.{r,w}mem_max), so
        // that a driver busy for a few milliseconds loses nothing.
        let _ = sock.set_recv_buffer_size(SHARED_BUFFER);
        let _ = sock.set_send_buffer_size(SHARED_BUFFER);
        sock.bind(&SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)).into())?;
        let sock: UdpSocket = sock.into();
        sock.set_nonblocking(true)?;
        udp::enable_pktinfo(&sock)?;
        // Without kernel receive times datagrams get the time they are read.
        let _ = udp::enable_rx_timestamps(&sock);
        Self::start(name, observer, pin, Some(sock))
    }

    /// Whether the driver has a shared socket.
    pub fn has_shared(&self) -> bool {
        self.shared_port.is_some()
    }

    /// A local address of its own on the shared socket for a participant
    /// about to join (its host candidate); `None` without a shared socket
    /// or once 65,534 have been handed out.
    pub fn shared_local(&self) -> Option<SocketAddr> {
        let port = self.shared_port?;
        // Low bytes 0 and 255 are skipped (no surprise for tools that
        // read them as network and broadcast addresses).
        loop {
            let n = self.shared_next.fetch_add(1, Relaxed);
            if n >= SHARED_SPAN {
                return None;
            }
            if matches!(n & 0xff, 0 | 0xff) {
                continue;
            }
            let ip = std::net::Ipv4Addr::from(SHARED_BASE + n);
            return Some(SocketAddr::new(ip.into(), port));
        }
    }

    fn start(
        name: &str,
        observer: Box<dyn Observer>,
        pin: Option<usize>,
        shared: Option<UdpSocket>,
    ) -> io::Result<Driver> {
        let shared_port = match &shared {
            Some(s) => Some(s.local_addr()?.port()),
            None => None,
        };
        let tx = Arc::new(Mailbox::default());
        let rx = tx.clone();
        let wake = Arc::new(EventFd::new()?);
        let epoll = Epoll::new()?;
        epoll.add(wake.0, WAKE_TOKEN)?;
        if let Some(s) = &shared {
            epoll.add(s.as_raw_fd(), SHARED_TOKEN)?;
        }
        let stats = Arc::new(DriverStats::default());
        let st = stats.clone();
        let wk = wake.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                if let Some(cpu) = pin {
                    pin_to_cpu(cpu);
                }
                // Under `chrt` (scripts/bench RT=1) the send schedule goes
                // before the process's other threads (joins, reporting).
                corelay_thread::rise_above_siblings();
                let mut gro = client_offload();
                if gro && let Some(s) = &shared {
                    gro = udp::enable_gro(s).is_ok();
                }
                let mut tx = CopyBatch::new();
                tx.set_gso(
                    gro && std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))
                        .is_ok_and(|s| udp::gso_supported(&s)),
                );
                let mut l = Loop {
                    epoll,
                    wake: wk,
                    rx,
                    inbox: VecDeque::new(),
                    entries: Vec::new(),
                    free: Vec::new(),
                    by_id: HashMap::new(),
                    by_ip: HashMap::new(),
                    touched: Vec::new(),
                    batch: if gro {
                        RecvBatch::with_gro()
                    } else {
                        RecvBatch::new()
                    },
                    gro,
                    out: Out {
                        obs: observer,
                        heap: BinaryHeap::new(),
                        stats: st,
                        tx,
                        shared,
                    },
                };
                l.run();
            })?;
        Ok(Driver {
            tx,
            wake,
            thread: Some(thread),
            stats,
            shared_port,
            shared_next: std::sync::atomic::AtomicU32::new(1),
        })
    }

    /// Send a command; false if the thread is gone.
    pub fn send(&self, cmd: Command) -> bool {
        // The thread holds the other reference until it ends.
        let ok = Arc::strong_count(&self.tx) > 1;
        self.tx.push(cmd);
        self.wake.wake();
        ok
    }

    /// The thread's counters.
    pub fn stats(&self) -> &DriverStats {
        &self.stats
    }

    /// Stop the thread and wait for it.
    pub fn shutdown(&mut self) {
        self.tx.push(Command::Shutdown);
        self.wake.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

const WAKE_TOKEN: u64 = u64::MAX;
const SHARED_TOKEN: u64 = u64::MAX - 1;
/// How often every participant's snapshot is copied to its shared handle
/// at least (see the module doc for when else).
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
const MAX_EPOLL_EVENTS: usize = 256;
/// Messages read from one socket per readiness before moving on (fairness);
/// with GRO a message may be several datagrams.
const READ_BUDGET: usize = 32;
/// The same for the shared socket, which serves many participants.
const SHARED_READ_BUDGET: usize = 4 * READ_BUDGET;
/// RTP packets str0m holds for one poll (vendor/str0m/PATCHES.md, 5: it
/// drops the oldest beyond that): a batch's GRO runs can carry more, so the
/// drain comes at least this often.
const STR0M_PENDING_PACKETS: usize = 64;

struct Entry {
    id: u64,
    p: Box<Participant>,
    /// Its own socket; `None`: the driver's shared socket.
    sock: Option<UdpSocket>,
    /// Its address on the shared socket (the source of what it sends).
    shared_ip: Option<std::net::IpAddr>,
    /// Receive time of the latest datagram handed to the participant and
    /// not yet drained, and how many RTP/RTCP datagrams were handed over
    /// since the last drain.
    undrained: Option<Instant>,
    held: usize,
    /// Earliest wake-up we have a heap entry for.
    scheduled: Option<Instant>,
    /// The emulated downlink bottleneck, if the participant has one.
    shaper: Option<Shaper>,
    /// Latest time handed to the participant (receive times never go back).
    fed: Option<Instant>,
    /// Its TURN relay, if it reaches the server through one (then what it
    /// sends is wrapped in [`flush`] and what it receives unwrapped in
    /// [`Entry::feed_relayed`]; a direct participant's path has no new step
    /// but one test per flush and one per read batch).
    relay: Option<Box<Relay>>,
}

impl Entry {
    fn fed(&mut self, at: Instant) -> Instant {
        let t = self.fed.map_or(at, |f| f.max(at));
        self.fed = Some(t);
        t
    }

    /// Hand one datagram read from a socket to the participant (through
    /// its bottleneck, if it has one). RTP and RTCP wait for one drain per
    /// batch ([`Entry::drain`]); true when this one is the first to wait.
    fn feed(&mut self, d: &udp::Datagram<'_>, now: Instant, idx: usize, out: &mut Out) -> bool {
        if self.shaper.is_some() {
            // Through the bottleneck: what is due goes first.
            self.release_due(now, idx, out);
            let verdict = match &mut self.shaper {
                Some(s) => s.offer(now, d.source, d.data),
                None => Verdict::Pass,
            };
            match verdict {
                Verdict::Pass => {}
                Verdict::Queued => {
                    if let Some(t) = self.shaper.as_ref().and_then(Shaper::next_release) {
                        schedule(self, t, &mut out.heap, idx);
                    }
                    return false;
                }
                Verdict::Dropped => return false,
            }
        }
        let now = self.fed(now);
        self.p.handle_datagram(now, d.source, d.data, &mut *out.obs);
        if is_rtp_or_rtcp(d.data) && self.held + 1 < STR0M_PENDING_PACKETS {
            let first = self.undrained.is_none();
            self.undrained = Some(now);
            self.held += 1;
            first
        } else {
            // STUN or DTLS: drained at once. str0m takes up what they
            // lead to (the SRTP keys of a finished handshake, a
            // nomination) only in its next poll, and an SRTP packet it is
            // handed before that is dropped. Or str0m's queue of received
            // packets is full.
            self.undrained = None;
            self.held = 0;
            flush(self, now, idx, out);
            false
        }
    }

    /// [`Entry::feed`] for a datagram read by a relayed participant: from
    /// its TURN server, unwrapped first (anything else is dropped: a relayed
    /// client hears only its relay, and the relay's own answers are
    /// handled by it).
    fn feed_relayed(
        &mut self,
        d: &udp::Datagram<'_>,
        now: Instant,
        idx: usize,
        out: &mut Out,
    ) -> bool {
        let Some(r) = &mut self.relay else {
            return self.feed(d, now, idx, out);
        };
        if d.source != r.server {
            return false;
        }
        let Some((source, data)) = r.unwrap(d.data) else {
            return false;
        };
        let inner = udp::Datagram {
            source,
            data,
            kernel_rx: d.kernel_rx,
            dest: d.dest,
        };
        self.feed(&inner, now, idx, out)
    }

    /// One drain for everything fed since the last: str0m (patched, see
    /// vendor/str0m/PATCHES.md 5) queues a batch's RTP packets, each
    /// stamped with its own receive time, and one walk of its outputs and
    /// timers serves them all.
    fn drain(&mut self, idx: usize, out: &mut Out) {
        self.held = 0;
        if let Some(now) = self.undrained.take() {
            flush(self, now, idx, out);
        }
    }

    /// Hand every shaped datagram due by `now` to the participant, each
    /// at its release time.
    fn release_due(&mut self, now: Instant, idx: usize, out: &mut Out) {
        // Bounded by the queue length (nothing is queued meanwhile).
        while let Some(r) = self.shaper.as_mut().and_then(|s| s.pop_due(now)) {
            let at = self.fed(r.at);
            self.p.handle_datagram(at, r.source, &r.data, &mut *out.obs);
            if let Some(s) = &mut self.shaper {
                s.recycle(r.data);
            }
            flush(self, at, idx, out);
        }
    }
}

struct Loop {
    epoll: Epoll,
    wake: Arc<EventFd>,
    rx: Arc<Mailbox>,
    /// Commands taken from `rx` and not processed yet.
    inbox: VecDeque<Command>,
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    by_id: HashMap<u64, usize>,
    /// Entries on the shared socket, by their address on it.
    by_ip: HashMap<std::net::IpAddr, usize>,
    /// Entries fed from the shared socket's batch and not drained yet.
    touched: Vec<usize>,
    batch: RecvBatch,
    /// `UDP_GRO` on for every participant's socket (`batch` sized for it).
    gro: bool,
    out: Out,
}

/// What a flush needs beside the participant: kept apart from
/// `Loop::entries` so that an entry can be borrowed alongside.
struct Out {
    obs: Box<dyn Observer>,
    /// When each participant wants its next timeout: (instant, entry index).
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    stats: Arc<DriverStats>,
    tx: CopyBatch,
    /// The shared socket (see the module doc), if the driver has one.
    /// What its participants send waits in `tx` for [`Out::send_shared`].
    shared: Option<UdpSocket>,
}

impl Out {
    /// Send what the shared socket's participants queued in `tx`.
    fn send_shared(&mut self) {
        let Some(sock) = &self.shared else {
            return;
        };
        let mut sent = SendResult::default();
        self.tx.flush(sock, &mut sent);
        count_sent(&self.stats, &sent);
    }
}

/// Count in `stats` what a send did.
fn count_sent(stats: &DriverStats, sent: &SendResult) {
    stats.tx_datagrams.fetch_add(sent.sent as u64, Relaxed);
    if sent.dropped > 0 {
        stats.tx_errors.fetch_add(sent.dropped as u64, Relaxed);
    }
}

use std::sync::atomic::Ordering::Relaxed;

fn flush(e: &mut Entry, now: Instant, idx: usize, out: &mut Out) {
    if e.sock.is_some() {
        // `tx` holds only this entry's datagrams from here on.
        out.send_shared();
    }
    let Out {
        obs,
        heap,
        stats,
        tx,
        shared,
    } = out;
    if let Some(s) = &e.shaper {
        e.p.set_downlink_stats(s.stats());
    }
    let Some(sock) = e.sock.as_ref().or(shared.as_ref()) else {
        return;
    };
    let src = e.shared_ip;
    let mut sent = SendResult::default();
    // Everything one poll produces (a whole video frame) goes out in one
    // sendmmsg, in order, right after the poll; on the shared socket with
    // what the other participants' polls of this read batch or timer pass
    // produce ([`Out::send_shared`]).
    let next = match &mut e.relay {
        None => {
            e.p.poll_output(now, &mut **obs, &mut |dest: SocketAddr, data: &[u8]| {
                tx.push_from(sock, src, dest, data, &mut sent)
            })
        }
        Some(r) => {
            // Through the relay: each datagram wrapped for the TURN
            // server, and the relay's own refreshes when they are due.
            let server = r.server;
            let next =
                e.p.poll_output(now, &mut **obs, &mut |dest: SocketAddr, data: &[u8]| {
                    tx.push_from(sock, src, server, r.wrap(dest, data), &mut sent)
                });
            r.poll(now, &mut |m: &[u8]| {
                tx.push_from(sock, src, server, m, &mut sent)
            });
            e.p.set_relay_stats(r.relayed, r.server_saw, r.refreshes, r.errors);
            next.min(r.next_due())
        }
    };
    if e.sock.is_some() {
        tx.flush(sock, &mut sent);
    }
    count_sent(stats, &sent);
    let next = match e.shaper.as_ref().and_then(Shaper::next_release) {
        Some(r) => next.min(r),
        None => next,
    };
    schedule(e, next, heap, idx);
}

/// RTP or RTCP by its first byte (RFC 7983: 128 to 191); STUN and DTLS
/// are below.
fn is_rtp_or_rtcp(data: &[u8]) -> bool {
    data.first().is_some_and(|b| (128..=191).contains(b))
}

fn schedule(
    e: &mut Entry,
    at: Instant,
    heap: &mut BinaryHeap<Reverse<(Instant, usize)>>,
    idx: usize,
) {
    if e.scheduled.is_none_or(|s| at < s) {
        e.scheduled = Some(at);
        heap.push(Reverse((at, idx)));
    }
}

impl Loop {
    fn run(&mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EPOLL_EVENTS];
        let mut last_cpu = Instant::now();
        let mut last_publish = Instant::now();
        loop {
            let now = Instant::now();
            self.run_timers(now);
            if now.duration_since(last_publish) >= PUBLISH_INTERVAL {
                last_publish = now;
                for e in self.entries.iter().flatten() {
                    e.p.publish();
                }
            }

            let timeout_ms = match self.out.heap.peek() {
                Some(Reverse((t, _))) => {
                    let now = Instant::now();
                    if *t <= now {
                        0
                    } else {
                        ((*t - now).as_micros().div_ceil(1000)).min(50) as i32
                    }
                }
                // Wake at least every publish interval.
                None => PUBLISH_INTERVAL.as_millis() as i32,
            };
            let n = self.epoll.wait(&mut events, timeout_ms);
            for ev in events.iter().take(n) {
                let token = ev.u64;
                if token == WAKE_TOKEN {
                    self.wake.drain();
                    if !self.commands() {
                        return;
                    }
                    continue;
                }
                if token == SHARED_TOKEN {
                    self.read_shared();
                    continue;
                }
                self.read(token as usize);
            }
            // A command sent without a wake (cannot happen through Driver::send,
            // but cheap to check) still gets processed.
            if !self.commands() {
                return;
            }
            let now = Instant::now();
            self.out.obs.tick(now);
            if now.duration_since(last_cpu) >= Duration::from_millis(200) {
                last_cpu = now;
                self.out.stats.cpu_ns.store(thread_cpu_ns(), Relaxed);
            }
        }
    }

    fn run_timers(&mut self, now: Instant) {
        // Bounded by the heap size at entry plus what this pass reschedules
        // into the past (nothing: str0m timeouts move forward).
        let mut budget = self.out.heap.len() + 16;
        while budget > 0 {
            budget -= 1;
            let Some(Reverse((t, idx))) = self.out.heap.peek().copied() else {
                break;
            };
            if t > now {
                break;
            }
            self.out.heap.pop();
            let Some(Some(e)) = self.entries.get_mut(idx) else {
                continue;
            };
            if e.scheduled != Some(t) {
                continue; // stale
            }
            e.scheduled = None;
            e.release_due(now, idx, &mut self.out);
            let now = e.fed(now);
            e.p.handle_timeout(now, &mut *self.out.obs);
            flush(e, now, idx, &mut self.out);
        }
        self.out.send_shared();
    }

    fn read(&mut self, idx: usize) {
        let Some(Some(e)) = self.entries.get_mut(idx) else {
            return;
        };
        let Some(fd) = e.sock.as_ref().map(|s| Fd(s.as_raw_fd())) else {
            return;
        };
        let mut got = 0u64;
        let mut budget = READ_BUDGET;
        while budget > 0 {
            let Some(n) = recv_some(&mut self.batch, &fd, budget) else {
                break;
            };
            // The receive time (latency, ICE RTT) of each datagram is its
            // kernel receive time, mapped onto `Instant` (CLOCK_MONOTONIC)
            // through one pair of clock reads taken after the batch.
            let clock = RxClock::sample();
            // `n` counts messages, against the read budget; with GRO one
            // message may be several datagrams.
            // Relayed or not is asked once per batch, not per datagram.
            if e.relay.is_some() {
                for d in self.batch.iter() {
                    got += 1;
                    e.feed_relayed(&d, clock.at(d.kernel_rx), idx, &mut self.out);
                }
            } else {
                for d in self.batch.iter() {
                    got += 1;
                    e.feed(&d, clock.at(d.kernel_rx), idx, &mut self.out);
                }
            }
            // One drain per batch, not per datagram.
            e.drain(idx, &mut self.out);
            // Fewer than asked for: the socket is empty (level-triggered
            // epoll reports whatever arrives later), no need to ask again.
            if n < budget {
                break;
            }
            budget -= n;
        }
        self.out.stats.rx_datagrams.fetch_add(got, Relaxed);
    }

    /// Read the shared socket: each datagram goes to the participant at the
    /// address it was sent to (others are dropped), each participant fed
    /// gets one drain per batch, and what the drains send goes out
    /// together.
    fn read_shared(&mut self) {
        let Some(fd) = self.out.shared.as_ref().map(|s| Fd(s.as_raw_fd())) else {
            return;
        };
        let mut got = 0u64;
        let mut budget = SHARED_READ_BUDGET;
        while budget > 0 {
            let max = budget.min(udp::BATCH);
            let Some(n) = recv_some(&mut self.batch, &fd, max) else {
                break;
            };
            let clock = RxClock::sample();
            for d in self.batch.iter() {
                got += 1;
                let Some(&idx) = d.dest.and_then(|ip| self.by_ip.get(&ip)) else {
                    continue;
                };
                let Some(Some(e)) = self.entries.get_mut(idx) else {
                    continue;
                };
                if e.feed(&d, clock.at(d.kernel_rx), idx, &mut self.out) {
                    self.touched.push(idx);
                }
            }
            for idx in self.touched.drain(..) {
                if let Some(Some(e)) = self.entries.get_mut(idx) {
                    e.drain(idx, &mut self.out);
                }
            }
            self.out.send_shared();
            if n < max {
                break;
            }
            budget -= n;
        }
        self.out.stats.rx_datagrams.fetch_add(got, Relaxed);
    }

    /// Process queued commands; false on shutdown.
    fn commands(&mut self) -> bool {
        if self.inbox.is_empty() {
            self.rx.take(&mut self.inbox);
        }
        for _ in 0..10_000 {
            let Some(cmd) = self.inbox.pop_front() else {
                // Nobody left to send a command, or to stop the thread.
                return Arc::strong_count(&self.rx) > 1;
            };
            match cmd {
                Command::Shutdown => return false,
                Command::Add {
                    id,
                    participant,
                    socket,
                } => self.add(id, participant, socket, None),
                Command::AddRelayed {
                    id,
                    participant,
                    socket,
                    relay,
                } => self.add(id, participant, Some(socket), Some(relay)),
                Command::Remove(id) => {
                    if let Some(idx) = self.by_id.remove(&id) {
                        if let Some(mut e) = self.entries.get_mut(idx).and_then(Option::take) {
                            // A relay is given back (best effort).
                            if let (Some(r), Some(s)) = (&mut e.relay, &e.sock) {
                                if let Some(m) = r.release() {
                                    let _ = s.send_to(&m, r.server);
                                }
                            }
                            match &e.sock {
                                Some(s) => self.epoll.del(s.as_raw_fd()),
                                None => {
                                    if let Some(ip) = e.shared_ip {
                                        self.by_ip.remove(&ip);
                                    }
                                }
                            }
                            e.p.close();
                            e.p.publish();
                            self.free.push(idx);
                            self.out.stats.participants.fetch_sub(1, Relaxed);
                        }
                    }
                }
                Command::Event(id, text) => self.with(id, |e, _| e.p.send_event(&text)),
                Command::Raw(id, bytes) => {
                    let e = self.by_id.get(&id).and_then(|&i| self.entries.get_mut(i));
                    if let Some(Some(e)) = e
                        && let Some(dest) = e.p.remote_addr()
                    {
                        match (&e.sock, &self.out.shared) {
                            (Some(s), _) => {
                                let _ = match &mut e.relay {
                                    Some(r) => {
                                        let server = r.server;
                                        s.send_to(r.wrap(dest, &bytes), server)
                                    }
                                    None => s.send_to(&bytes, dest),
                                };
                            }
                            (None, Some(s)) => {
                                let mut res = SendResult::default();
                                self.out
                                    .tx
                                    .push_from(s, e.shared_ip, dest, &bytes, &mut res);
                                self.out.send_shared();
                            }
                            (None, None) => {}
                        }
                    }
                }
                Command::Speaking(id, on) => self.with(id, |e, _| e.p.set_speaking(on)),
                Command::Dtx(id, on) => self.with(id, |e, _| e.p.set_dtx(on)),
                Command::Keyframe(id) => self.with(id, |e, _| e.p.force_keyframe()),
                Command::Publish(id, done) => {
                    if let Some(Some(e)) = self.by_id.get(&id).and_then(|&i| self.entries.get(i)) {
                        e.p.publish();
                        let _ = done.try_send(());
                    }
                }
                Command::PublishAll(done) => {
                    for e in self.entries.iter().flatten() {
                        e.p.publish();
                    }
                    let _ = done.try_send(());
                }
                Command::Offer(id, sdp, reply) => self.with(id, |e, _| {
                    let _ = reply.try_send(e.p.accept_offer(&sdp));
                }),
                Command::RestartIce(id, reply) => self.with(id, |e, _| {
                    let _ = reply.try_send(e.p.restart_ice());
                }),
                Command::Answer(id, sdp, reply) => self.with(id, |e, _| {
                    let _ = reply.try_send(e.p.accept_answer(&sdp));
                }),
                Command::Rebind(id, sock, reply) => {
                    let _ = reply.try_send(self.rebind(id, sock));
                }
            }
        }
        true
    }

    fn with(&mut self, id: u64, f: impl FnOnce(&mut Entry, Instant)) {
        let Some(&idx) = self.by_id.get(&id) else {
            return;
        };
        let Some(Some(e)) = self.entries.get_mut(idx) else {
            return;
        };
        let now = e.fed(Instant::now());
        f(e, now);
        // Run it now so the effect is immediate.
        e.p.handle_timeout(now, &mut *self.out.obs);
        flush(e, now, idx, &mut self.out);
        self.out.send_shared();
    }

    /// [`Command::Rebind`]: the entry's own socket replaced by `sock`.
    fn rebind(&mut self, id: u64, sock: UdpSocket) -> bool {
        let Some(&idx) = self.by_id.get(&id) else {
            return false;
        };
        let Some(Some(e)) = self.entries.get_mut(idx) else {
            return false;
        };
        let Some(old) = &e.sock else {
            return false;
        };
        if sock.set_nonblocking(true).is_err() {
            return false;
        }
        let _ = udp::enable_rx_timestamps(&sock);
        if self.gro {
            let _ = udp::enable_gro(&sock);
        }
        if self.epoll.add(sock.as_raw_fd(), idx as u64).is_err() {
            return false;
        }
        self.epoll.del(old.as_raw_fd());
        let now = Instant::now();
        if let Ok(to) = sock.local_addr() {
            e.p.moved(now, to);
        }
        // Check the path from the new address at once: the server moves
        // the media there at the first nominating check it hears from it.
        if let Some((dest, check)) = e.p.nominating_check() {
            let sent = match &mut e.relay {
                Some(r) => {
                    let server = r.server;
                    sock.send_to(r.wrap(dest, &check), server)
                }
                None => sock.send_to(&check, dest),
            };
            if sent.is_ok() {
                self.out.stats.tx_datagrams.fetch_add(1, Relaxed);
            }
        }
        e.sock = Some(sock);
        true
    }

    fn add(
        &mut self,
        id: u64,
        mut p: Box<Participant>,
        sock: Option<UdpSocket>,
        relay: Option<Box<Relay>>,
    ) {
        if relay.is_some() && sock.is_none() {
            p.fail("driver: a relayed participant needs the socket its relay was allocated from");
            return;
        }
        let shared_ip = match &sock {
            Some(sock) => {
                if let Err(e) = sock.set_nonblocking(true) {
                    p.fail(format!("driver: set_nonblocking: {e}"));
                    return;
                }
                // Without kernel receive times datagrams get the time they
                // are read.
                let _ = udp::enable_rx_timestamps(sock);
                if self.gro && udp::enable_gro(sock).is_err() {
                    // This kernel has no UDP GRO: the batch's large buffers
                    // only ever hold one datagram each.
                    self.gro = false;
                }
                None
            }
            None => {
                // On the shared socket: at its port, at an address no one
                // else here has.
                let local = p.local_addr();
                let port = self.out.shared.as_ref().and_then(|s| s.local_addr().ok());
                if port.map(|a| a.port()) != Some(local.port()) {
                    p.fail(format!("driver: no shared socket at {local}"));
                    return;
                }
                if self.by_ip.contains_key(&local.ip()) {
                    p.fail(format!("driver: {local} is taken"));
                    return;
                }
                Some(local.ip())
            }
        };
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(None);
                self.entries.len() - 1
            }
        };
        match (&sock, shared_ip) {
            (Some(s), _) => {
                if let Err(e) = self.epoll.add(s.as_raw_fd(), idx as u64) {
                    self.free.push(idx);
                    p.fail(format!("driver: epoll: {e}"));
                    return;
                }
            }
            (None, Some(ip)) => {
                self.by_ip.insert(ip, idx);
            }
            (None, None) => {
                // Not reached: a participant without a socket has an address.
                self.free.push(idx);
                p.fail("driver: no socket");
                return;
            }
        }
        self.by_id.insert(id, idx);
        let shaper = p.config().downlink_limit_bps.map(Shaper::new);
        self.entries[idx] = Some(Entry {
            id,
            p,
            sock,
            shared_ip,
            undrained: None,
            held: 0,
            scheduled: None,
            shaper,
            fed: None,
            relay,
        });
        self.out.stats.participants.fetch_add(1, Relaxed);
        let now = Instant::now();
        if let Some(Some(e)) = self.entries.get_mut(idx) {
            let _ = e.id;
            let now = e.fed(now);
            e.p.handle_timeout(now, &mut *self.out.obs);
            flush(e, now, idx, &mut self.out);
        }
        self.out.send_shared();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::participant::ParticipantConfig;
    use crate::stats::NoObserver;

    /// A participant the driver cannot take says why in its snapshot.
    #[test]
    fn a_participant_without_a_socket_the_driver_has_fails_visibly() {
        let local: SocketAddr = "127.1.0.9:9".parse().unwrap();
        let (p, _offer) =
            Participant::new(ParticipantConfig::new("x"), local, Instant::now()).unwrap();
        let shared = p.shared();
        // No shared socket on this driver.
        let driver = Driver::spawn("t", Box::new(NoObserver), None).unwrap();
        assert!(!driver.has_shared() && driver.shared_local().is_none());
        assert!(driver.send(Command::Add {
            id: 1,
            participant: Box::new(p),
            socket: None,
        }));
        let deadline = Instant::now() + Duration::from_secs(5);
        let failed = loop {
            let f = shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .failed
                .clone();
            if f.is_some() || Instant::now() > deadline {
                break f;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            failed.as_deref(),
            Some("driver: no shared socket at 127.1.0.9:9")
        );
        assert_eq!(driver.stats().participants.load(Relaxed), 0);
    }

    /// Addresses on the shared socket are its port's and never repeat.
    #[test]
    fn shared_addresses_are_distinct_and_skip_network_and_broadcast() {
        let driver = Driver::spawn_shared("t", Box::new(NoObserver), None).unwrap();
        let addrs: Vec<SocketAddr> = (0..600).map_while(|_| driver.shared_local()).collect();
        assert_eq!(addrs.len(), 600);
        let unique: std::collections::HashSet<_> = addrs.iter().collect();
        assert_eq!(unique.len(), 600);
        for a in &addrs {
            let std::net::IpAddr::V4(ip) = a.ip() else {
                panic!("{a}");
            };
            let [x, y, _, last] = ip.octets();
            assert_eq!((x, y), (127, 1));
            assert!(last != 0 && last != 255, "{a}");
        }
        assert!(addrs.iter().all(|a| a.port() == addrs[0].port()));
    }
}
