//! The simulation ([`Sim`]): a [`Driver`] of N sans-I/O
//! [`corelay_client::Participant`]s ([`SimClient`]s: real str0m clients:
//! full ICE, DTLS, SRTP, SCTP) and one [`Engine`] per shard, plus a tiny
//! control plane that does what the server's control thread does for joins,
//! leaves, renegotiations and shard events. Rooms, members and rosters (as
//! [`RoomUpdate`] values) are the server's own room directory
//! ([`corelay_core::directory`], without limits), placing each join on the
//! shard the test names; the sim's [`Ids`] count participant ids from 1.
//! The loop (clock, timers, delivery, routing between shards) is the
//! driver's ([`crate::driver`]); a `Sim` derefs to its driver, so that the
//! clock, the shards, the network and the lanes read as fields (`sim.now`,
//! `sim.shards`, `sim.net`, `sim.mesh`).
//! Must not: touch engine internals (only `corelay_core`'s public API),
//! drive engines or clients itself (the driver does), keep a directory of
//! its own, open sockets, spawn threads, or sleep.
//!
//! Reproducibility: the network's randomness (one RNG per link direction),
//! the clients' media schedules and every timing decision come from the
//! seed, and so do str0m's ids (mids, SSRCs: [`Sim::new`] seeds the
//! thread's `fastrand` generator they are drawn from), so a scenario's
//! received packets repeat exactly (`sim_same_seed_same_outcome`). DTLS
//! keys, the server's ICE credentials (from the OS) and the iteration order
//! of str0m's hash maps are not seeded (the engine's hash with Fx, whose
//! order is fixed); str0m breaks ties between send streams by midrid rather
//! than by that order (its patch 22). Should any of them start to change
//! what goes on the wire, that test says so.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use corelay_client::stats::Received;
use corelay_client::{Clock, Kind, Observer, Participant, ParticipantConfig, Snapshot};
use corelay_core::diagnosis::{Board, ShardSecond, ShardTotals, SlotOut};
use corelay_core::directory::{Admission, Directory, Flavor, Ids, Limits, NewMember, RoomError};
use corelay_core::offer::{accept_offer, check_renegotiation};
use corelay_core::room::RoomUpdate;
use corelay_core::{Engine, LeaveReason, ParticipantId, RtcSettings, ShardEvent, ShardId};

use crate::driver::{Driver, Endpoint};
use crate::net::{self, LinkParams, Net};

/// What virtual CLOCK_MONOTONIC reads at the start instant (1000 s: stamps
/// are plausible and latencies never underflow).
pub const START_NS: u64 = 1_000_000_000_000;

/// A client in the simulation (an index; `Copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct C(pub usize);

/// One received RTP packet, as the subscriber's participant verified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxPacket {
    /// Virtual arrival time.
    pub at: Instant,
    /// Receive slot (mid).
    pub slot: String,
    /// Slot kind.
    pub kind: Kind,
    /// Extended sequence number on the slot.
    pub seq: u64,
    /// RTP timestamp.
    pub timestamp: u32,
    /// SSRC.
    pub ssrc: u32,
    /// Publisher name from the payload stamp (`None`: failed verification).
    pub source: Option<String>,
    /// First packet of a keyframe.
    pub keyframe: bool,
    /// Frame number (per publisher) and packet index within it.
    pub frame: u32,
    /// Index within the frame.
    pub index: u16,
    /// Simulcast layer from the payload stamp (0: none).
    pub layer: u8,
}

/// Records every packet a client receives (its [`Observer`]).
#[derive(Debug, Default)]
pub struct Recorder {
    now: Option<Instant>,
    /// Packets in arrival order.
    pub packets: Vec<RxPacket>,
}

impl Observer for Recorder {
    fn received(&mut self, r: &Received<'_>) {
        let Some(at) = self.now else { return };
        self.packets.push(RxPacket {
            at,
            slot: r.slot.to_string(),
            kind: r.kind,
            seq: r.seq,
            timestamp: r.timestamp,
            ssrc: r.ssrc,
            source: r.source.map(str::to_string),
            keyframe: r.keyframe,
            frame: r.frame,
            index: r.index,
            layer: r.layer,
        });
    }
}

/// A simulated client: the participant, its address and what it received.
pub struct SimClient {
    /// Name (as stamped into payloads).
    pub name: String,
    /// Its address (the host candidate).
    pub addr: SocketAddr,
    /// The sans-I/O participant.
    pub p: Participant,
    /// The id the control plane gave it.
    pub id: ParticipantId,
    /// Shard it lives on.
    pub shard: usize,
    /// Room name.
    pub room: String,
    /// Its resource and ETag in the directory (which keeps the offer in
    /// force and the codecs a renegotiation is rehearsed with).
    resource: String,
    etag: String,
    /// Every packet received.
    pub rec: Recorder,
    /// Left on its own ([`Sim::leave`]).
    pub left: bool,
    /// Removed by its shard, and why.
    pub evicted: Option<LeaveReason>,
    /// The shard's explanation of the eviction (what the server logs).
    pub evicted_detail: Option<String>,
    /// The first STUN binding request it sent (to replay from elsewhere).
    pub first_stun: Option<Vec<u8>>,
}

/// The driver runs the participant; its observer records what arrives.
impl Endpoint for SimClient {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn receive(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.rec.now = Some(now);
        self.p.handle_datagram(now, from, data, &mut self.rec);
    }

    fn timeout(&mut self, now: Instant) {
        self.rec.now = Some(now);
        self.p.handle_timeout(now, &mut self.rec);
    }

    fn poll(&mut self, now: Instant, send: &mut dyn FnMut(SocketAddr, &[u8])) -> Option<Instant> {
        self.rec.now = Some(now);
        let first_stun = &mut self.first_stun;
        let wake = self.p.poll_output(now, &mut self.rec, &mut |dest, data| {
            if first_stun.is_none() && data.len() >= 20 && data[0..2] == [0, 1] {
                *first_stun = Some(data.to_vec());
            }
            send(dest, data);
        });
        Some(wake)
    }
}

/// The sim's [`Ids`]: participant ids counted from 1 (the server's are
/// random), so that a seed's run repeats; resources named after them.
struct Counted {
    next: u64,
}

impl Ids for Counted {
    fn participant(&mut self) -> ParticipantId {
        let id = ParticipantId(self.next);
        self.next += 1;
        id
    }

    fn resource(&mut self) -> Result<String, RoomError> {
        Ok(format!("sim-{}", self.next))
    }
}

/// A shard event as the control plane saw it.
#[derive(Debug, Clone)]
pub struct ControlEvent {
    /// When.
    pub at: Instant,
    /// From which shard.
    pub shard: usize,
    /// The event.
    pub event: ShardEvent,
}

/// The whole simulation: the driver (clock, shards, clients by [`C`],
/// network, lanes: what a `Sim` derefs to) and the control plane.
pub struct Sim {
    /// Runs the engines and the clients.
    driver: Driver<SimClient>,
    /// Settings every shard and offer uses.
    pub settings: RtcSettings,
    /// Every shard event, in order.
    pub control: Vec<ControlEvent>,
    /// The room directory, as the server's control thread keeps it.
    directory: Directory,
    ids: Counted,
    rng: fastrand::Rng,
    /// Link parameters new clients get.
    pub default_link: LinkParams,
    /// The verdict on every slot, judged each virtual second as the
    /// server's control thread does, with each shard's own figures over the
    /// second: its socket dwell (the driver's) and cross-shard hop (the
    /// engine's), both nothing but after a [`Driver::stall`]; no busy share
    /// (a simulated shard uses no CPU) and no forwarding latency.
    board: Board,
    /// Each shard's totals at the last verdict.
    shard_totals: Vec<ShardTotals>,
    next_judge: Instant,
    /// Which node of a cluster this is (0 alone).
    node: u8,
    /// A roster went to this node's shards since a cluster last looked: its
    /// members may have changed ([`crate::Cluster`] publishes them then).
    pub(crate) members_changed: bool,
}

/// The clock, the shards, the network and the lanes read as the
/// simulation's own (`sim.now`, `sim.shards[0].engine`, `sim.mesh`).
impl Deref for Sim {
    type Target = Driver<SimClient>;

    fn deref(&self) -> &Driver<SimClient> {
        &self.driver
    }
}

impl DerefMut for Sim {
    fn deref_mut(&mut self) -> &mut Driver<SimClient> {
        &mut self.driver
    }
}

impl Sim {
    /// A simulation with `shards` engines and the given settings; `seed`
    /// drives the network and the clients' media.
    pub fn new(seed: u64, shards: usize, settings: RtcSettings) -> Sim {
        // str0m draws its ids (mids, SSRCs, the clients' ICE credentials)
        // from this thread's fastrand generator: seeded, they repeat too.
        fastrand::seed(seed);
        Sim::node(seed, shards, settings, 0, Instant::now())
    }

    /// Node `node` of a cluster ([`crate::Cluster`]), on the cluster's
    /// clock (`start`): node 0 is what [`Sim::new`] makes; another node's
    /// participant ids count from `1 + 1000 * node` (ids are the cluster's,
    /// as the server's random ones are), and its shards and clients have
    /// addresses of their own (`10.99.node.1`, `10.(1 + node).…`).
    pub(crate) fn node(
        seed: u64,
        shards: usize,
        settings: RtcSettings,
        node: u8,
        start: Instant,
    ) -> Sim {
        let engines = (0..shards)
            .map(|i| {
                (
                    Engine::new(ShardId(i), settings.clone()),
                    SocketAddr::from((Ipv4Addr::new(10, 99, node, 1), 4000 + i as u16)),
                )
            })
            .collect();
        Sim {
            driver: Driver::new(start, engines, Net::new(seed)),
            settings,
            control: Vec::new(),
            directory: Directory::new(Limits::unlimited(), shards),
            ids: Counted {
                next: 1 + 1000 * u64::from(node),
            },
            node,
            members_changed: false,
            rng: fastrand::Rng::with_seed(seed ^ 0x5eed),
            default_link: LinkParams::default(),
            board: Board::new(shards),
            shard_totals: vec![ShardTotals::default(); shards],
            next_judge: start + Duration::from_secs(1),
        }
    }

    /// The clock mapping every simulated participant uses.
    pub fn clock(&self) -> Clock {
        Clock::fixed(self.start, START_NS)
    }

    // ------------------------------------------------------------ control plane

    /// Joins `cfg` to `room` on `shard` the way the server's control thread
    /// does: accept the offer, add the participant to its shard with the new
    /// roster, send the roster to every other shard of the room.
    pub fn join(&mut self, room: &str, cfg: ParticipantConfig, shard: usize) -> C {
        let name = cfg.name.clone();
        self.try_join(room, cfg, shard)
            .unwrap_or_else(|e| panic!("join {name} failed: {e}"))
    }

    /// [`join`](Self::join), returning the refusal instead of panicking.
    pub fn try_join(
        &mut self,
        room: &str,
        cfg: ParticipantConfig,
        shard: usize,
    ) -> Result<C, String> {
        self.try_join_edited(room, cfg, shard, |o| o, |a| a)
    }

    /// [`try_join`](Self::try_join) with the SDP altered on the way: the
    /// server accepts `edit_offer(offer)` and the client applies
    /// `edit_answer(answer)`, as a broken client or a middlebox would (a
    /// wrong `a=fingerprint` makes DTLS fail on that side).
    pub fn try_join_edited(
        &mut self,
        room: &str,
        mut cfg: ParticipantConfig,
        shard: usize,
        edit_offer: impl FnOnce(String) -> String,
        edit_answer: impl FnOnce(String) -> String,
    ) -> Result<C, String> {
        let now = self.now;
        cfg.clock = self.clock();
        cfg.seed = self.rng.u64(..);
        let n = self.driver.clients().len() as u16;
        let addr = SocketAddr::from((
            Ipv4Addr::new(10, 1 + self.node, (n >> 8) as u8, n as u8),
            5000,
        ));
        let server = self.driver.shards.get(shard).ok_or("no such shard")?.addr;
        let (mut p, offer) = Participant::new(cfg, addr, now)?;
        let codec = self
            .directory
            .prepare_join_on(room, ShardId(shard))
            .map_err(|e| e.to_string())?;
        let accepted = accept_offer(
            &self.settings,
            now,
            &edit_offer(offer.clone()),
            server,
            codec,
        )
        .map_err(|e| e.to_string())?;
        p.accept_answer(&edit_answer(accepted.answer.clone()))?;
        let name = p.name().to_string();
        let new = NewMember {
            name: Some(&name),
            identity: None,
            sdp: &offer,
            flavor: Flavor::Participant,
            tracks: accepted.tracks.clone(),
            slots: accepted.slots.clone(),
            accepted_under: codec,
            codecs: accepted.codecs.clone(),
            room_codec: accepted.room_codec,
            joined: now,
        };
        let a = match self
            .directory
            .admit(room, ShardId(shard), true, new, &mut self.ids)
            .map_err(|e| e.to_string())?
        {
            Admission::Admitted(a) => a,
            other => return Err(format!("not admitted on shard {shard}: {other:?}")),
        };
        let id = a.id;
        let link = self.driver.net.link_mut(addr);
        link.up.params = self.default_link.clone();
        link.down.params = self.default_link.clone();
        let c = self.driver.add_client(SimClient {
            name: name.clone(),
            addr,
            p,
            id,
            shard,
            room: room.to_string(),
            resource: a.resource.clone(),
            etag: a.etag.clone(),
            rec: Recorder::default(),
            left: false,
            evicted: None,
            evicted_detail: None,
            first_stun: None,
        });
        self.driver.shards[shard].engine.add_participant(
            now,
            id,
            a.room,
            a.name,
            accepted,
            a.roster.clone(),
        );
        send_roster(&mut self.driver, &a.roster, &a.notify);
        self.members_changed = true;
        self.settle();
        Ok(C(c))
    }

    /// The participant leaves (API DELETE): its shard removes it, the
    /// roster goes to the room's shards, and the client stops.
    pub fn leave(&mut self, c: C) {
        let now = self.now;
        let cl = &mut self.driver.clients_mut()[c.0];
        cl.left = true;
        cl.p.close();
        let (id, shard) = (cl.id, cl.shard);
        self.driver.stop(c.0);
        self.driver.shards[shard].engine.remove_participant(now, id);
        control_remove(&mut self.directory, &mut self.driver, id);
        self.members_changed = true;
        self.settle();
    }

    /// The server removes the participant (an admin's DELETE) while its
    /// client goes on: it hears why on the data channel, then DTLS closes.
    pub fn remove(&mut self, c: C) {
        let now = self.now;
        let (id, shard) = (self.client(c).id, self.client(c).shard);
        self.driver.shards[shard].engine.remove_participant(now, id);
        control_remove(&mut self.directory, &mut self.driver, id);
        self.members_changed = true;
        self.settle();
    }

    /// Renegotiation (PATCH): the client adds recvonly slots; the offer is
    /// marked in flight in the directory and rehearsed like the control
    /// thread does, then applied on the shard; the directory records the
    /// outcome (the offer in force, the ETag).
    /// A refusal leaves the client with its offer pending (no rollback):
    /// a test that expects one should not go on with that client.
    pub fn add_slots(&mut self, c: C, video: usize, audio: usize) -> Result<(), String> {
        self.renegotiate(c, |p| p.add_slots(video, audio))
    }

    /// `c` restarts ICE (new credentials, in an offer through the
    /// renegotiation path, as the demo page does when its connection is
    /// down).
    pub fn restart_ice(&mut self, c: C) -> Result<(), String> {
        self.renegotiate(c, Participant::restart_ice)
    }

    /// `c` renegotiates with the offer `make` gives, applied as the
    /// control thread applies a PATCH.
    fn renegotiate(
        &mut self,
        c: C,
        make: impl FnOnce(&mut Participant) -> Result<String, String>,
    ) -> Result<(), String> {
        let now = self.now;
        let cl = &mut self.driver.clients_mut()[c.0];
        let offer = make(&mut cl.p)?;
        let (id, shard) = (cl.id, cl.shard);
        let r = self
            .directory
            .begin_renegotiate(&cl.room, &cl.resource, Some(&cl.etag))
            .map_err(|e| e.to_string())?;
        let engine = &mut self.driver.shards[shard].engine;
        let outcome = check_renegotiation(&self.settings, now, &r.previous, &offer, &r.codecs)
            .map_err(|e| e.to_string())
            .and_then(|prepared| {
                engine
                    .renegotiate(now, id, prepared)
                    .map_err(|e| e.to_string())
            });
        let applied = outcome.as_ref().ok().map(|_| offer);
        let cl = &mut self.driver.clients_mut()[c.0];
        if let Some(etag) = self.directory.finish_renegotiate(r.id, applied) {
            cl.etag = etag;
        }
        self.members_changed = true;
        cl.p.accept_answer(&outcome?)?;
        self.driver.wake(c.0);
        self.settle();
        Ok(())
    }

    // ------------------------------------------------------------ running

    /// Routes every engine output ([`Driver::settle`]), shard events into
    /// the control plane.
    pub(crate) fn settle(&mut self) {
        let Sim {
            driver,
            directory,
            control,
            members_changed,
            ..
        } = self;
        driver.settle(&mut |d, shard, ev| {
            on_control(directory, control, members_changed, d, shard, ev)
        });
    }

    /// The room directory (this node's, in a cluster).
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// The room directory, to change (a cluster's control plane: other
    /// nodes' members).
    pub(crate) fn directory_mut(&mut self) -> &mut Directory {
        &mut self.directory
    }

    /// Advances virtual time by `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until_time(end);
    }

    /// Advances virtual time to `end` ([`Driver::run_until_time`], shard
    /// events into the control plane).
    pub fn run_until_time(&mut self, end: Instant) {
        while self.next_judge <= end {
            let at = self.next_judge;
            self.advance(at);
            self.judge();
            self.next_judge = at + Duration::from_secs(1);
        }
        self.advance(end);
    }

    fn advance(&mut self, end: Instant) {
        let Sim {
            driver,
            directory,
            control,
            members_changed,
            ..
        } = self;
        driver.run_until_time(end, &mut |d, shard, ev| {
            on_control(directory, control, members_changed, d, shard, ev)
        });
    }

    /// Every participant's slots judged for the second that ends now.
    fn judge(&mut self) {
        let per_shard: Vec<Vec<_>> = self
            .driver
            .shards
            .iter()
            .map(|s| s.engine.participant_stats())
            .collect();
        let detail: HashMap<ParticipantId, _> = per_shard
            .iter()
            .flatten()
            .map(|st| (st.id, st.clone()))
            .collect();
        let now = self.driver.now;
        let totals: Vec<ShardTotals> = self
            .driver
            .shards
            .iter()
            .map(|s| ShardTotals {
                dwell: s.dwell,
                peer_hop: s.engine.peer_hop(),
                ..ShardTotals::default()
            })
            .collect();
        let seconds: Vec<ShardSecond> = self
            .shard_totals
            .iter()
            .zip(&totals)
            .map(|(start, end)| ShardSecond::between(0.0, start, end))
            .collect();
        self.shard_totals = totals;
        for (i, stats) in per_shard.iter().enumerate() {
            for st in stats {
                let _ = self
                    .board
                    .judge(now, ShardId(i), st, &detail, &self.directory, &seconds);
            }
        }
    }

    /// The verdict on each of the client's slots, as
    /// `GET …/diagnosis` would give it.
    pub fn diagnosis(&self, c: C) -> Vec<SlotOut> {
        self.board.view(self.client(c).id).unwrap_or_default()
    }

    /// Runs until `pred` holds (checked every 10 ms of virtual time) or
    /// `limit` passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut pred: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + limit;
        while self.now < end {
            if pred(self) {
                return true;
            }
            let next = (self.now + Duration::from_millis(10)).min(end);
            self.run_until_time(next);
        }
        pred(self)
    }

    // ------------------------------------------------------------ clients

    /// The client.
    pub fn client(&self, c: C) -> &SimClient {
        &self.driver.clients()[c.0]
    }

    /// The participant, to change what it does (speak, send an event, ask
    /// for a keyframe); it runs at the current instant.
    pub fn participant(&mut self, c: C) -> &mut Participant {
        self.driver.wake(c.0);
        &mut self.driver.clients_mut()[c.0].p
    }

    /// What the client observed.
    pub fn snapshot(&self, c: C) -> &Snapshot {
        self.client(c).p.snapshot()
    }

    /// Every packet the client received.
    pub fn packets(&self, c: C) -> &[RxPacket] {
        &self.client(c).rec.packets
    }

    /// The client's participant id as rosters and slot events spell it.
    pub fn id(&self, c: C) -> String {
        self.client(c).id.to_string()
    }

    /// Both directions of the client's link.
    pub fn link(&mut self, c: C) -> &mut net::Link {
        let addr = self.client(c).addr;
        self.driver.net.link_mut(addr)
    }

    /// Cut (or restore) the client's link.
    pub fn cut(&mut self, c: C, cut: bool) {
        self.link(c).cut = cut;
    }

    /// Speech on/off.
    pub fn set_speaking(&mut self, c: C, on: bool) {
        self.participant(c).set_speaking(on);
    }

    /// Data-channel events of `type` the client received.
    pub fn events(&self, c: C, ty: &str) -> Vec<serde_json::Value> {
        self.snapshot(c)
            .events_of_type(ty)
            .into_iter()
            .cloned()
            .collect()
    }

    /// The last `slots` event: slot mid → participant id shown.
    pub fn slots(&self, c: C) -> BTreeMap<String, Option<String>> {
        let mut m = BTreeMap::new();
        if let Some(ev) = self.events(c, "slots").last() {
            for s in ev["slots"].as_array().into_iter().flatten() {
                m.insert(
                    s["mid"].as_str().unwrap_or_default().to_string(),
                    s["participant"].as_str().map(str::to_string),
                );
            }
        }
        m
    }

    /// Names of the publishers whose packets reached the client's `kind`
    /// slots since `since`, by slot.
    pub fn sources_since(&self, c: C, kind: Kind, since: Instant) -> BTreeMap<String, Vec<String>> {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in self
            .packets(c)
            .iter()
            .filter(|p| p.kind == kind && p.at >= since)
        {
            let e = m.entry(p.slot.clone()).or_default();
            if let Some(s) = &p.source
                && !e.contains(s)
            {
                e.push(s.clone());
            }
        }
        m
    }

    /// Names of the clients whose packets reached the client's `kind` slots
    /// in the last `window`.
    pub fn showing(&self, c: C, kind: Kind, window: Duration) -> Vec<String> {
        let since = self.now.checked_sub(window).unwrap_or(self.start);
        let mut v: Vec<String> = self
            .sources_since(c, kind, since)
            .into_values()
            .flatten()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Shard events `Left` so far: (participant, reason).
    pub fn left_events(&self) -> Vec<(ParticipantId, LeaveReason)> {
        self.control
            .iter()
            .filter_map(|e| match &e.event {
                ShardEvent::Left { id, reason, .. } => Some((*id, *reason)),
                _ => None,
            })
            .collect()
    }

    /// Feeds a raw datagram to `shard` as if it came from `from` (hostile input).
    pub fn inject(&mut self, shard: usize, from: SocketAddr, data: &[u8]) {
        let Sim {
            driver,
            directory,
            control,
            members_changed,
            ..
        } = self;
        driver.inject(shard, None, from, data, &mut |d, shard, ev| {
            on_control(directory, control, members_changed, d, shard, ev)
        });
    }
}

// ------------------------------------------------------------ control plane

/// Sends a roster to these shards (the directory names them).
fn send_roster(d: &mut Driver<SimClient>, update: &RoomUpdate, shards: &[ShardId]) {
    for s in shards {
        d.shards[s.0].engine.apply_room(d.now, update.clone());
    }
}

/// Removes a member from the directory and sends its room's new roster
/// (also to the shard it left, which may host others).
fn control_remove(directory: &mut Directory, d: &mut Driver<SimClient>, id: ParticipantId) {
    if let Ok(left) = directory.leave(id)
        && let Some((update, shards)) = left.roster
    {
        send_roster(d, &update, &shards);
    }
}

/// A shard event, as the server's control thread takes it: logged, an
/// evicted member leaves the directory, changed lines go into the roster.
fn on_control(
    directory: &mut Directory,
    log: &mut Vec<ControlEvent>,
    members_changed: &mut bool,
    d: &mut Driver<SimClient>,
    shard: usize,
    event: ShardEvent,
) {
    log.push(ControlEvent {
        at: d.now,
        shard,
        event: event.clone(),
    });
    if matches!(
        event,
        ShardEvent::Left { .. } | ShardEvent::LinesChanged { .. } | ShardEvent::TrackState { .. }
    ) {
        *members_changed = true;
    }
    match event {
        ShardEvent::Left { id, reason, detail } => {
            if let Some(c) = d.clients_mut().iter_mut().find(|c| c.id == id) {
                c.evicted = Some(reason);
                c.evicted_detail = Some(detail);
            }
            control_remove(directory, d, id);
        }
        ShardEvent::LinesChanged { id, tracks, slots } => {
            if let Some((update, shards)) = directory.lines_changed(id, tracks, slots) {
                send_roster(d, &update, &shards);
            }
        }
        ShardEvent::TrackState { id, mid, state } => {
            if let Some((update, shards)) = directory.track_state(id, mid, state) {
                send_roster(d, &update, &shards);
            }
        }
        _ => {}
    }
}
