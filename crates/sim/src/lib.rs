//! corelay-sim: a deterministic simulation that tests the engine in
//! milliseconds. N sans-I/O [`corelay_client::Participant`]s (real str0m
//! clients: full ICE, DTLS, SRTP, SCTP) talk to one [`Engine`] per shard over
//! a simulated network ([`net`]), all in virtual time: a start `Instant`
//! plus advancing; nothing sleeps and nothing reads the wall clock except to
//! take the start instant.
//!
//! Owns the virtual clock, the event loop that feeds clients and engines,
//! routing between shards (`PeerMsg`, one hop, no delay, over the server's
//! two lanes per shard pair: [`mesh`]), and a tiny control
//! plane that does what the server's control thread does for joins, leaves,
//! renegotiations and shard events. Rooms, members and rosters (as
//! [`RoomUpdate`] values) are the server's own room directory
//! ([`corelay_core::directory`], without limits), placing each join on the
//! shard the test names; the sim's [`Ids`] count participant ids from 1.
//! Must not: touch engine internals (only `corelay_core`'s public API),
//! keep a directory of its own, open sockets, spawn threads, or sleep.
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

pub mod mesh;
pub mod net;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use corelay_client::stats::Received;
use corelay_client::{Clock, Kind, Observer, Participant, ParticipantConfig, Snapshot};
use corelay_core::directory::{Admission, Directory, Flavor, Ids, Limits, NewMember, RoomError};
use corelay_core::offer::{accept_offer, check_renegotiation};
use corelay_core::room::RoomUpdate;
use corelay_core::{Engine, LeaveReason, ParticipantId, PeerMsg, RtcSettings, ShardEvent, ShardId};

pub use corelay_client;
pub use corelay_core;
pub use mesh::SimMesh;
pub use net::{DirStats, LinkParams, Net};

/// What virtual CLOCK_MONOTONIC reads at the start instant (1000 s: stamps
/// are plausible and latencies never underflow).
pub const START_NS: u64 = 1_000_000_000_000;
/// Smallest step a participant or engine is re-run after (guards against a
/// timeout that keeps asking for "now").
const MIN_STEP: Duration = Duration::from_micros(100);

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
    /// When it next wants `handle_timeout` (`None`: no longer driven).
    wake: Option<Instant>,
    /// Left on its own ([`Sim::leave`]).
    pub left: bool,
    /// Removed by its shard, and why.
    pub evicted: Option<LeaveReason>,
    /// The shard's explanation of the eviction (what the server logs).
    pub evicted_detail: Option<String>,
    /// The first STUN binding request it sent (to replay from elsewhere).
    pub first_stun: Option<Vec<u8>>,
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

/// One shard: its engine and its socket address.
pub struct Shard {
    /// The engine.
    pub engine: Engine,
    /// The address clients send to.
    pub addr: SocketAddr,
    not_before: Instant,
    /// Times `poll_timeout` still said "now" right after `handle_timeout(now)`.
    pub still_due: u64,
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

/// The whole simulation.
pub struct Sim {
    /// Virtual start.
    pub start: Instant,
    /// Virtual now.
    pub now: Instant,
    /// Settings every shard and offer uses.
    pub settings: RtcSettings,
    /// The shards.
    pub shards: Vec<Shard>,
    /// The clients, by [`C`].
    pub clients: Vec<SimClient>,
    /// The network.
    pub net: Net,
    /// Every shard event, in order.
    pub control: Vec<ControlEvent>,
    /// The lanes between shards ([`mesh`]).
    pub mesh: SimMesh,
    /// The room directory, as the server's control thread keeps it.
    directory: Directory,
    ids: Counted,
    rng: fastrand::Rng,
    /// Link parameters new clients get.
    pub default_link: LinkParams,
}

impl Sim {
    /// A simulation with `shards` engines and the given settings; `seed`
    /// drives the network and the clients' media.
    pub fn new(seed: u64, shards: usize, settings: RtcSettings) -> Sim {
        // str0m draws its ids (mids, SSRCs, the clients' ICE credentials)
        // from this thread's fastrand generator: seeded, they repeat too.
        fastrand::seed(seed);
        let start = Instant::now();
        Sim {
            start,
            now: start,
            shards: (0..shards)
                .map(|i| Shard {
                    engine: Engine::new(ShardId(i), settings.clone()),
                    addr: SocketAddr::from((Ipv4Addr::new(10, 99, 0, 1), 4000 + i as u16)),
                    not_before: start,
                    still_due: 0,
                })
                .collect(),
            settings,
            clients: Vec::new(),
            net: Net::new(seed),
            control: Vec::new(),
            mesh: SimMesh::new(shards),
            directory: Directory::new(Limits::unlimited(), shards),
            ids: Counted { next: 1 },
            rng: fastrand::Rng::with_seed(seed ^ 0x5eed),
            default_link: LinkParams::default(),
        }
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
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
        let n = self.clients.len() as u16;
        let addr = SocketAddr::from((Ipv4Addr::new(10, 1, (n >> 8) as u8, n as u8), 5000));
        let server = self.shards.get(shard).ok_or("no such shard")?.addr;
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
        let link = self.net.link_mut(addr);
        link.up.params = self.default_link.clone();
        link.down.params = self.default_link.clone();
        self.clients.push(SimClient {
            name: name.clone(),
            addr,
            p,
            id,
            shard,
            room: room.to_string(),
            resource: a.resource.clone(),
            etag: a.etag.clone(),
            rec: Recorder::default(),
            wake: Some(now),
            left: false,
            evicted: None,
            evicted_detail: None,
            first_stun: None,
        });
        self.shards[shard].engine.add_participant(
            now,
            id,
            a.room,
            a.name,
            accepted,
            a.roster.clone(),
        );
        self.send_roster(&a.roster, &a.notify);
        self.settle();
        Ok(C(self.clients.len() - 1))
    }

    /// The participant leaves (API DELETE): its shard removes it, the
    /// roster goes to the room's shards, and the client stops.
    pub fn leave(&mut self, c: C) {
        let now = self.now;
        let cl = &mut self.clients[c.0];
        cl.left = true;
        cl.wake = None;
        cl.p.close();
        let (id, shard) = (cl.id, cl.shard);
        self.shards[shard].engine.remove_participant(now, id);
        self.control_remove(id);
        self.settle();
    }

    /// The server removes the participant (an admin's DELETE) while its
    /// client goes on: it hears why on the data channel, then DTLS closes.
    pub fn remove(&mut self, c: C) {
        let now = self.now;
        let (id, shard) = (self.clients[c.0].id, self.clients[c.0].shard);
        self.shards[shard].engine.remove_participant(now, id);
        self.control_remove(id);
        self.settle();
    }

    /// Renegotiation (PATCH): the client adds recvonly slots; the offer is
    /// marked in flight in the directory and rehearsed like the control
    /// thread does, then applied on the shard; the directory records the
    /// outcome (the offer in force, the ETag).
    /// A refusal leaves the client with its offer pending (no rollback):
    /// a test that expects one should not go on with that client.
    pub fn add_slots(&mut self, c: C, video: usize, audio: usize) -> Result<(), String> {
        let now = self.now;
        let cl = &mut self.clients[c.0];
        let offer = cl.p.add_slots(video, audio)?;
        let r = self
            .directory
            .begin_renegotiate(&cl.room, &cl.resource, Some(&cl.etag))
            .map_err(|e| e.to_string())?;
        let engine = &mut self.shards[cl.shard].engine;
        let outcome = check_renegotiation(&self.settings, now, &r.previous, &offer, &r.codecs)
            .map_err(|e| e.to_string())
            .and_then(|prepared| {
                engine
                    .renegotiate(now, cl.id, prepared)
                    .map_err(|e| e.to_string())
            });
        let applied = outcome.as_ref().ok().map(|_| offer);
        if let Some(etag) = self.directory.finish_renegotiate(r.id, applied) {
            cl.etag = etag;
        }
        cl.p.accept_answer(&outcome?)?;
        cl.wake = Some(now);
        self.settle();
        Ok(())
    }

    /// Sends a roster to these shards (the directory names them).
    fn send_roster(&mut self, update: &RoomUpdate, shards: &[ShardId]) {
        for s in shards {
            self.shards[s.0].engine.apply_room(self.now, update.clone());
        }
    }

    /// Removes a member from the directory and sends its room's new roster
    /// (also to the shard it left, which may host others).
    fn control_remove(&mut self, id: ParticipantId) {
        if let Ok(d) = self.directory.leave(id)
            && let Some((update, shards)) = d.roster
        {
            self.send_roster(&update, &shards);
        }
    }

    fn on_control(&mut self, shard: usize, event: ShardEvent) {
        self.control.push(ControlEvent {
            at: self.now,
            shard,
            event: event.clone(),
        });
        match event {
            ShardEvent::Left { id, reason, detail } => {
                if let Some(c) = self.clients.iter_mut().find(|c| c.id == id) {
                    c.evicted = Some(reason);
                    c.evicted_detail = Some(detail);
                }
                self.control_remove(id);
            }
            ShardEvent::LinesChanged { id, tracks, slots } => {
                if let Some((update, shards)) = self.directory.lines_changed(id, tracks, slots) {
                    self.send_roster(&update, &shards);
                }
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------ event loop

    /// Runs until every engine output is routed: datagrams onto the network,
    /// peer messages into their shards, shard events into the control plane.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut work = false;
            for s in 0..self.shards.len() {
                let now = self.now;
                self.shards[s].engine.finish_batch();
                let out = self.shards[s].engine.outputs();
                let transmits = std::mem::take(&mut out.transmits);
                out.forwarded.clear();
                let peers = std::mem::take(&mut out.peers);
                let control = std::mem::take(&mut out.control);
                work |= !transmits.is_empty() || !control.is_empty();
                for t in transmits {
                    self.net.send(
                        now,
                        t.destination,
                        false,
                        t.source,
                        t.destination,
                        &t.contents,
                    );
                }
                work |= self.mesh.route(s, peers);
                for to in 0..self.shards.len() {
                    for msg in self.mesh.drain(to) {
                        self.deliver_peer(ShardId(to), msg);
                    }
                }
                for ev in control {
                    self.on_control(s, ev);
                }
            }
            if !work {
                return;
            }
        }
    }

    fn deliver_peer(&mut self, to: ShardId, msg: PeerMsg) {
        if let Some(s) = self.shards.get_mut(to.0) {
            s.engine.handle_peer(self.now, msg);
        }
    }

    fn poll_client(&mut self, i: usize) {
        let now = self.now;
        let net = &mut self.net;
        let c = &mut self.clients[i];
        if c.wake.is_none() {
            return;
        }
        let addr = c.addr;
        c.rec.now = Some(now);
        let first_stun = &mut c.first_stun;
        let wake = c.p.poll_output(now, &mut c.rec, &mut |dest, data| {
            if first_stun.is_none() && data.len() >= 20 && data[0..2] == [0, 1] {
                *first_stun = Some(data.to_vec());
            }
            net.send(now, addr, true, addr, dest, data);
        });
        c.wake = Some(wake.max(now + MIN_STEP));
    }

    fn next_event(&self) -> Option<Instant> {
        let clients = self.clients.iter().filter_map(|c| c.wake);
        let shards = self
            .shards
            .iter()
            .filter_map(|s| s.engine.poll_timeout().map(|t| t.max(s.not_before)));
        clients.chain(shards).chain(self.net.next_at()).min()
    }

    /// One step at `self.now`: arrivals, engine timers, client timers.
    fn step(&mut self) {
        let now = self.now;
        while let Some(d) = self.net.pop_due(now) {
            if let Some(s) = self.shards.iter().position(|s| s.addr == d.to) {
                self.shards[s]
                    .engine
                    .handle_datagram(now, None, d.from, d.to, &d.data);
                self.settle();
            } else if let Some(i) = self.clients.iter().position(|c| c.addr == d.to) {
                let c = &mut self.clients[i];
                if c.wake.is_none() {
                    continue;
                }
                c.rec.now = Some(now);
                c.p.handle_datagram(now, d.from, &d.data, &mut c.rec);
                self.poll_client(i);
            }
        }
        for s in 0..self.shards.len() {
            let sh = &mut self.shards[s];
            if sh
                .engine
                .poll_timeout()
                .is_some_and(|t| t <= now && sh.not_before <= now)
            {
                sh.engine.handle_timeout(now);
                sh.not_before = now + MIN_STEP;
                if sh.engine.poll_timeout().is_some_and(|t| t <= now) {
                    // A driver that trusted poll_timeout would spin here.
                    sh.still_due += 1;
                }
                self.settle();
            }
        }
        for i in 0..self.clients.len() {
            let c = &mut self.clients[i];
            if c.wake.is_some_and(|w| w <= now) {
                c.rec.now = Some(now);
                c.p.handle_timeout(now, &mut c.rec);
                self.poll_client(i);
            }
        }
    }

    /// Advances virtual time by `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until_time(end);
    }

    /// Advances virtual time to `end`.
    pub fn run_until_time(&mut self, end: Instant) {
        loop {
            match self.next_event() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.step();
                }
                _ => {
                    self.now = self.now.max(end);
                    return;
                }
            }
        }
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
        &self.clients[c.0]
    }

    /// The participant, to change what it does (speak, send an event, ask
    /// for a keyframe); it runs at the current instant.
    pub fn participant(&mut self, c: C) -> &mut Participant {
        let cl = &mut self.clients[c.0];
        if cl.wake.is_some() {
            cl.wake = Some(self.now);
        }
        &mut cl.p
    }

    /// What the client observed.
    pub fn snapshot(&self, c: C) -> &Snapshot {
        self.clients[c.0].p.snapshot()
    }

    /// Every packet the client received.
    pub fn packets(&self, c: C) -> &[RxPacket] {
        &self.clients[c.0].rec.packets
    }

    /// The client's participant id as rosters and slot events spell it.
    pub fn id(&self, c: C) -> String {
        self.clients[c.0].id.to_string()
    }

    /// Both directions of the client's link.
    pub fn link(&mut self, c: C) -> &mut net::Link {
        let addr = self.clients[c.0].addr;
        self.net.link_mut(addr)
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
        let to = self.shards[shard].addr;
        self.shards[shard]
            .engine
            .handle_datagram(self.now, None, from, to, data);
        self.settle();
    }
}
