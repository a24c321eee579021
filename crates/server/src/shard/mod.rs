//! A shard: one pinned OS thread, one single-threaded tokio runtime, one UDP
//! socket on its own port, or on the port every shard shares
//! (`--port-layout shared`: the engine hands over what belongs to another
//! shard), an ICE-TCP listener on its own port number (see [`tcp`]), one
//! [`Engine`].
//!
//! The loop waits on socket readiness, the control thread's commands, the
//! peer-shard wake-up, the engine's next timer, and ICE-TCP (new connections,
//! frames). A datagram is read (in a batch), handled by the engine
//! synchronously down to the encrypted datagrams for its subscribers, and
//! those are sent (in a batch) before the loop waits again. No await, channel
//! or task switch in between.
//!
//! The one exception is ICE-TCP, the fallback for clients that cannot use
//! UDP: a connection's frames reach the loop through a bounded channel from
//! a reader task on this same thread (no other thread, no lock). TCP's own
//! costs (head-of-line blocking, acks) dwarf that hop; the answers go out
//! from the loop directly.
//!
//! Faults: a panic while handling one participant costs that participant
//! (the engine isolates it). Anything else that stops the thread (a panic
//! outside any participant, a socket error) is reported to the control
//! thread as [`ToControl::Failed`], once, before the thread ends.
//!
//! The shards together are a [`DataPlane`] ([`Shards`]); the interface the
//! control thread drives them through ([`ShardCommand`], [`ToControl`], …),
//! the command dispatch ([`apply`]) and the send step are `corelay-plane`'s,
//! shared with the work-stealing baseline (`corelay-ws`), which uses nothing
//! of this module.
//!
//! Must not: block, lock, or share mutable state with another shard. It
//! talks to peers through the [`mesh::Mesh`] (values only) and to the control
//! thread through channels.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]

pub mod mesh;
pub mod relay;
pub mod steer;
pub mod tcp;

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelay_core::faults::Faults;
use corelay_core::metrics::LatencyHistogram;
use corelay_core::{ControlOutbox, Engine, Lane, RtcSettings, ShardId};
use corelay_plane::{
    Applied, DataPlane, IoCounters, ShardCommand, ShardHandle, ShardReport, ToControl, apply,
    fail_if_injected, micros, record_dwell, send_datagrams,
};
use str0m::net::Protocol;
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot};

use self::mesh::Mesh;
use self::relay::Relay;
use self::tcp::{Frame, TcpConns};
use corelay_udp::{self as udp, RecvBatch, SendBatch};

/// Batches read per wake-up before the loop looks at timers and commands again.
const MAX_BATCHES_PER_WAKE: usize = 8;
/// Datagrams read per wake-up: a GRO message counts as the datagrams it
/// carries (up to 64), so that runs cannot stretch a wake-up 64 times over
/// (one batch may still overshoot by what its last messages carried).
const MAX_DATAGRAMS_PER_WAKE: usize = MAX_BATCHES_PER_WAKE * udp::BATCH;
/// ICE-TCP frames handled per wake-up.
const MAX_TCP_FRAMES_PER_WAKE: usize = 256;
/// Peer messages handled per wake-up.
const PEER_BUDGET: usize = 4096;
/// How often a shard reports its figures to the control thread.
const REPORT_INTERVAL: Duration = Duration::from_millis(250);

pub struct ShardSpec {
    pub index: ShardId,
    pub socket: UdpSocket,
    /// The ICE-TCP listener on the same port, unless `--no-ice-tcp`.
    pub tcp: Option<std::net::TcpListener>,
    /// ICE-TCP connections this shard takes ([`tcp::conns_per_shard`]),
    /// per client address, and for how long before they authenticate.
    pub tcp_limits: tcp::TcpLimits,
    pub advertised: SocketAddr,
    /// Its ICE-TCP candidate's address (`advertised` but with a shared UDP
    /// port: ICE-TCP keeps a port per shard).
    pub advertised_tcp: SocketAddr,
    /// Where every datagram is sent from (a socket bound to a wildcard
    /// address): the advertised address, when it is this host's.
    pub source: Option<IpAddr>,
    pub settings: RtcSettings,
    pub mesh: Arc<Mesh>,
    pub to_control: mpsc::UnboundedSender<ToControl>,
    pub core: Option<usize>,
    /// Record socket dwell and forwarding latency per packet.
    pub packet_metrics: bool,
    /// Send runs of datagrams with UDP GSO and read them with GRO, where
    /// the kernel supports it.
    pub offload: bool,
    /// With `--cluster`: the shard's relay socket and what its keys derive
    /// from ([`relay`]).
    pub relay: Option<RelaySpec>,
    /// With the shared port's eBPF steering: this shard's writer of the
    /// flow map ([`steer`]).
    pub flows: Option<steer::FlowWriter>,
}

/// A shard's relay, before its loop starts.
pub struct RelaySpec {
    pub socket: UdpSocket,
    pub secret: Arc<corelay_cluster::relay::ClusterSecret>,
    pub node_id: String,
    pub epoch: u64,
}

/// Binds shard `index`'s socket: its own port, large buffers, receive
/// timestamps (unless `timestamps` is false).
pub fn bind(addr: SocketAddr, timestamps: bool) -> io::Result<UdpSocket> {
    bind_with(addr, timestamps, false)
}

/// [`bind`], sharing the port with the other shards' sockets
/// (`SO_REUSEPORT`) when `shared`.
pub fn bind_with(addr: SocketAddr, timestamps: bool, shared: bool) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if shared {
        s.set_reuse_port(true)?;
    }
    // Best effort: the kernel caps these at net.core.{r,w}mem_max.
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    let s: UdpSocket = s.into();
    if timestamps {
        udp::enable_rx_timestamps(&s)?;
    }
    Ok(s)
}

/// The pinned shards as a [`DataPlane`]: one thread per [`ShardSpec`], in
/// shard order.
pub struct Shards {
    handles: Vec<ShardHandle>,
    joins: Vec<std::thread::JoinHandle<()>>,
}

impl DataPlane for Shards {
    type Spec = Vec<ShardSpec>;

    fn start(specs: Vec<ShardSpec>) -> io::Result<Self> {
        let mut shards = Shards {
            handles: Vec::with_capacity(specs.len()),
            joins: Vec::with_capacity(specs.len()),
        };
        for spec in specs {
            let (handle, join) = spawn(spec)?;
            shards.handles.push(handle);
            shards.joins.push(join);
        }
        Ok(shards)
    }

    fn handles(&self) -> Vec<ShardHandle> {
        self.handles.clone()
    }

    fn cores_per_shard(&self) -> usize {
        1
    }

    /// Waits for every shard thread when they all closed in time; else
    /// leaves them to the process's exit.
    fn finish(self, clean: bool) {
        if clean {
            for j in self.joins {
                let _ = j.join();
            }
        }
    }
}

/// Starts the shard thread; returns the control thread's handle on it.
fn spawn(spec: ShardSpec) -> io::Result<(ShardHandle, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = ShardHandle {
        index: spec.index,
        advertised: spec.advertised,
        advertised_tcp: spec.advertised_tcp,
        commands: tx,
    };
    let join = std::thread::Builder::new()
        .name(format!("shard-{}", spec.index))
        .spawn(move || {
            let (index, to_control) = (spec.index, spec.to_control.clone());
            if let Some(core) = spec.core {
                pin_to_core(core);
            }
            // Under a real-time policy the data plane goes before the
            // control thread and the rest of the process.
            corelay_thread::rise_above_siblings();
            let outcome = corelay_core::guard::isolate(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|rt| rt.block_on(run(spec, rx)))
            });
            let reason = match outcome {
                Ok(Ok(())) => return,
                Ok(Err(e)) => format!("stopped: {e}"),
                Err(caught) => format!("panicked: {caught}"),
            };
            let _ = to_control.send(ToControl::Failed {
                shard: index,
                reason,
            });
        })?;
    Ok((handle, join))
}

fn pin_to_core(core: usize) {
    if !corelay_thread::pin_to_cpu(core) {
        tracing::warn!(core, "could not pin shard thread to its core");
    }
}

struct ShardLoop {
    index: ShardId,
    engine: Engine,
    tcp: TcpConns,
    advertised: SocketAddr,
    advertised_tcp: SocketAddr,
    recv: RecvBatch,
    send: SendBatch,
    mesh: Arc<Mesh>,
    /// Control messages the mesh's control lane could not take yet.
    outbox: ControlOutbox,
    /// What the I/O layer counts (sends, the mesh's drops).
    io: IoCounters,
    /// The peer [`Mesh::drain`] starts at, one further each time.
    drain_start: usize,
    to_control: mpsc::UnboundedSender<ToControl>,
    touched_peers: Vec<bool>,
    /// Thread CPU time at the last report.
    busy: Duration,
    iterations: u64,
    last_report: Instant,
    reports: u64,
    dwell: LatencyHistogram,
    forward_local: LatencyHistogram,
    forward_cross: LatencyHistogram,
    iteration: LatencyHistogram,
    /// The tests' faults ([`Faults`]; empty but in a `fault-injection` build).
    faults: Faults,
    packet_metrics: bool,
    /// Other nodes' shards (`--cluster`).
    relay: Option<Relay>,
    /// The steering's flow map (a shared port), written on the engine's
    /// `Outputs::flows`.
    flows: Option<steer::FlowWriter>,
}

/// The loop's sockets, apart from its state: what it waits on stays
/// borrowed while a branch changes the state.
struct Sockets {
    udp: tokio::net::UdpSocket,
    relay: Option<tokio::net::UdpSocket>,
}

/// Readiness of the relay socket; never, without one.
async fn relay_readable(socket: Option<&tokio::net::UdpSocket>) -> io::Result<()> {
    match socket {
        Some(s) => s.readable().await,
        None => std::future::pending().await,
    }
}

async fn run(
    spec: ShardSpec,
    mut commands: mpsc::UnboundedReceiver<ShardCommand>,
) -> io::Result<()> {
    let peers = spec.mesh.clone();
    let mut send = SendBatch::new();
    send.set_gso(spec.offload && udp::gso_supported(&spec.socket));
    send.set_source(spec.source);
    let recv = RecvBatch::for_socket(&spec.socket, spec.offload);
    let (tcp_conns, mut tcp_frames) = TcpConns::new(spec.tcp_limits);
    let faults = spec.settings.faults.clone();
    let (relay, relay_socket) = match spec.relay {
        None => (None, None),
        Some(r) => {
            let socket = tokio::net::UdpSocket::from_std(r.socket)?;
            let relay = Relay::new(r.secret, &r.node_id, spec.index.0, r.epoch);
            (Some(relay), Some(socket))
        }
    };
    let mut d = ShardLoop {
        tcp: tcp_conns,
        index: spec.index,
        engine: Engine::new(spec.index, spec.settings),
        advertised: spec.advertised,
        advertised_tcp: spec.advertised_tcp,
        recv,
        send,
        touched_peers: Vec::new(),
        mesh: spec.mesh,
        outbox: ControlOutbox::new(),
        io: IoCounters::default(),
        drain_start: 0,
        to_control: spec.to_control,
        busy: Duration::ZERO,
        iterations: 0,
        last_report: Instant::now(),
        reports: 0,
        dwell: LatencyHistogram::default(),
        forward_local: LatencyHistogram::default(),
        forward_cross: LatencyHistogram::default(),
        iteration: LatencyHistogram::default(),
        faults,
        packet_metrics: spec.packet_metrics,
        relay,
        flows: spec.flows,
    };
    let sockets = Sockets {
        udp: tokio::net::UdpSocket::from_std(spec.socket)?,
        relay: relay_socket,
    };
    let socket = &sockets.udp;
    let listener = spec
        .tcp
        .map(tokio::net::TcpListener::from_std)
        .transpose()?;
    let Some(wake) = peers.notified(d.index) else {
        return Err(io::Error::other("shard index outside the mesh"));
    };
    let mut shutdown: Option<oneshot::Sender<()>> = None;
    let mut socket_wakes: u64 = 0;
    // Set after a failed accept (out of descriptors): the listener rests.
    let mut accept_rest: Option<Instant> = None;
    while shutdown.is_none() {
        let next_report = d.last_report + REPORT_INTERVAL;
        let deadline = d
            .engine
            .poll_timeout()
            .map_or(next_report, |t| t.min(next_report));
        if accept_rest.is_some_and(|t| Instant::now() >= t) {
            accept_rest = None;
        }
        let deadline = accept_rest.map_or(deadline, |t| t.min(deadline));
        // A peer's full control lane: try again shortly (the flush after
        // the timer sends what the outbox holds first).
        let deadline = d
            .outbox
            .retry_in()
            .map_or(deadline, |r| deadline.min(Instant::now() + r));
        tokio::select! {
            biased;
            cmd = commands.recv() => {
                let start = Instant::now();
                let Some(cmd) = cmd else { break };
                shutdown = d.command(start, cmd);
                d.flush(&sockets);
                d.worked(start);
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let start = Instant::now();
                d.engine.handle_timeout(start);
                d.flush(&sockets);
                d.worked(start);
            }
            _ = wake.notified() => {
                let start = Instant::now();
                let engine = &mut d.engine;
                d.drain_start = d.drain_start.wrapping_add(1);
                d.mesh.drain(d.index, d.drain_start, PEER_BUDGET, |m| engine.handle_peer(start, m));
                d.flush(&sockets);
                d.worked(start);
            }
            ready = socket.readable() => {
                ready?;
                let start = Instant::now();
                let mut left = MAX_DATAGRAMS_PER_WAKE;
                for _ in 0..MAX_BATCHES_PER_WAKE {
                    if left == 0 {
                        break;
                    }
                    // try_io clears readiness on WouldBlock, so the next
                    // `readable()` waits for the kernel again.
                    match socket.try_io(Interest::READABLE, || d.recv.recv_max(socket, left)) {
                        Ok(_) => {
                            left = left.saturating_sub(d.recv.len());
                            let now = Instant::now();
                            if d.packet_metrics {
                                record_dwell(&d.recv, &mut d.dwell);
                            }
                            for dg in d.recv.iter() {
                                if let Some(pause) = d.faults.stall_after_datagram() {
                                    std::thread::sleep(pause);
                                }
                                d.engine.handle_datagram(now, dg.kernel_rx, dg.source, d.advertised, dg.data);
                            }
                            d.flush(&sockets);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            // ICMP errors surface here (e.g. a client went
                            // away); they concern one peer, not the socket.
                            tracing::debug!(shard = d.index.0, "recv: {e}");
                        }
                    }
                }
                if !d.tcp.is_empty() {
                    let frame = tcp_frames.try_recv().ok();
                    if frame.is_some() {
                        d.tcp_frames(start, frame, &mut tcp_frames);
                        d.flush(&sockets);
                    }
                }
                socket_wakes += 1;
                if let Some(l) = &listener
                    && accept_rest.is_none()
                    && socket_wakes.is_multiple_of(64)
                    && let Some(accepted) = tcp::try_accept(l)
                {
                    // Only reached while not resting: None stays None.
                    accept_rest = d.tcp_accepted(accepted);
                }
                d.worked(start);
            }
            // ICE-TCP after the UDP socket: polled only when UDP is idle;
            // under UDP load the socket branch takes frames and connections
            // in passing (see there), so neither starves.
            accepted = tcp::accept(listener.as_ref()), if accept_rest.is_none() => {
                // Only reached while not resting: None stays None.
                accept_rest = d.tcp_accepted(accepted);
            }
            ready = relay_readable(sockets.relay.as_ref()) => {
                ready?;
                let start = Instant::now();
                if let (Some(relay), Some(rs)) = (d.relay.as_mut(), sockets.relay.as_ref()) {
                    let engine = &mut d.engine;
                    relay.receive(rs, start, |m| engine.handle_peer(start, m));
                }
                d.flush(&sockets);
                d.worked(start);
            }
            frame = tcp_frames.recv() => {
                let start = Instant::now();
                d.tcp_frames(start, frame, &mut tcp_frames);
                d.flush(&sockets);
                d.worked(start);
            }
        }
        d.iterations += 1;
        if Instant::now() >= next_report {
            d.tcp.sweep(Instant::now());
            if let (Some(relay), Some(rs)) = (d.relay.as_mut(), sockets.relay.as_ref()) {
                relay.ping(rs, Instant::now());
            }
            d.report();
        }
    }
    d.report();
    if let Some(done) = shutdown {
        let _ = done.send(());
    }
    Ok(())
}

impl ShardLoop {
    /// Takes an accepted ICE-TCP connection; after a failed accept (out of
    /// descriptors), returns until when the listener rests.
    fn tcp_accepted(
        &mut self,
        accepted: io::Result<(tokio::net::TcpStream, SocketAddr)>,
    ) -> Option<Instant> {
        match accepted {
            Ok((stream, peer)) => {
                self.tcp.accept(stream, peer, Instant::now());
                None
            }
            Err(e) => {
                tracing::debug!(shard = self.index.0, "ICE-TCP accept: {e}");
                Some(Instant::now() + tcp::ACCEPT_BACKOFF)
            }
        }
    }

    /// Feeds ICE-TCP frames to the engine: `first`, then what else is
    /// queued, up to [`MAX_TCP_FRAMES_PER_WAKE`].
    fn tcp_frames(&mut self, now: Instant, first: Option<Frame>, rx: &mut mpsc::Receiver<Frame>) {
        let mut next = first;
        for _ in 0..MAX_TCP_FRAMES_PER_WAKE {
            match next {
                Some(Frame::Data(peer, packet)) => {
                    // Accepted: the engine took it for a known participant
                    // (a valid STUN check, DTLS or media).
                    if self
                        .engine
                        .handle_tcp_frame(now, peer, self.advertised_tcp, &packet)
                    {
                        self.tcp.accepted_frame(&peer, now);
                    }
                }
                Some(Frame::Closed(peer)) => self.tcp.closed(peer),
                None => break,
            }
            next = rx.try_recv().ok();
        }
    }

    fn worked(&mut self, start: Instant) {
        self.iteration.record_us(micros(start.elapsed()));
    }

    /// Applies a control-thread command ([`apply`]); after `Shutdown`, the
    /// sender to confirm on once the loop ended.
    fn command(&mut self, now: Instant, cmd: ShardCommand) -> Option<oneshot::Sender<()>> {
        fail_if_injected(&self.faults, &cmd);
        match apply(&mut self.engine, now, cmd) {
            Applied::Done => None,
            Applied::Relay(nodes) => {
                if let Some(relay) = &mut self.relay {
                    relay.set_nodes(&nodes);
                }
                None
            }
            Applied::Answer(answer) => {
                answer.send();
                None
            }
            Applied::Shutdown(done) => Some(done),
        }
    }

    /// Sends what the engine produced: datagrams in batches, peer messages
    /// with one wake-up per touched peer, events to the control thread.
    #[allow(
        clippy::result_large_err,
        reason = "a control message a full lane refuses comes back by value (Mesh::push)"
    )]
    fn flush(&mut self, sockets: &Sockets) {
        let socket = &sockets.udp;
        self.engine.finish_batch();
        let out = self.engine.outputs();
        // Before the datagrams go: the answer to a STUN request that proved
        // a new address leaves after the kernel knows where its flow goes.
        if !out.flows.is_empty() {
            match &mut self.flows {
                Some(w) => out.flows.drain(..).for_each(|(a, claim)| w.apply(a, claim)),
                None => out.flows.clear(),
            }
        }
        let mut dropped_tcp = 0;
        if !out.transmits.is_empty() && !self.tcp.is_empty() {
            self.tcp.flush_waiting();
            for t in out.transmits.iter().filter(|t| t.proto == Protocol::Tcp) {
                if !self.tcp.send(&t.destination, &t.contents) {
                    dropped_tcp += 1;
                }
            }
        }
        self.io.dropped_send += dropped_tcp;
        send_datagrams(
            &mut self.engine,
            &mut self.io,
            &mut self.send,
            socket,
            self.packet_metrics,
            &mut self.forward_local,
            &mut self.forward_cross,
        );
        let out = self.engine.outputs();
        let mut dropped = 0;
        let (mesh, from) = (&self.mesh, self.index);
        let mut woken = self.outbox.flush(|to, m| mesh.push(from, to, m));
        if !out.peers.is_empty() || woken != 0 {
            self.touched_peers.clear();
            self.touched_peers.resize(mesh.shards(), false);
            for (to, msg) in out.peers.drain(..) {
                if to.is_remote() {
                    // Another node's shard: over the relay, now.
                    if let (Some(relay), Some(rs)) = (self.relay.as_mut(), sockets.relay.as_ref()) {
                        relay.send(rs, to, &msg);
                    }
                    continue;
                }
                if msg.lane() == Lane::Control {
                    woken |= self.outbox.send(to, msg, |to, m| mesh.push(from, to, m));
                } else if mesh.push(from, to, msg).is_err() {
                    dropped += 1;
                } else if let Some(t) = self.touched_peers.get_mut(to.0) {
                    *t = true;
                } else {
                    mesh.wake(to);
                }
            }
            for (to, touched) in self.touched_peers.iter().enumerate() {
                if *touched || woken & (1 << to.min(63)) != 0 {
                    mesh.wake(ShardId(to));
                }
            }
        }
        for ev in out.control.drain(..) {
            let _ = self.to_control.send(ToControl::Event(ev));
        }
        self.io.cross_shard_dropped += dropped;
    }

    fn report(&mut self) {
        let now = Instant::now();
        let window = now.saturating_duration_since(self.last_report);
        // CPU time over wall time: time spent preempted by other processes
        // is not work (and must not make admission control refuse joins on
        // a shared machine).
        let cpu = corelay_thread::thread_cpu();
        let used = cpu.saturating_sub(self.busy);
        self.busy = cpu;
        let busy = if window.is_zero() {
            0.0
        } else {
            (used.as_secs_f64() / window.as_secs_f64()).min(1.0)
        };
        let report = ShardReport {
            shard: self.index,
            counters: {
                let c = self.io.add_to(*self.engine.counters());
                match &self.relay {
                    Some(r) => r.counters.add_to(c),
                    None => c,
                }
            },
            participants: self.engine.participant_count(),
            rooms: self.engine.room_count(),
            busy,
            loop_iterations: self.iterations,
            dwell: self.dwell,
            forward_local: self.forward_local,
            forward_cross: self.forward_cross,
            peer_hop: self.engine.peer_hop(),
            iteration: self.iteration,
            participants_detail: self
                .reports
                .is_multiple_of(4)
                .then(|| self.engine.participant_stats()),
            relay_links: self.relay.as_ref().map(Relay::links).unwrap_or_default(),
        };
        self.reports += 1;
        let _ = self.to_control.send(ToControl::Report(Box::new(report)));
        self.last_report = now;
    }
}
