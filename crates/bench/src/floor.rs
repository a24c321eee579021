//! `corelay-bench floor`: this host's cost floor for forwarding, the work
//! any SFU must do per packet and nothing else.
//!
//! One thread (the "floor", pinned where the server's shard would be) reads
//! SRTP packets with `recvmmsg` in batches, decrypts each (AES-128-GCM, the
//! profile corelay negotiates), and for each of `fanout` subscribers copies
//! it, rewrites the header, encrypts it with that subscriber's key and queues
//! it for `sendmmsg` in batches; no WebRTC logic, and no allocation per
//! packet (the buffers are allocated once; each `recvmmsg` or `sendmmsg`
//! builds its small header arrays, per batch: keeping them between calls
//! measured 6.30 against 5.80 µs per forwarded packet, 8 of 9 alternating
//! pairs higher, so they were not kept). A second
//! thread paces the input at `rate` packets per second in bursts of `burst`
//! (the scenario's datagrams per server wake-up, so the floor's batches are
//! the server's), round-robin over `subscribers` publishers (each packet's
//! SSRC), and reads what the floor sends under epoll, as the load client's
//! driver thread does: one socket bound to every address, each participant
//! an address of its own in 127.1.0.0/16 on it. Publisher `p`'s copies go
//! to the `fanout` participants after it, so loopback delivery (the sender
//! pays it) is paid as for the scenario's subscribers, one destination
//! each. The floor thread's CPU time over
//! the measurement divided by the packets it sent is
//! `floor_us_per_forwarded_packet`, the figure `floor_ratio` divides the
//! server's by.
//!
//! The second thread is the load client's floor in the same run: it does
//! what any client must (encrypt and send its media, read with `recvmmsg`
//! and authenticate every copy it receives), in the scenario's proportions
//! (fan-out times as many received as sent). Its CPU time over the same
//! window divided by the copies it received is
//! `client_floor_us_per_received_packet`: what `client_to_server_ratio`
//! would be made of if the client did nothing else.
//!
//! Owns: its sockets, threads and keys. Touches nothing of corelay's.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use str0m::crypto::AeadAes128GcmCipher;

/// What to measure.
#[derive(Debug, Clone)]
pub struct FloorSpec {
    /// Output copies per input packet (room size − 1 for the rooms scenario).
    pub fanout: usize,
    /// RTP payload bytes per packet (before SRTP's 16-byte tag).
    pub payload: usize,
    /// Input packets per second.
    pub rate: u64,
    /// Largest recvmmsg/sendmmsg batch.
    pub batch: usize,
    /// Participants: publishers of the input and sockets of the output
    /// (at least `fanout + 1`).
    pub subscribers: usize,
    /// Input packets sent back to back (one `sendmmsg`), so that the floor
    /// reads batches of about the size the server read per wake-up in the
    /// scenario; the bursts are spaced evenly at `rate`.
    pub burst: usize,
    /// Measured time (after a 0.5 s warm-up).
    pub seconds: f64,
    /// CPU for the floor thread (the server's shard core).
    pub pin_floor: Option<usize>,
    /// CPU for the pacing/draining thread (the client's core).
    pub pin_load: Option<usize>,
}

const HEADER: usize = 12;
const TAG: usize = 16;
const WARMUP: Duration = Duration::from_millis(500);
/// Receive batches per wake-up at most, as in a shard.
const MAX_BATCHES_PER_WAKE: usize = 8;

fn cipher(key: u8, encrypt: bool) -> Box<dyn AeadAes128GcmCipher> {
    str0m::crypto::from_feature_flags()
        .srtp_provider
        .aead_aes_128_gcm()
        .create_cipher([key; 16], encrypt)
}

/// RFC 7714 §8.1: the IV is the salt XOR (ssrc, roc, seq).
fn iv(salt: &[u8; 12], header: &[u8]) -> [u8; 12] {
    let mut iv = *salt;
    if let (Some(ssrc), Some(seq)) = (header.get(8..12), header.get(2..4)) {
        for (i, b) in ssrc.iter().enumerate() {
            iv[2 + i] ^= b;
        }
        iv[10] ^= seq[0];
        iv[11] ^= seq[1];
    }
    iv
}

/// The input's RTP header for publisher `p`'s packet number `seq`.
fn input_header(p: u32, seq: u16) -> [u8; HEADER] {
    let [s0, s1] = seq.to_be_bytes();
    let [p0, p1, p2, p3] = p.to_be_bytes();
    [0x80, 96, s0, s1, 0, 0, 0, 1, p0, p1, p2, p3]
}

/// Runs the measurement; returns its figures as JSON.
pub fn run(spec: &FloorSpec) -> io::Result<Value> {
    let fanout = spec.fanout.max(1);
    let batch = spec.batch.clamp(1, 1024);
    let subscribers = spec.subscribers.clamp(fanout + 1, 4096);
    let burst = spec.burst.clamp(1, batch);
    let floor_sock = UdpSocket::bind("127.0.0.1:0")?;
    let input_sock = UdpSocket::bind("127.0.0.1:0")?;
    let floor_addr = floor_sock.local_addr()?;
    floor_sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    // The subscribers: one address each in the load client's range
    // (127.1.0.0/16), all on one socket, as its driver thread has them.
    let sink = UdpSocket::bind("0.0.0.0:0")?;
    sink.set_nonblocking(true)?;
    let port = sink.local_addr()?.port();
    let dests = (1..=subscribers as u32)
        .map(|k| {
            let ip = std::net::Ipv4Addr::from(corelay_client::driver::SHARED_BASE + k);
            sockaddr(std::net::SocketAddr::from((ip, port)))
        })
        .collect::<Vec<_>>();
    let total = Duration::from_secs_f64(spec.seconds.max(0.5)) + WARMUP;

    // The load: SRTP packets encrypted with the ingress key, paced,
    // round-robin over the publishers.
    let (rate, payload, pin_load) = (spec.rate.max(1), spec.payload.max(1), spec.pin_load);
    let load = std::thread::Builder::new()
        .name("floor-load".into())
        .spawn(move || -> io::Result<LoadFigures> {
            if let Some(cpu) = pin_load {
                corelay_thread::pin_to_cpu(cpu);
            }
            let epoll = corelay_client::driver::Epoll::new()?;
            epoll.add(sink.as_raw_fd(), SINK_TOKEN)?;
            // The next burst's time, with the precision epoll's milliseconds lack.
            let timer = Timer::new()?;
            epoll.add(timer.0, TIMER_TOKEN)?;
            let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
            let mut enc = cipher(1, true);
            let salt = [7u8; 12];
            let plain = vec![0x5au8; payload];
            let mut out = Batch::new(burst, HEADER + payload + TAG);
            let to = sockaddr(floor_addr);
            // Each copy is authenticated with its subscriber's key (the
            // floor's output `o` carries `o` in its SSRC's last byte).
            let mut decs: Vec<Box<dyn AeadAes128GcmCipher>> =
                (0..fanout).map(|o| cipher(2 + o as u8, false)).collect();
            let mut rx = Batch::new(64, 2048);
            let mut clear = vec![0u8; 2048];
            let n = subscribers as u64;
            let (mut sent, mut received, mut bad) = (0u64, 0u64, 0u64);
            // (CPU, received) when the window opens and when it closes.
            let mut window: [Option<(Duration, u64)>; 2] = [None, None];
            let start = Instant::now();
            let end = total + Duration::from_millis(200);
            while start.elapsed() < end {
                let now = start.elapsed();
                if window[0].is_none() && now >= WARMUP {
                    window[0] = Some((corelay_thread::thread_cpu(), received));
                }
                if window[1].is_none() && now >= total {
                    window[1] = Some((corelay_thread::thread_cpu(), received));
                }
                // Send the bursts the schedule says are due, then drain.
                let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
                while sent + burst as u64 <= due.max(burst as u64) && start.elapsed() < total {
                    for _ in 0..burst {
                        let header = input_header((sent % n) as u32, ((sent / n) & 0xffff) as u16);
                        let pkt = out.next_slot();
                        let (h, body) = pkt.split_at_mut(HEADER);
                        h.copy_from_slice(&header);
                        enc.encrypt(&iv(&salt, &header), &header, &plain, body)
                            .map_err(|e| io::Error::other(e.to_string()))?;
                        out.push(HEADER + payload + TAG, to);
                        sent += 1;
                    }
                    out.send(&input_sock)?;
                }
                // Sleep until the next burst is due or a copy arrives.
                let next = Duration::from_secs_f64((sent + burst as u64) as f64 / rate as f64);
                timer.set(next.saturating_sub(start.elapsed()));
                let ready = epoll.wait(&mut events, 5);
                for ev in events.iter().take(ready) {
                    if ev.u64 == TIMER_TOKEN {
                        timer.clear();
                        continue;
                    }
                    if ev.u64 != SINK_TOKEN {
                        continue;
                    }
                    // Read until the socket is empty, every copy
                    // authenticated.
                    loop {
                        let got = rx.recv(&sink, libc::MSG_DONTWAIT)?;
                        for i in 0..got {
                            let opened = rx.get(i).and_then(|pkt| {
                                let header = pkt.get(..HEADER)?;
                                let dec = decs.get_mut(usize::from(*header.get(11)?))?;
                                let iv = iv(&salt, header);
                                dec.decrypt(&iv, &[header], pkt.get(HEADER..)?, &mut clear)
                                    .ok()
                            });
                            match opened {
                                Some(_) => received += 1,
                                None => bad += 1,
                            }
                        }
                        if got < rx.capacity() {
                            break;
                        }
                    }
                }
            }
            let end_mark = window[1].unwrap_or((corelay_thread::thread_cpu(), received));
            let (cpu, copies) = match window[0] {
                Some((cpu0, r0)) => (end_mark.0.saturating_sub(cpu0), end_mark.1 - r0),
                None => (Duration::ZERO, 0),
            };
            Ok(LoadFigures {
                sent,
                received,
                bad,
                cpu,
                copies,
            })
        })?;

    if let Some(cpu) = spec.pin_floor {
        corelay_thread::pin_to_cpu(cpu);
    }
    let mut dec = cipher(1, false);
    let mut encs: Vec<Box<dyn AeadAes128GcmCipher>> =
        (0..fanout).map(|i| cipher(2 + i as u8, true)).collect();
    let salt = [7u8; 12];
    let size = HEADER + payload + TAG;
    let mut rx = Batch::new(batch, 2048);
    let mut tx = Batch::new(batch, size);
    let mut plain = vec![0u8; 2048];
    let (mut inputs, mut outputs, mut bad, mut recv_calls, mut send_calls, mut wakes) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let mut measured: Option<(Duration, u64, u64, u64, u64, u64)> = None;
    while start.elapsed() < total {
        if measured.is_none() && start.elapsed() >= WARMUP {
            measured = Some((
                corelay_thread::thread_cpu(),
                outputs,
                inputs,
                recv_calls,
                send_calls,
                wakes,
            ));
        }
        // As a shard does: a wake-up reads batches until the socket is
        // empty (at most 8), each forwarded and flushed before the next.
        wakes += 1;
        for k in 0..MAX_BATCHES_PER_WAKE {
            let flags = if k == 0 {
                libc::MSG_WAITFORONE
            } else {
                libc::MSG_DONTWAIT
            };
            let n = rx.recv(&floor_sock, flags)?;
            recv_calls += 1;
            if n == 0 {
                break;
            }
            for i in 0..n {
                let Some(pkt) = rx.get(i) else { continue };
                let (Some(header), Some(body)) = (pkt.get(..HEADER), pkt.get(HEADER..)) else {
                    bad += 1;
                    continue;
                };
                let Ok(len) = dec.decrypt(&iv(&salt, header), &[header], body, &mut plain) else {
                    bad += 1;
                    continue;
                };
                inputs += 1;
                let publisher = header
                    .get(8..12)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, |b| u32::from_be_bytes(b) as usize);
                let clear = plain.get(..len).unwrap_or_default();
                for (o, enc) in encs.iter_mut().enumerate() {
                    let Some(&to) = dests.get((publisher + 1 + o) % dests.len()) else {
                        bad += 1;
                        continue;
                    };
                    let out = tx.next_slot();
                    let (h, b) = out.split_at_mut(HEADER);
                    h.copy_from_slice(header);
                    // A subscriber's own SSRC, as the server's rewriter does.
                    h[11] = o as u8;
                    let iv = iv(&salt, h);
                    let Some(sealed) = b.get_mut(..len + TAG) else {
                        bad += 1;
                        continue;
                    };
                    if enc.encrypt(&iv, h, clear, sealed).is_err() {
                        bad += 1;
                    }
                    tx.push(HEADER + len + TAG, to);
                    if tx.full() {
                        outputs += tx.send(&floor_sock)? as u64;
                        send_calls += 1;
                    }
                }
            }
            if !tx.is_empty() {
                outputs += tx.send(&floor_sock)? as u64;
                send_calls += 1;
            }
        }
    }
    let cpu_end = corelay_thread::thread_cpu();
    let client = load
        .join()
        .map_err(|_| io::Error::other("the load thread panicked"))??;
    let (cpu0, out0, in0, rc0, sc0, w0) = measured.unwrap_or_default();
    let cpu = cpu_end.saturating_sub(cpu0).as_secs_f64();
    let out = outputs - out0;
    let inp = inputs - in0;
    let secs = (total - WARMUP).as_secs_f64();
    Ok(json!({
        "floor_us_per_forwarded_packet": if out > 0 { cpu * 1e6 / out as f64 } else { 0.0 },
        "floor_cores": cpu / secs,
        "forwarded_pps": out as f64 / secs,
        "input_pps": inp as f64 / secs,
        "fanout": fanout,
        "subscribers": subscribers,
        "payload_bytes": payload,
        "batch": batch,
        "burst": burst,
        "mean_recv_batch": if recv_calls > rc0 { inp as f64 / (recv_calls - rc0) as f64 } else { 0.0 },
        "mean_per_wake": if wakes > w0 { inp as f64 / (wakes - w0) as f64 } else { 0.0 },
        "mean_send_batch": if send_calls > sc0 { out as f64 / (send_calls - sc0) as f64 } else { 0.0 },
        "load_sent": client.sent,
        "load_drained": client.received,
        "bad": bad,
        "client_floor_us_per_received_packet": if client.copies > 0 {
            client.cpu.as_secs_f64() * 1e6 / client.copies as f64
        } else {
            0.0
        },
        "client_floor_cores": client.cpu.as_secs_f64() / secs,
        "client_floor_bad": client.bad,
    }))
}

/// What the load thread (the client's floor) did.
struct LoadFigures {
    /// Input packets sent.
    sent: u64,
    /// Copies received and authenticated.
    received: u64,
    /// Copies that failed to authenticate or were cut short.
    bad: u64,
    /// Its CPU time over the measured window.
    cpu: Duration,
    /// Copies received in that window.
    copies: u64,
}

/// The load thread's epoll token of its timer.
const TIMER_TOKEN: u64 = u64::MAX;
/// The load thread's epoll token of the subscribers' socket.
const SINK_TOKEN: u64 = 0;

/// A one-shot `timerfd` (monotonic clock), closed on drop.
struct Timer(i32);

impl Timer {
    fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Timer(fd))
    }

    /// Readable after `d` (at least 1 ns: zero would disarm it).
    fn set(&self, d: Duration) {
        let d = d.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the fd is ours.
        unsafe { libc::timerfd_settime(self.0, 0, &spec, std::ptr::null_mut()) };
    }

    /// Consume an expiry (level-triggered epoll reports it until read).
    fn clear(&self) {
        let mut count = [0u8; 8];
        // SAFETY: an 8-byte buffer, as timerfd reads need; the fd is ours.
        unsafe { libc::read(self.0, count.as_mut_ptr().cast(), count.len()) };
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

/// An IPv4 socket address as `sendmmsg` takes it (the floor binds 127.0.0.1).
fn sockaddr(a: std::net::SocketAddr) -> libc::sockaddr_in {
    let ip = match a {
        std::net::SocketAddr::V4(v4) => *v4.ip(),
        std::net::SocketAddr::V6(_) => std::net::Ipv4Addr::LOCALHOST,
    };
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// A recvmmsg/sendmmsg batch: `n` buffers of `size` bytes, kept between
/// calls, each sent to its own address.
struct Batch {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    to: Vec<libc::sockaddr_in>,
    used: usize,
}

impl Batch {
    fn new(n: usize, size: usize) -> Self {
        Batch {
            bufs: (0..n).map(|_| vec![0u8; size]).collect(),
            lens: vec![0; n],
            to: vec![sockaddr(std::net::SocketAddr::from(([127, 0, 0, 1], 0))); n],
            used: 0,
        }
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        self.bufs.get(i)?.get(..*self.lens.get(i)?)
    }

    fn next_slot(&mut self) -> &mut [u8] {
        &mut self.bufs[self.used]
    }

    fn push(&mut self, len: usize, to: libc::sockaddr_in) {
        self.lens[self.used] = len;
        self.to[self.used] = to;
        self.used += 1;
    }

    fn capacity(&self) -> usize {
        self.bufs.len()
    }

    fn full(&self) -> bool {
        self.used == self.bufs.len()
    }

    fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// One recvmmsg with `flags` (`MSG_WAITFORONE`: block up to the
    /// socket's read timeout; `MSG_DONTWAIT`: not at all); the count.
    fn recv(&mut self, sock: &UdpSocket, flags: i32) -> io::Result<usize> {
        let mut iov: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all-zero is a valid value.
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; iov.len()];
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: msgs and their iovecs point into self.bufs, alive and
        // unaliased for the call; vlen is msgs.len().
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for (len, m) in self.lens.iter_mut().zip(&msgs).take(n) {
            *len = m.msg_len as usize;
        }
        Ok(n)
    }

    /// One sendmmsg of the queued buffers, each to its address; the count sent.
    fn send(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let used = self.used;
        let mut iov: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .zip(&self.lens)
            .take(used)
            .map(|(b, &len)| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: len,
            })
            .collect();
        // SAFETY: as in recv.
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; used];
        for ((m, v), to) in msgs.iter_mut().zip(iov.iter_mut()).zip(self.to.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (to as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        self.used = 0;
        // SAFETY: msgs point into self.bufs and self.to, alive for the call.
        let n =
            unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), used as libc::c_uint, 0) };
        if n < 0 {
            // A full socket buffer drops the batch, as a server would.
            return Ok(0);
        }
        Ok(n as usize)
    }
}
