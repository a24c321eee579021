//! The work-stealing baseline (`--runtime work-stealing`): the same SFU on
//! the design the reference article moved away from, so that a benchmark can
//! compare the two with one binary. It exists for that comparison only.
//!
//! One tokio multi-thread runtime with `--shards` worker threads (unpinned:
//! work stealing moves tasks between them, that is the point), and on it:
//! - a *participant task* per participant, owning a [`corelay_core::Engine`]
//!   that holds just that participant, under its own *virtual* shard id. The
//!   engine logic is the thread-per-core one, unchanged: members of a room
//!   live on "other shards" (the other tasks), so a publisher's media leaves
//!   its engine as one [`PeerMsg`] copy per subscriber task;
//! - the *hub*, which the control thread sees as one shard (`ShardId(0)`,
//!   the [`ShardHandle`] / [`ShardCommand`] / [`ToControl`] interface of
//!   `corelay-plane`): it spawns a task per `Add` with a fresh virtual id,
//!   rewrites every roster so that each member's `shard` is its virtual id
//!   (handing each task the channels of its room's members), routes
//!   `Remove`/`Renegotiate`/`Room` to the tasks, passes their events on, and
//!   sums their figures into one report. A task applies each command to its
//!   engine through the shards' own dispatch ([`corelay_plane::apply`]);
//! - the *reader*: one UDP socket for the whole runtime, batch-read with
//!   `recvmmsg`, each datagram copied into its participant task's channel
//!   (by source address once the task's engine answered from it, else by the
//!   STUN USERNAME's first part, our ufrag). Tasks send their own datagrams
//!   (one `sendmmsg` per step) on the shared socket.
//!
//! A forwarded packet thus takes two channel hops (reader → publisher task,
//! publisher task → subscriber task) where a shard takes none, and every hop
//! is a point where the scheduler may run something newer instead. Every
//! channel is bounded; media channels are lossy on full (counted in
//! `cross_shard_dropped`, as the shard mesh counts a full queue), control
//! channels wait (backpressure; no task ever waits on the hub or a
//! participant task, so that cannot deadlock). ICE-TCP is not offered in
//! this mode.
//!
//! `busy` in the report is the worker threads' CPU time over wall time
//! times the worker count: a work-stealing pool has no per-core figure.
//!
//! The server starts it as a [`DataPlane`] ([`WorkStealing`]) in place of
//! its pinned shards, so that the one `corelay` binary has both.
//!
//! Must not: depend on the server crate or its shards (what it shares with
//! the shard loop is `corelay-plane`'s: the interface types, the command
//! dispatch, the send step, `record_dwell`, `fail_if_injected`), touch the
//! engine's logic, or trust a datagram: nothing here panics on input,
//! unknown datagrams are dropped and counted once.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelay_core::faults::Faults;
use corelay_core::metrics::{Counters, LatencyHistogram, ParticipantStats};
use corelay_core::room::RoomUpdate;
use corelay_core::{
    Accepted, ControlOutbox, Engine, Lane, LeaveReason, OfferError, ParticipantId, PeerMsg, RoomId,
    RtcSettings, ShardEvent, ShardId,
};
use corelay_plane::{
    Applied, DataPlane, IoCounters, ShardCommand, ShardHandle, ShardReport, ToControl, apply,
    fail_if_injected, micros, record_dwell, send_datagrams,
};
use corelay_udp::{RecvBatch, SendBatch};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Datagrams queued for one participant task (lossy on full).
const NET_INBOX: usize = 1024;
/// Peer messages queued for one participant task (lossy on full).
const PEER_INBOX: usize = 1024;
/// Hub commands queued for one participant task (the hub waits on full).
const CMD_INBOX: usize = 64;
/// Address and ufrag updates queued for the reader.
const READER_CTL: usize = 4096;
/// Figures queued for the hub (lossy: they are cumulative).
const HUB_INBOX: usize = 4096;
/// Messages a participant task handles per wake-up before it sends.
const BUDGET: usize = 256;
/// Batches the reader reads per wake-up before it looks at its control queue.
const MAX_BATCHES_PER_WAKE: usize = 8;
/// Datagrams it reads per wake-up (a GRO message counts as its datagrams;
/// see the shard's constant of the same name).
const MAX_DATAGRAMS_PER_WAKE: usize = MAX_BATCHES_PER_WAKE * corelay_udp::BATCH;
/// How often the tasks, the reader and the hub report (as a shard does).
const REPORT_INTERVAL: Duration = Duration::from_millis(250);
/// The shard id of a member the hub hosts no task for (it left meanwhile):
/// media for it is dropped and counted.
const GONE: ShardId = ShardId(usize::MAX);
/// The one shard the control thread sees.
const LOGICAL: ShardId = ShardId(0);

/// What the server needs to start the work-stealing data plane.
pub struct WsSpec {
    pub socket: StdUdpSocket,
    pub advertised: SocketAddr,
    /// Where every datagram is sent from (a socket bound to a wildcard
    /// address): the advertised address, when it is this host's.
    pub source: Option<IpAddr>,
    pub settings: RtcSettings,
    pub to_control: mpsc::UnboundedSender<ToControl>,
    /// Worker threads of the runtime (`--shards`).
    pub workers: usize,
    /// Record socket dwell and forwarding latency per packet.
    pub packet_metrics: bool,
    /// Send runs of datagrams with UDP GSO and read them with GRO, where
    /// the kernel supports it.
    pub offload: bool,
}

/// How long [`DataPlane::finish`] waits for the runtime's tasks.
const FINISH_TIMEOUT: Duration = Duration::from_secs(1);

/// The work-stealing baseline as a [`DataPlane`]: the runtime, and the
/// control thread's handle on its one logical shard.
pub struct WorkStealing {
    rt: tokio::runtime::Runtime,
    handle: ShardHandle,
    workers: usize,
}

impl DataPlane for WorkStealing {
    type Spec = WsSpec;

    /// Starts the runtime, the reader and the hub.
    fn start(spec: WsSpec) -> io::Result<Self> {
        spawn(spec)
    }

    fn handles(&self) -> Vec<ShardHandle> {
        vec![self.handle.clone()]
    }

    /// The one logical shard stands for every worker.
    fn cores_per_shard(&self) -> usize {
        self.workers
    }

    /// Stops every task, waiting up to a second for them, whether or not
    /// the shutdown was clean.
    fn finish(self, _clean: bool) {
        self.rt.shutdown_timeout(FINISH_TIMEOUT);
    }
}

fn spawn(spec: WsSpec) -> io::Result<WorkStealing> {
    let clocks = WorkerClocks::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(spec.workers.max(1))
        .thread_name("corelay-ws")
        .on_thread_start({
            let clocks = clocks.clone();
            move || {
                clocks.register_current();
                // As a shard's thread: the data plane first (real-time
                // policies only).
                corelay_thread::rise_above_siblings();
            }
        })
        .enable_all()
        .build()?;
    let gso = spec.offload && corelay_udp::gso_supported(&spec.socket);
    let recv = RecvBatch::for_socket(&spec.socket, spec.offload);
    let socket = {
        let _in = rt.enter();
        Arc::new(UdpSocket::from_std(spec.socket)?)
    };
    let (commands_tx, commands) = mpsc::unbounded_channel();
    let handle = ShardHandle {
        index: LOGICAL,
        advertised: spec.advertised,
        advertised_tcp: spec.advertised,
        commands: commands_tx,
    };
    let (reader_tx, reader_rx) = mpsc::channel(READER_CTL);
    let (hub_tx, hub_rx) = mpsc::channel(HUB_INBOX);
    let reader = Reader {
        socket: socket.clone(),
        recv,
        by_addr: HashMap::new(),
        by_ufrag: HashMap::new(),
        routes: HashMap::new(),
        max_addrs: spec.settings.participant.max_addrs.max(1),
        counters: Counters::default(),
        dwell: LatencyHistogram::default(),
        iterations: 0,
        hub: hub_tx.clone(),
        packet_metrics: spec.packet_metrics,
        faults: spec.settings.faults.clone(),
    };
    let hub = Hub {
        settings: spec.settings,
        advertised: spec.advertised,
        socket,
        to_control: spec.to_control.clone(),
        reader: reader_tx,
        figures_tx: hub_tx,
        packet_metrics: spec.packet_metrics,
        gso,
        source: spec.source,
        workers: spec.workers.max(1),
        next: 1,
        members: HashMap::new(),
        by_participant: HashMap::new(),
        task_ids: HashMap::new(),
        tasks: JoinSet::new(),
        latest: HashMap::new(),
        retired: Figures::default(),
        reader_figures: Figures::default(),
        last_report: Instant::now(),
        cpu: Duration::ZERO,
        clocks,
        reports: 0,
    };
    supervise(
        &rt,
        "reader",
        spec.to_control.clone(),
        reader.run(reader_rx),
    );
    supervise(&rt, "hub", spec.to_control, hub.run(commands, hub_rx));
    Ok(WorkStealing {
        rt,
        handle,
        workers: spec.workers.max(1),
    })
}

/// Runs `fut` on the runtime; if it fails or panics, the control thread
/// hears that the (one logical) shard failed, as it would of a shard thread.
fn supervise(
    rt: &tokio::runtime::Runtime,
    what: &'static str,
    to_control: mpsc::UnboundedSender<ToControl>,
    fut: impl Future<Output = io::Result<()>> + Send + 'static,
) {
    let task = rt.spawn(fut);
    rt.spawn(async move {
        let reason = match task.await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("the {what} stopped: {e}"),
            Err(e) if e.is_panic() => format!("the {what} panicked: {}", panic_text(e)),
            Err(e) => format!("the {what} was cancelled: {e}"),
        };
        let _ = to_control.send(ToControl::Failed {
            shard: LOGICAL,
            reason,
        });
    });
}

fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// The CPU clocks of the runtime's threads, registered as each starts, so
/// that `busy` counts the workers' CPU time only (not the control thread's
/// offer work, nor time other processes preempted them).
#[derive(Clone, Default)]
#[allow(
    clippy::disallowed_types,
    reason = "written once per thread at its start, read by the hub once per report: never on the packet path"
)]
struct WorkerClocks(Arc<std::sync::Mutex<Vec<libc::clockid_t>>>);

impl WorkerClocks {
    fn register_current(&self) {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_getcpuclockid on the calling thread, writing into
        // a clockid_t we own.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        if rc == 0 {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        }
    }

    /// The registered threads' CPU time together.
    fn total(&self) -> Duration {
        let ids = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ids.into_iter().map(cpu_clock).sum()
    }
}

/// The time of a CPU clock (zero if it is gone).
fn cpu_clock(id: libc::clockid_t) -> Duration {
    corelay_thread::clock(id).unwrap_or(Duration::ZERO)
}

/// The ufrag of an SDP answer (`a=ice-ufrag:`): what an ICE restart changed.
fn answer_ufrag(sdp: &str) -> Option<String> {
    sdp.lines()
        .find_map(|l| l.trim_end().strip_prefix("a=ice-ufrag:"))
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
}

/// Looks up the first part of a STUN binding request's USERNAME
/// (`ours:theirs`): our ufrag, which names the participant a new address
/// belongs to. str0m's parser (bounds-checked); anything that is not a
/// binding request finds nothing.
fn stun_owner<T: Copy>(data: &[u8], by_ufrag: &HashMap<String, T>) -> Option<T> {
    // STUN's first two bits are zero and its header is 20 bytes (RFC 8489):
    // media from unknown addresses is refused before any parsing.
    if !matches!(data.first(), Some(0..=3)) || data.len() < 20 {
        return None;
    }
    let msg = str0m::ice::StunMessage::parse(data).ok()?;
    if !msg.is_binding_request() {
        return None;
    }
    let (ours, _theirs) = msg.split_username()?;
    by_ufrag.get(ours).copied()
}

// ------------------------------------------------------------------ figures

/// What a participant task (or the reader) accumulated: cumulative values.
#[derive(Clone, Debug, Default)]
struct Figures {
    counters: Counters,
    dwell: LatencyHistogram,
    forward_local: LatencyHistogram,
    forward_cross: LatencyHistogram,
    iteration: LatencyHistogram,
    iterations: u64,
    /// Per-participant figures, about once a second.
    detail: Option<Vec<ParticipantStats>>,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.counters.add(&o.counters);
        self.dwell.add(&o.dwell);
        self.forward_local.add(&o.forward_local);
        self.forward_cross.add(&o.forward_cross);
        self.iteration.add(&o.iteration);
        self.iterations += o.iterations;
    }
}

enum HubMsg {
    Task {
        vshard: ShardId,
        figures: Box<Figures>,
    },
    Reader(Box<Figures>),
}

// ------------------------------------------------------------------- reader

/// A datagram on its way to its participant task (a copy: the reader's
/// buffers are reused at once).
struct Inbound {
    source: SocketAddr,
    kernel_rx: Option<Duration>,
    data: Vec<u8>,
}

enum ReaderCtl {
    /// A new participant task, recognised by `ufrag` until an address is proved.
    Add {
        vshard: ShardId,
        ufrag: String,
        inbox: mpsc::Sender<Inbound>,
    },
    /// The task's engine answered from `addr`: it is the participant's.
    Learned { vshard: ShardId, addr: SocketAddr },
    /// An ICE restart gave the participant a new ufrag.
    Ufrag { vshard: ShardId, ufrag: String },
    /// The task ended.
    Gone { vshard: ShardId },
}

struct Route {
    ufrag: String,
    addrs: Vec<SocketAddr>,
    inbox: mpsc::Sender<Inbound>,
}

struct Reader {
    socket: Arc<UdpSocket>,
    recv: RecvBatch,
    by_addr: HashMap<SocketAddr, ShardId>,
    by_ufrag: HashMap<String, ShardId>,
    routes: HashMap<ShardId, Route>,
    max_addrs: usize,
    counters: Counters,
    dwell: LatencyHistogram,
    iterations: u64,
    hub: mpsc::Sender<HubMsg>,
    packet_metrics: bool,
    /// The tests' faults (its stall; empty but in a `fault-injection` build).
    faults: Faults,
}

impl Reader {
    async fn run(mut self, mut ctl: mpsc::Receiver<ReaderCtl>) -> io::Result<()> {
        let mut last_report = Instant::now();
        loop {
            let next_report = last_report + REPORT_INTERVAL;
            tokio::select! {
                biased;
                c = ctl.recv() => {
                    let Some(c) = c else { return Ok(()) };
                    self.control(c);
                    while let Ok(c) = ctl.try_recv() {
                        self.control(c);
                    }
                }
                ready = self.socket.readable() => {
                    ready?;
                    self.read();
                }
                () = tokio::time::sleep_until(next_report.into()) => {}
            }
            self.iterations += 1;
            let now = Instant::now();
            if now >= next_report {
                let figures = Figures {
                    counters: self.counters,
                    dwell: self.dwell,
                    iterations: self.iterations,
                    ..Figures::default()
                };
                let _ = self.hub.try_send(HubMsg::Reader(Box::new(figures)));
                last_report = now;
            }
        }
    }

    fn control(&mut self, c: ReaderCtl) {
        match c {
            ReaderCtl::Add {
                vshard,
                ufrag,
                inbox,
            } => {
                self.by_ufrag.insert(ufrag.clone(), vshard);
                self.routes.insert(
                    vshard,
                    Route {
                        ufrag,
                        addrs: Vec::new(),
                        inbox,
                    },
                );
            }
            ReaderCtl::Learned { vshard, addr } => {
                let Some(r) = self.routes.get_mut(&vshard) else {
                    return;
                };
                if r.addrs.contains(&addr) || r.addrs.len() >= self.max_addrs {
                    return;
                }
                r.addrs.push(addr);
                // As the engine's demux does: the latest prover owns it.
                if let Some(old) = self.by_addr.insert(addr, vshard)
                    && old != vshard
                    && let Some(o) = self.routes.get_mut(&old)
                {
                    o.addrs.retain(|a| *a != addr);
                }
            }
            ReaderCtl::Ufrag { vshard, ufrag } => {
                let Some(r) = self.routes.get_mut(&vshard) else {
                    return;
                };
                if r.ufrag != ufrag {
                    if self.by_ufrag.get(&r.ufrag) == Some(&vshard) {
                        self.by_ufrag.remove(&r.ufrag);
                    }
                    self.by_ufrag.insert(ufrag.clone(), vshard);
                    r.ufrag = ufrag;
                }
            }
            ReaderCtl::Gone { vshard } => {
                let Some(r) = self.routes.remove(&vshard) else {
                    return;
                };
                for a in &r.addrs {
                    if self.by_addr.get(a) == Some(&vshard) {
                        self.by_addr.remove(a);
                    }
                }
                if self.by_ufrag.get(&r.ufrag) == Some(&vshard) {
                    self.by_ufrag.remove(&r.ufrag);
                }
            }
        }
    }

    /// Reads up to [`MAX_BATCHES_PER_WAKE`] batches (and about
    /// [`MAX_DATAGRAMS_PER_WAKE`] datagrams) and hands each datagram to its
    /// task.
    fn read(&mut self) {
        let mut left = MAX_DATAGRAMS_PER_WAKE;
        for _ in 0..MAX_BATCHES_PER_WAKE {
            if left == 0 {
                break;
            }
            let socket = &self.socket;
            let recv = &mut self.recv;
            // try_io clears readiness on WouldBlock, so the next
            // `readable()` waits for the kernel again.
            match socket.try_io(Interest::READABLE, || recv.recv_max(&**socket, left)) {
                Ok(_) => {
                    left = left.saturating_sub(self.recv.len());
                    if self.packet_metrics {
                        record_dwell(&self.recv, &mut self.dwell);
                    }
                    for dg in self.recv.iter() {
                        if let Some(pause) = self.faults.stall_after_datagram() {
                            // The tests' stall (--test-stall-every): blocking
                            // a worker is what it simulates.
                            std::thread::sleep(pause);
                        }
                        let target = self
                            .by_addr
                            .get(&dg.source)
                            .copied()
                            .or_else(|| stun_owner(dg.data, &self.by_ufrag));
                        let route = target.and_then(|v| self.routes.get(&v));
                        let outcome = match route.map(|r| r.inbox.try_reserve()) {
                            Some(Ok(permit)) => {
                                permit.send(Inbound {
                                    source: dg.source,
                                    kernel_rx: dg.kernel_rx,
                                    data: dg.data.to_vec(),
                                });
                                None
                            }
                            Some(Err(mpsc::error::TrySendError::Full(()))) => Some(true),
                            Some(Err(mpsc::error::TrySendError::Closed(()))) | None => Some(false),
                        };
                        // Delivered datagrams are counted by their engine;
                        // those that stop here are counted here, once.
                        if let Some(full) = outcome {
                            self.counters.rx_packets += 1;
                            self.counters.rx_bytes += dg.data.len() as u64;
                            if full {
                                self.counters.cross_shard_dropped += 1;
                            } else {
                                self.counters.dropped_unknown_source += 1;
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // ICMP errors surface here (a client went away); they
                    // concern one peer, not the socket.
                    tracing::debug!("work-stealing reader: recv: {e}");
                }
            }
        }
    }
}

// ------------------------------------------------------------------- task

/// The channels of a room's tasks, by virtual shard id.
type Peers = Vec<(ShardId, mpsc::Sender<PeerMsg>)>;

/// A command for one participant task: the control thread's command as its
/// engine takes it (rosters rewritten to virtual ids by the hub), applied
/// with the shards' dispatch ([`apply`]).
struct TaskCmd {
    cmd: ShardCommand,
    /// With a roster (`Add`, `Room`): the channels of its members' tasks,
    /// which replace the task's.
    peers: Option<Peers>,
}

impl TaskCmd {
    fn new(cmd: ShardCommand) -> Self {
        TaskCmd { cmd, peers: None }
    }

    /// Close the connection and end. The hub waits for the task's end, not
    /// on `done`.
    fn shutdown() -> Self {
        TaskCmd::new(ShardCommand::Shutdown {
            done: oneshot::channel().0,
        })
    }
}

struct Inboxes {
    cmds: mpsc::Receiver<TaskCmd>,
    net: mpsc::Receiver<Inbound>,
    peer: mpsc::Receiver<PeerMsg>,
}

/// One participant: its engine, the senders of its room's other tasks, and
/// the shared socket it sends on.
struct Task {
    vshard: ShardId,
    engine: Engine,
    advertised: SocketAddr,
    socket: Arc<UdpSocket>,
    send: SendBatch,
    peers: HashMap<ShardId, mpsc::Sender<PeerMsg>>,
    /// Control messages a full peer inbox could not take yet (lossless,
    /// as between shards: [`corelay_core::lanes`]).
    outbox: ControlOutbox,
    /// What the I/O layer counts (sends, full peer inboxes).
    io: IoCounters,
    reader: mpsc::Sender<ReaderCtl>,
    hub: mpsc::Sender<HubMsg>,
    to_control: mpsc::UnboundedSender<ToControl>,
    /// Addresses the reader was told are this participant's.
    proven: Vec<SocketAddr>,
    figures: Figures,
    packet_metrics: bool,
    last_report: Instant,
    reports: u64,
}

impl Task {
    /// Runs the participant from its `Add` until it leaves or is shut down.
    async fn run(mut self, add: TaskCmd, mut inbox: Inboxes) -> (ShardId, Figures) {
        let now = Instant::now();
        self.command(now, Some(add)).await;
        self.flush();
        self.worked(now);
        while self.engine.participant_count() > 0 {
            let next_report = self.last_report + REPORT_INTERVAL;
            let deadline = self
                .engine
                .poll_timeout()
                .map_or(next_report, |t| t.min(next_report));
            let deadline = self
                .outbox
                .retry_in()
                .map_or(deadline, |r| deadline.min(Instant::now() + r));
            tokio::select! {
                biased;
                cmd = inbox.cmds.recv() => {
                    let start = Instant::now();
                    let stop = self.command(start, cmd).await;
                    self.flush();
                    self.worked(start);
                    if stop {
                        break;
                    }
                }
                // The shard's order: commands, timers, peers, then the
                // network (a timer due is served before new datagrams).
                () = tokio::time::sleep_until(deadline.into()) => {
                    let start = Instant::now();
                    self.engine.handle_timeout(start);
                    self.flush();
                    self.worked(start);
                }
                Some(first) = inbox.peer.recv() => {
                    let start = Instant::now();
                    self.engine.handle_peer(start, first);
                    for _ in 1..BUDGET {
                        let Ok(m) = inbox.peer.try_recv() else { break };
                        self.engine.handle_peer(start, m);
                    }
                    self.flush();
                    self.worked(start);
                }
                Some(first) = inbox.net.recv() => {
                    let start = Instant::now();
                    self.datagram(start, first);
                    for _ in 1..BUDGET {
                        let Ok(d) = inbox.net.try_recv() else { break };
                        self.datagram(start, d);
                    }
                    self.flush();
                    self.worked(start);
                }
            }
            self.figures.iterations += 1;
            if Instant::now() >= next_report {
                self.report();
            }
        }
        self.figures.counters = self.io.add_to(*self.engine.counters());
        (self.vshard, self.figures)
    }

    /// Applies a hub command (none: the hub is gone, as a shutdown); true
    /// when the task should end.
    async fn command(&mut self, now: Instant, cmd: Option<TaskCmd>) -> bool {
        let TaskCmd { cmd, peers } = cmd.unwrap_or_else(TaskCmd::shutdown);
        if let Some(peers) = peers {
            self.peers = peers.into_iter().collect();
        }
        match apply(&mut self.engine, now, cmd) {
            Applied::Done => false,
            Applied::Answer(answer) => {
                if let Ok(sdp) = &answer.result
                    && let Some(ufrag) = answer_ufrag(sdp)
                {
                    // Before the answer leaves: the client's first STUN
                    // request with the new ufrag must find this task.
                    let _ = self
                        .reader
                        .send(ReaderCtl::Ufrag {
                            vshard: self.vshard,
                            ufrag,
                        })
                        .await;
                }
                answer.send();
                false
            }
            Applied::Shutdown(_) => true,
            // The baseline is one node (`--cluster` is refused with it).
            Applied::Relay(_) => false,
        }
    }

    fn datagram(&mut self, now: Instant, d: Inbound) {
        let new = !self.proven.contains(&d.source);
        self.engine.finish_batch();
        let before = self.engine.outputs().transmits.len();
        self.engine
            .handle_datagram(now, d.kernel_rx, d.source, self.advertised, &d.data);
        self.engine.finish_batch();
        // The engine answered from a new address (a STUN binding response):
        // str0m proved it, so the reader may route by it from now on.
        if new
            && self
                .engine
                .outputs()
                .transmits
                .iter()
                .skip(before)
                .any(|t| t.destination == d.source)
            && self
                .reader
                .try_send(ReaderCtl::Learned {
                    vshard: self.vshard,
                    addr: d.source,
                })
                .is_ok()
        {
            self.proven.push(d.source);
        }
    }

    fn worked(&mut self, start: Instant) {
        self.figures.iteration.record_us(micros(start.elapsed()));
    }

    /// Sends what the engine produced: datagrams in one batch, peer messages
    /// into the other tasks' channels (lossy), events to the control thread.
    #[allow(
        clippy::result_large_err,
        reason = "a control message a full lane refuses comes back by value (Mesh::push)"
    )]
    fn flush(&mut self) {
        self.engine.finish_batch();
        send_datagrams(
            &mut self.engine,
            &mut self.io,
            &mut self.send,
            &*self.socket,
            self.packet_metrics,
            &mut self.figures.forward_local,
            &mut self.figures.forward_cross,
        );
        let out = self.engine.outputs();
        let mut dropped = 0;
        let peers = &self.peers;
        // A control message waits in the outbox while the peer's inbox is
        // full; one for a task that is gone has no one to reach.
        let push = |to: ShardId, m: PeerMsg| match peers.get(&to).map(|tx| tx.try_send(m)) {
            Some(Err(mpsc::error::TrySendError::Full(m))) => Err(m),
            _ => Ok(()),
        };
        self.outbox.flush(push);
        for (to, msg) in out.peers.drain(..) {
            if msg.lane() == Lane::Control {
                self.outbox.send(to, msg, push);
            } else if peers.get(&to).is_none_or(|tx| tx.try_send(msg).is_err()) {
                dropped += 1;
            }
        }
        for ev in out.control.drain(..) {
            let _ = self.to_control.send(ToControl::Event(ev));
        }
        self.io.cross_shard_dropped += dropped;
    }

    fn report(&mut self) {
        self.figures.counters = self.io.add_to(*self.engine.counters());
        let mut figures = self.figures.clone();
        figures.detail = self
            .reports
            .is_multiple_of(4)
            .then(|| self.engine.participant_stats());
        self.reports += 1;
        let _ = self.hub.try_send(HubMsg::Task {
            vshard: self.vshard,
            figures: Box::new(figures),
        });
        self.last_report = Instant::now();
    }
}

// ---------------------------------------------------------------------- hub

struct Member {
    id: ParticipantId,
    room: RoomId,
    cmd: mpsc::Sender<TaskCmd>,
    peer: mpsc::Sender<PeerMsg>,
}

struct Hub {
    settings: RtcSettings,
    advertised: SocketAddr,
    socket: Arc<UdpSocket>,
    to_control: mpsc::UnboundedSender<ToControl>,
    reader: mpsc::Sender<ReaderCtl>,
    figures_tx: mpsc::Sender<HubMsg>,
    packet_metrics: bool,
    /// GSO on for every task's sends (asked for and supported).
    gso: bool,
    /// Every task's sends leave from it ([`WsSpec::source`]).
    source: Option<IpAddr>,
    workers: usize,
    /// The next virtual shard id (0 is the logical shard).
    next: usize,
    members: HashMap<ShardId, Member>,
    by_participant: HashMap<ParticipantId, ShardId>,
    task_ids: HashMap<tokio::task::Id, ShardId>,
    tasks: JoinSet<(ShardId, Figures)>,
    /// The latest figures of each live task.
    latest: HashMap<ShardId, Figures>,
    /// The final figures of every task that ended (counters only grow).
    retired: Figures,
    reader_figures: Figures,
    last_report: Instant,
    /// The workers' CPU time at the last report.
    cpu: Duration,
    clocks: WorkerClocks,
    reports: u64,
}

impl Hub {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<ShardCommand>,
        mut figures: mpsc::Receiver<HubMsg>,
    ) -> io::Result<()> {
        loop {
            let next_report = self.last_report + REPORT_INTERVAL;
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    None => {
                        self.shutdown().await;
                        return Ok(());
                    }
                    Some(ShardCommand::Shutdown { done }) => {
                        self.shutdown().await;
                        let _ = done.send(());
                        return Ok(());
                    }
                    Some(cmd) => self.command(cmd).await,
                },
                Some(ended) = self.tasks.join_next_with_id() => self.ended(ended).await,
                Some(msg) = figures.recv() => self.figures(msg),
                () = tokio::time::sleep_until(next_report.into()) => {}
            }
            if Instant::now() >= next_report {
                self.report();
            }
        }
    }

    async fn command(&mut self, cmd: ShardCommand) {
        fail_if_injected(&self.settings.faults, &cmd);
        match cmd {
            ShardCommand::Add {
                id,
                room,
                name,
                accepted,
                roster,
            } => self.add(id, room, name, accepted, roster).await,
            ShardCommand::Remove { id, reason } => {
                if let Some(m) = self.member(id) {
                    let cmd = ShardCommand::Remove { id, reason };
                    let _ = m.cmd.send(TaskCmd::new(cmd)).await;
                }
            }
            ShardCommand::Room(update) => {
                let room = update.room;
                let (update, peers) = self.rewrite(update);
                for m in self.members.values().filter(|m| m.room == room) {
                    let _ = m
                        .cmd
                        .send(TaskCmd {
                            cmd: ShardCommand::Room(update.clone()),
                            peers: Some(peers.clone()),
                        })
                        .await;
                }
            }
            ShardCommand::Renegotiate { id, offer, reply } => match self.member(id) {
                Some(m) => {
                    let cmd = ShardCommand::Renegotiate { id, offer, reply };
                    if let Err(mpsc::error::SendError(TaskCmd {
                        cmd: ShardCommand::Renegotiate { reply, .. },
                        ..
                    })) = m.cmd.send(TaskCmd::new(cmd)).await
                    {
                        let _ = reply.send(Err(OfferError::UnknownParticipant(id)));
                    }
                }
                None => {
                    let _ = reply.send(Err(OfferError::UnknownParticipant(id)));
                }
            },
            // Handled by the loop.
            ShardCommand::Shutdown { done } => {
                let _ = done.send(());
            }
            // The baseline is one node (`--cluster` is refused with it).
            // Recording is the pinned shards' (the control thread refuses it
            // in this mode).
            ShardCommand::Relay(_) | ShardCommand::Recording { .. } => {}
        }
    }

    fn member(&self, id: ParticipantId) -> Option<&Member> {
        self.by_participant
            .get(&id)
            .and_then(|v| self.members.get(v))
    }

    async fn add(
        &mut self,
        id: ParticipantId,
        room: RoomId,
        name: String,
        accepted: Box<Accepted>,
        roster: RoomUpdate,
    ) {
        let vshard = ShardId(self.next);
        self.next += 1;
        let (cmd_tx, cmds) = mpsc::channel(CMD_INBOX);
        let (net_tx, net) = mpsc::channel(NET_INBOX);
        let (peer_tx, peer) = mpsc::channel(PEER_INBOX);
        let _ = self
            .reader
            .send(ReaderCtl::Add {
                vshard,
                ufrag: accepted.ufrag.clone(),
                inbox: net_tx,
            })
            .await;
        self.members.insert(
            vshard,
            Member {
                id,
                room,
                cmd: cmd_tx,
                peer: peer_tx,
            },
        );
        self.by_participant.insert(id, vshard);
        let (roster, peers) = self.rewrite(roster);
        // The control thread sends a join's roster to the joiner's shard in
        // the Add only (a shard's engine tells its own members): here the
        // room's other tasks are that shard's other members.
        for m in self
            .members
            .values()
            .filter(|m| m.room == room && m.id != id)
        {
            let _ = m
                .cmd
                .send(TaskCmd {
                    cmd: ShardCommand::Room(roster.clone()),
                    peers: Some(peers.clone()),
                })
                .await;
        }
        let task = Task {
            vshard,
            engine: Engine::new(vshard, self.settings.clone()),
            advertised: self.advertised,
            socket: self.socket.clone(),
            send: {
                let mut s = SendBatch::new();
                s.set_gso(self.gso);
                s.set_source(self.source);
                s
            },
            peers: HashMap::new(),
            outbox: ControlOutbox::new(),
            io: IoCounters::default(),
            reader: self.reader.clone(),
            hub: self.figures_tx.clone(),
            to_control: self.to_control.clone(),
            proven: Vec::new(),
            figures: Figures::default(),
            packet_metrics: self.packet_metrics,
            last_report: Instant::now(),
            reports: 0,
        };
        let add = TaskCmd {
            cmd: ShardCommand::Add {
                id,
                room,
                name,
                accepted,
                roster,
            },
            peers: Some(peers),
        };
        let abort = self.tasks.spawn(task.run(add, Inboxes { cmds, net, peer }));
        self.task_ids.insert(abort.id(), vshard);
    }

    /// A roster with each member's `shard` set to its task's virtual id, and
    /// the channels of those tasks.
    fn rewrite(&self, mut update: RoomUpdate) -> (RoomUpdate, Peers) {
        let mut peers = Vec::with_capacity(update.members.len());
        for m in &mut update.members {
            match self
                .by_participant
                .get(&m.id)
                .and_then(|v| self.members.get(v).map(|mm| (*v, mm.peer.clone())))
            {
                Some((v, tx)) => {
                    m.shard = v;
                    peers.push((v, tx));
                }
                None => m.shard = GONE,
            }
        }
        (update, peers)
    }

    /// A participant task ended: it left (its engine told the control
    /// thread why), was removed, or panicked outside the engine's guard.
    async fn ended(
        &mut self,
        ended: Result<(tokio::task::Id, (ShardId, Figures)), tokio::task::JoinError>,
    ) {
        let (vshard, panicked) = match ended {
            Ok((tid, (vshard, figures))) => {
                self.task_ids.remove(&tid);
                self.retired.add(&figures);
                self.latest.remove(&vshard);
                (vshard, None)
            }
            Err(e) => {
                let Some(vshard) = self.task_ids.remove(&e.id()) else {
                    return;
                };
                if let Some(last) = self.latest.remove(&vshard) {
                    self.retired.add(&last);
                }
                self.retired.counters.participant_panics += 1;
                self.retired.counters.participants_removed += 1;
                let why = if e.is_panic() {
                    panic_text(e)
                } else {
                    e.to_string()
                };
                (vshard, Some(why))
            }
        };
        let _ = self.reader.send(ReaderCtl::Gone { vshard }).await;
        let Some(m) = self.members.remove(&vshard) else {
            return;
        };
        self.by_participant.remove(&m.id);
        if let Some(why) = panicked {
            tracing::error!(participant = %m.id, "work-stealing: participant task died: {why}");
            let _ = self.to_control.send(ToControl::Event(ShardEvent::Left {
                id: m.id,
                reason: LeaveReason::Panic,
                detail: format!("panic while handling it: {why}"),
            }));
        }
    }

    /// Every task closes its connection; returns when all ended.
    async fn shutdown(&mut self) {
        for m in self.members.values() {
            let _ = m.cmd.send(TaskCmd::shutdown()).await;
        }
        while let Some(ended) = self.tasks.join_next_with_id().await {
            self.ended(ended).await;
        }
        self.report();
    }

    fn figures(&mut self, msg: HubMsg) {
        match msg {
            HubMsg::Task { vshard, figures } => {
                if !self.members.contains_key(&vshard) {
                    return;
                }
                let mut figures = *figures;
                // Keep the last detail until a newer one comes.
                if figures.detail.is_none()
                    && let Some(old) = self.latest.get_mut(&vshard)
                {
                    figures.detail = old.detail.take();
                }
                self.latest.insert(vshard, figures);
            }
            HubMsg::Reader(f) => self.reader_figures = *f,
        }
    }

    /// One report for the logical shard: the sum over the reader, the live
    /// tasks and every task that ended.
    fn report(&mut self) {
        let now = Instant::now();
        let window = now.saturating_duration_since(self.last_report);
        let cpu = self.clocks.total();
        let used = cpu.saturating_sub(self.cpu);
        self.cpu = cpu;
        let busy = if window.is_zero() {
            0.0
        } else {
            (used.as_secs_f64() / (window.as_secs_f64() * self.workers as f64)).min(1.0)
        };
        let mut sum = self.retired.clone();
        sum.add(&self.reader_figures);
        for f in self.latest.values() {
            sum.add(f);
        }
        let detail = self.reports.is_multiple_of(4).then(|| {
            self.latest
                .values()
                .filter_map(|f| f.detail.clone())
                .flatten()
                .collect()
        });
        let rooms: HashSet<RoomId> = self.members.values().map(|m| m.room).collect();
        let report = ShardReport {
            shard: LOGICAL,
            counters: sum.counters,
            participants: self.members.len(),
            rooms: rooms.len(),
            busy,
            loop_iterations: sum.iterations,
            dwell: sum.dwell,
            forward_local: sum.forward_local,
            forward_cross: sum.forward_cross,
            // Not kept here: the baseline's tasks hand media over by
            // channel, and forward_cross times that hop end to end.
            peer_hop: LatencyHistogram::default(),
            iteration: sum.iteration,
            participants_detail: detail,
            relay_links: Vec::new(),
        };
        self.reports += 1;
        let _ = self.to_control.send(ToControl::Report(Box::new(report)));
        self.last_report = now;
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests: a failure is the report"
)]
mod tests {
    use super::*;

    #[test]
    fn ufrag_of_an_answer() {
        let sdp = "v=0\r\na=ice-ufrag:abcd\r\na=ice-pwd:x\r\n";
        assert_eq!(answer_ufrag(sdp).as_deref(), Some("abcd"));
        assert_eq!(answer_ufrag("v=0\r\na=ice-ufrag:\r\n"), None);
        assert_eq!(answer_ufrag(""), None);
    }

    #[test]
    fn stun_owner_refuses_what_is_not_a_binding_request() {
        let map: HashMap<String, u8> = [("ours".to_string(), 1)].into_iter().collect();
        assert_eq!(stun_owner(b"", &map), None);
        assert_eq!(stun_owner(&[0u8; 19], &map), None);
        assert_eq!(stun_owner(&[0u8; 64], &map), None);
        assert_eq!(stun_owner(&[0x80; 64], &map), None);
        // A header claiming a longer body than there is.
        let mut h = vec![0x00, 0x01, 0x40, 0x00, 0x21, 0x12, 0xa4, 0x42];
        h.extend_from_slice(&[0; 12]);
        assert_eq!(stun_owner(&h, &map), None);
    }

    #[test]
    fn stun_owner_reads_our_part_of_the_username() {
        let map: HashMap<String, u8> = [("ours".to_string(), 1)].into_iter().collect();
        // A binding request as a client sends it (str0m's builder; the
        // integrity is not checked here, the task's engine checks it).
        let req = str0m::ice::StunMessage::binding_request(
            "ours:theirs",
            str0m::ice::TransId::new(),
            true,
            7,
            100,
            false,
        );
        let mut buf = [0u8; 512];
        let n = req
            .to_bytes(Some(b"password"), &mut buf, |_, _| [0; 20])
            .unwrap();
        let m = &buf[..n];
        assert_eq!(stun_owner(m, &map), Some(1));
        let other: HashMap<String, u8> = [("else".to_string(), 2)].into_iter().collect();
        assert_eq!(stun_owner(m, &other), None);
    }
}
