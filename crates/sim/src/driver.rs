//! The engine-driving loop, in virtual time: the one loop that feeds
//! [`Engine`]s and their clients, shared by the simulation ([`crate::Sim`])
//! and the fuzz harness (crates/fuzz-harness).
//!
//! Owns the virtual clock (a start `Instant` plus advancing), the shards
//! (an engine and its socket address each), the clients' schedule (when each
//! [`Endpoint`] next runs, or that it no longer does), and the event loop:
//! datagrams due on the [`Net`] go to the engine or client they are
//! addressed to, due engine and client timers fire, every engine output is
//! routed (datagrams onto the network; peer messages over the lanes of
//! [`SimMesh`] into their shards, one hop, no delay; peer messages for
//! another node's shard ([`ShardId::is_remote`]) into [`Driver::relay_out`],
//! for a cluster's relay to carry (`Cluster`, feature `clients`); shard events to the
//! caller's control plane: an [`OnEvent`]). An engine is re-run no sooner than
//! [`MIN_STEP`] after its timer fired, a client no sooner than `MIN_STEP`
//! after it was polled, so that a timer that keeps asking for "now" cannot
//! spin the loop (each such engine timer is counted: [`Shard::still_due`]).
//! A shard can be stalled for a while ([`Driver::stall`], as a shard loop
//! busy elsewhere or descheduled): its datagrams wait in its socket, its
//! lanes and its timers until it resumes, and the socket dwell that costs
//! is recorded as the server's shard records it ([`Shard::dwell`]).
//!
//! Must not: touch engine internals (only `corelay_core`'s public API),
//! decide anything a control plane decides (rooms, rosters, who joins or
//! leaves: shard events go to the caller's [`OnEvent`] in the order the
//! shards emitted them), know what a client is beyond [`Endpoint`], draw
//! random numbers (the network's are its own, seeded), read the wall
//! clock, open sockets, spawn threads, or sleep.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelay_core::metrics::LatencyHistogram;
use corelay_core::{Engine, PeerMsg, ShardEvent, ShardId};

use crate::mesh::SimMesh;
use crate::net::{Datagram, Net};

/// A duration in whole microseconds, saturating (histogram samples).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Smallest step a client or engine is re-run after (guards against a
/// timeout that keeps asking for "now").
pub const MIN_STEP: Duration = Duration::from_micros(100);

/// A client the driver runs: sans-I/O, in virtual time (the simulation's
/// participants, the fuzz harness's str0m clients).
pub trait Endpoint {
    /// The address it sends from and receives on (its link on the [`Net`]).
    fn addr(&self) -> SocketAddr;
    /// A datagram from `from` arrived at `now`.
    fn receive(&mut self, now: Instant, from: SocketAddr, data: &[u8]);
    /// Its timer fired at `now` (it may run early: it asked for no later).
    fn timeout(&mut self, now: Instant);
    /// Hands every datagram it has to send to `send` (destination, bytes)
    /// and says when it next wants [`timeout`](Self::timeout); `None`: never
    /// again (it failed or closed: the driver stops running it).
    fn poll(&mut self, now: Instant, send: &mut dyn FnMut(SocketAddr, &[u8])) -> Option<Instant>;
}

/// Where the driver hands shard events: the caller's control plane, with
/// the driver (to act on shards and clients) and the shard's index.
pub type OnEvent<'a, E> = &'a mut dyn FnMut(&mut Driver<E>, usize, ShardEvent);

/// One shard: its engine and its socket address.
pub struct Shard {
    /// The engine.
    pub engine: Engine,
    /// The address clients send to.
    pub addr: SocketAddr,
    not_before: Instant,
    /// Times `poll_timeout` still said "now" right after `handle_timeout(now)`.
    pub still_due: u64,
    /// Socket dwell (arrival to handling) of every datagram it read, as the
    /// server's shard records it: 0 but after a [`Driver::stall`].
    pub dwell: LatencyHistogram,
    /// Stalled until then ([`Driver::stall`]); its datagrams wait in
    /// `backlog` meanwhile, in arrival order, each with its arrival.
    stalled_until: Option<Instant>,
    backlog: Vec<Datagram>,
}

/// The clock, the shards, the clients, the network and the lanes between
/// shards, and the loop that runs them (see the module's top).
pub struct Driver<E> {
    /// Virtual start.
    pub start: Instant,
    /// Virtual now.
    pub now: Instant,
    /// The shards.
    pub shards: Vec<Shard>,
    /// The network.
    pub net: Net,
    /// The lanes between shards ([`crate::mesh`]).
    pub mesh: SimMesh,
    /// Peer messages for other nodes' shards, in the order the shards
    /// emitted them: (sending shard, recipient, message). Taken by a
    /// cluster's relay (`Cluster`, feature `clients`); a lone node's engines never
    /// address another node, so nothing gathers here then.
    pub relay_out: Vec<(usize, ShardId, PeerMsg)>,
    clients: Vec<E>,
    /// When each client next runs (`None`: no longer driven).
    wakes: Vec<Option<Instant>>,
}

impl<E: Endpoint> Driver<E> {
    /// A driver at `start` with one shard per engine, at its address, over
    /// `net`; no clients.
    pub fn new(start: Instant, shards: Vec<(Engine, SocketAddr)>, net: Net) -> Driver<E> {
        Driver {
            start,
            now: start,
            mesh: SimMesh::new(shards.len()),
            shards: shards
                .into_iter()
                .map(|(engine, addr)| Shard {
                    engine,
                    addr,
                    not_before: start,
                    still_due: 0,
                    dwell: LatencyHistogram::default(),
                    stalled_until: None,
                    backlog: Vec::new(),
                })
                .collect(),
            net,
            relay_out: Vec::new(),
            clients: Vec::new(),
            wakes: Vec::new(),
        }
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    // ------------------------------------------------------------ clients

    /// Adds a client, to run at the current instant; returns its index.
    pub fn add_client(&mut self, client: E) -> usize {
        self.clients.push(client);
        self.wakes.push(Some(self.now));
        self.clients.len() - 1
    }

    /// Every client, by index.
    pub fn clients(&self) -> &[E] {
        &self.clients
    }

    /// Every client, by index, to change what they do (a changed client
    /// runs when woken: [`wake`](Self::wake)).
    pub fn clients_mut(&mut self) -> &mut [E] {
        &mut self.clients
    }

    /// Client `i` runs at the current instant (it has something new to
    /// send), unless it is no longer driven.
    pub fn wake(&mut self, i: usize) {
        if let Some(w) = self.wakes.get_mut(i).filter(|w| w.is_some()) {
            *w = Some(self.now);
        }
    }

    /// Client `i` is no longer run: its timers stop and what arrives for it
    /// is dropped.
    pub fn stop(&mut self, i: usize) {
        if let Some(w) = self.wakes.get_mut(i) {
            *w = None;
        }
    }

    /// Whether client `i` is still run.
    pub fn driven(&self, i: usize) -> bool {
        self.wakes.get(i).is_some_and(Option::is_some)
    }

    /// Shard `shard` stalls for `d` from now, as a shard loop that is busy
    /// elsewhere or descheduled: it reads no datagram, drains none of its
    /// lanes and runs no timer until then. What arrived meanwhile waits (in
    /// its socket, in its lanes: full lanes drop media as the server's do)
    /// and is handled when it resumes, its socket dwell recorded.
    pub fn stall(&mut self, shard: usize, d: Duration) {
        let until = self.now + d;
        if let Some(sh) = self.shards.get_mut(shard) {
            sh.stalled_until = Some(sh.stalled_until.map_or(until, |u| u.max(until)));
            sh.not_before = sh.not_before.max(until);
            self.mesh.hold(shard, true);
        }
    }

    /// Shards whose stall is over resume: their socket's backlog is read
    /// (its dwell recorded), their lanes drained.
    fn resume_stalled(&mut self, on_event: OnEvent<'_, E>) {
        let now = self.now;
        for s in 0..self.shards.len() {
            if self.shards[s].stalled_until.is_none_or(|u| u > now) {
                continue;
            }
            self.shards[s].stalled_until = None;
            self.mesh.hold(s, false);
            let backlog = std::mem::take(&mut self.shards[s].backlog);
            let sh = &mut self.shards[s];
            for d in backlog {
                sh.dwell
                    .record_us(micros(now.saturating_duration_since(d.at)));
                sh.engine.handle_datagram(now, None, d.from, d.to, &d.data);
            }
            self.settle(on_event);
        }
    }

    // ------------------------------------------------------------ event loop

    /// Feeds a raw datagram to `shard` as if it came from `from` (with a
    /// kernel receive stamp, as the shard passes one for media), then
    /// routes what the engines have to say ([`settle`](Self::settle)).
    pub fn inject(
        &mut self,
        shard: usize,
        stamp: Option<Duration>,
        from: SocketAddr,
        data: &[u8],
        on_event: OnEvent<'_, E>,
    ) {
        let to = self.shards[shard].addr;
        self.shards[shard]
            .engine
            .handle_datagram(self.now, stamp, from, to, data);
        self.settle(on_event);
    }

    /// Runs until every engine output is routed: datagrams onto the network,
    /// peer messages into their shards, shard events to `on_event`.
    pub fn settle(&mut self, on_event: OnEvent<'_, E>) {
        for _ in 0..10_000 {
            let mut work = false;
            for s in 0..self.shards.len() {
                let now = self.now;
                self.shards[s].engine.finish_batch();
                let out = self.shards[s].engine.outputs();
                out.forwarded.clear();
                let mut peers = std::mem::take(&mut out.peers);
                let control = std::mem::take(&mut out.control);
                work |= !out.transmits.is_empty() || !control.is_empty();
                // Drained in place: the engine keeps the vector's capacity.
                for t in out.transmits.drain(..) {
                    self.net.send(
                        now,
                        t.destination,
                        false,
                        t.source,
                        t.destination,
                        &t.contents,
                    );
                }
                if peers.iter().any(|(to, _)| to.is_remote()) {
                    // Another node's shard: over the relay, now (as the
                    // server's shard loop sends it), never through the mesh.
                    let (remote, local): (Vec<_>, Vec<_>) =
                        peers.into_iter().partition(|(to, _)| to.is_remote());
                    peers = local;
                    self.relay_out
                        .extend(remote.into_iter().map(|(to, m)| (s, to, m)));
                }
                work |= self.mesh.route(s, peers);
                for to in 0..self.shards.len() {
                    for msg in self.mesh.drain(to) {
                        self.shards[to].engine.handle_peer(self.now, msg);
                    }
                }
                for ev in control {
                    on_event(self, s, ev);
                }
            }
            if !work {
                return;
            }
        }
    }

    /// Polls client `i` (if still driven): what it sends goes onto its
    /// link, and it next runs when it asks, `MIN_STEP` from now at the
    /// earliest.
    fn poll_client(&mut self, i: usize) {
        let now = self.now;
        if !self.driven(i) {
            return;
        }
        let net = &mut self.net;
        let c = &mut self.clients[i];
        let addr = c.addr();
        let wake = c.poll(now, &mut |dest, data| {
            net.send(now, addr, true, addr, dest, data);
        });
        self.wakes[i] = wake.map(|w| w.max(now + MIN_STEP));
    }

    /// When something next happens: a client's or engine's timer, an arrival.
    pub fn next_event(&self) -> Option<Instant> {
        let clients = self.wakes.iter().filter_map(|w| *w);
        let shards = self
            .shards
            .iter()
            .filter_map(|s| s.engine.poll_timeout().map(|t| t.max(s.not_before)));
        let resumes = self.shards.iter().filter_map(|s| s.stalled_until);
        clients
            .chain(shards)
            .chain(resumes)
            .chain(self.net.next_at())
            .min()
    }

    /// One step at `self.now`: arrivals, engine timers, client timers.
    fn step(&mut self, on_event: OnEvent<'_, E>) {
        let now = self.now;
        self.resume_stalled(on_event);
        while let Some(d) = self.net.pop_due(now) {
            if let Some(s) = self.shards.iter().position(|s| s.addr == d.to) {
                let sh = &mut self.shards[s];
                if sh.stalled_until.is_some() {
                    sh.backlog.push(d);
                    continue;
                }
                sh.dwell.record_us(0);
                sh.engine.handle_datagram(now, None, d.from, d.to, &d.data);
                self.settle(on_event);
            } else if let Some(i) = self.clients.iter().position(|c| c.addr() == d.to) {
                if !self.driven(i) {
                    continue;
                }
                self.clients[i].receive(now, d.from, &d.data);
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
                self.settle(on_event);
            }
        }
        for i in 0..self.clients.len() {
            if self.wakes[i].is_some_and(|w| w <= now) {
                self.clients[i].timeout(now);
                self.poll_client(i);
            }
        }
    }

    /// Advances virtual time by `d`.
    pub fn run_for(&mut self, d: Duration, on_event: OnEvent<'_, E>) {
        let end = self.now + d;
        self.run_until_time(end, on_event);
    }

    /// Advances virtual time to `end` (runs what is due now when `end` has
    /// passed), event by event.
    pub fn run_until_time(&mut self, end: Instant, on_event: OnEvent<'_, E>) {
        loop {
            match self.next_event() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.step(on_event);
                }
                _ => {
                    self.now = self.now.max(end);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelay_core::{RtcSettings, ShardId};

    /// Asks to run every `every`; counts its runs and what it received.
    struct Ticker {
        addr: SocketAddr,
        every: Duration,
        ticks: Vec<Instant>,
        got: Vec<(Instant, SocketAddr, Vec<u8>)>,
        send_to: Option<SocketAddr>,
    }

    impl Endpoint for Ticker {
        fn addr(&self) -> SocketAddr {
            self.addr
        }
        fn receive(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
            self.got.push((now, from, data.to_vec()));
        }
        fn timeout(&mut self, now: Instant) {
            self.ticks.push(now);
        }
        fn poll(
            &mut self,
            now: Instant,
            send: &mut dyn FnMut(SocketAddr, &[u8]),
        ) -> Option<Instant> {
            if let Some(to) = self.send_to.take() {
                send(to, b"hello");
            }
            Some(now + self.every)
        }
    }

    fn ticker(port: u16, every: Duration) -> Ticker {
        Ticker {
            addr: SocketAddr::from(([10, 0, 0, 1], port)),
            every,
            ticks: Vec::new(),
            got: Vec::new(),
            send_to: None,
        }
    }

    fn driver() -> Driver<Ticker> {
        let server = SocketAddr::from(([10, 99, 0, 1], 4000));
        let engine = Engine::new(ShardId(0), RtcSettings::default());
        Driver::new(Instant::now(), vec![(engine, server)], Net::new(1))
    }

    #[test]
    fn clients_run_on_their_timers_until_stopped_never_faster_than_min_step() {
        let mut d = driver();
        let mut none = |_: &mut Driver<Ticker>, _: usize, _: ShardEvent| {};
        let slow = d.add_client(ticker(1, Duration::from_millis(10)));
        let fast = d.add_client(ticker(2, Duration::ZERO));
        d.run_for(Duration::from_millis(100), &mut none);
        assert_eq!(d.elapsed(), Duration::from_millis(100));
        // At 0, 10, ..., 100 ms; the one that asks for "now" every 100 µs.
        assert_eq!(d.clients()[slow].ticks.len(), 11);
        assert_eq!(d.clients()[fast].ticks.len(), 1001);
        d.stop(slow);
        d.wake(slow);
        assert!(!d.driven(slow));
        d.run_for(Duration::from_millis(100), &mut none);
        assert_eq!(d.clients()[slow].ticks.len(), 11);
        assert_eq!(d.clients()[fast].ticks.len(), 2001);
    }

    #[test]
    fn a_datagram_between_clients_arrives_after_its_links_delay() {
        let mut d = driver();
        let mut none = |_: &mut Driver<Ticker>, _: usize, _: ShardEvent| {};
        let a = d.add_client(ticker(1, Duration::from_secs(1)));
        let b = d.add_client(ticker(2, Duration::from_secs(1)));
        let to = d.clients()[b].addr;
        d.clients_mut()[a].send_to = Some(to);
        d.run_for(Duration::from_millis(20), &mut none);
        // Over `a`'s link only (up, 5 ms by default).
        let got = &d.clients()[b].got;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0 - d.start, Duration::from_millis(5));
        assert_eq!(got[0].2, b"hello");
        // A stranger's junk to the engine: it answers nothing.
        let stranger = SocketAddr::from(([192, 0, 2, 7], 40000));
        d.inject(0, None, stranger, &[0x42; 40], &mut none);
        assert_eq!(d.net.next_at(), None);
    }
}
