//! The data plane as the control thread sees it, whichever runs: the pinned
//! shards (`crates/server/src/shard`) or the work-stealing baseline
//! (`corelay-ws`, `--runtime work-stealing`).
//!
//! Owns:
//! - the interface between the control thread and a shard: what the control
//!   thread asks ([`ShardCommand`], through a [`ShardHandle`]) and what a
//!   shard tells it ([`ToControl`]: events, [`ShardReport`]s, its failure);
//! - [`DataPlane`], what a data plane offers the server: start from a
//!   spec, the handles the control thread drives, its end;
//! - the one command dispatch ([`apply`]): a command turned into the
//!   [`Engine`] calls it stands for, for the shard loop and the baseline's
//!   participant tasks alike, and the tests' shard failure
//!   ([`fail_if_injected`]) at the command it fails on;
//! - the I/O steps both loops share ([`io`]: the send step, the socket
//!   dwell, the I/O layer's counters).
//!
//! Must not: hold a loop, a thread, a socket or a channel of its own (each
//! data plane owns those), know the control thread's state, or touch the
//! engine's logic: it calls the `Engine`'s public entry points only.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]

pub mod io;

use std::net::SocketAddr;
use std::time::Instant;

use corelay_core::engine::TapChange;
use corelay_core::events::RoomEvent;
use corelay_core::faults::Faults;
use corelay_core::metrics::{Counters, LatencyHistogram, ParticipantStats};
use corelay_core::room::RoomUpdate;
use corelay_core::{
    Accepted, Engine, LeaveReason, OfferError, ParticipantId, RoomId, ShardEvent, ShardId,
};
use str0m::change::SdpOffer;
use tokio::sync::{mpsc, oneshot};

pub use crate::io::{IoCounters, micros, record_dwell, send_datagrams};

/// What the control thread asks of a shard.
pub enum ShardCommand {
    Add {
        id: ParticipantId,
        room: RoomId,
        name: String,
        accepted: Box<Accepted>,
        roster: RoomUpdate,
    },
    /// Take it out; its `bye` says `reason` (`Removed` or `Replaced`).
    Remove {
        id: ParticipantId,
        reason: LeaveReason,
    },
    Room(RoomUpdate),
    /// An offer the control thread validated and rehearsed: apply it whole.
    Renegotiate {
        id: ParticipantId,
        offer: Box<SdpOffer>,
        reply: oneshot::Sender<Result<String, OfferError>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
    /// A recording of `room` starts, changes its notice, or stops (issue
    /// 53): the shard's tap for it, and the `recording` event its members
    /// get.
    Recording {
        room: RoomId,
        change: TapChange,
        notice: RoomEvent,
    },
    /// The other nodes of the cluster, whole (`--cluster`): where their
    /// shards' relay sockets are. The shard loop's, not the engine's.
    Relay(Vec<RelayNode>),
}

/// Another node of the cluster, as a shard's relay reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayNode {
    /// The slot this node's control thread gave it: its shards are
    /// `ShardId::remote(slot, i)`.
    pub slot: usize,
    pub node_id: String,
    /// Its process's epoch (its relay keys').
    pub epoch: u64,
    /// Its shard 0's relay socket; shard `i`'s is at the port + `i`.
    pub relay_addr: SocketAddr,
    pub shards: usize,
}

/// A shard's figures, copied out as a value.
#[derive(Clone, Debug, Default)]
pub struct ShardReport {
    pub shard: ShardId,
    pub counters: Counters,
    pub participants: usize,
    pub rooms: usize,
    /// Share of wall time the shard thread used the CPU since the last report.
    pub busy: f64,
    pub loop_iterations: u64,
    /// Socket dwell: kernel receive time to our read (SO_TIMESTAMPNS).
    pub dwell: LatencyHistogram,
    /// Kernel receive time of a media packet to the return of the sendmmsg
    /// that carried its forwarded copies, for packets forwarded on their
    /// ingress shard...
    pub forward_local: LatencyHistogram,
    /// ...and for packets that crossed from a peer shard (one hop).
    pub forward_cross: LatencyHistogram,
    /// The cross-shard hop alone: how long media from peer shards waited
    /// (its receipt on the publisher's shard to its handling here), per
    /// message ([`corelay_core::Engine::peer_hop`]; needs no kernel
    /// timestamps, so it is kept even without `packet_metrics`).
    pub peer_hop: LatencyHistogram,
    /// Work per event-loop wake-up.
    pub iteration: LatencyHistogram,
    /// Per-participant figures, sent once a second (None in between).
    pub participants_detail: Option<Vec<ParticipantStats>>,
    /// Each relay link of the shard (`--cluster`): to another node's shard.
    pub relay_links: Vec<RelayLink>,
}

/// One relay link's figures: this shard to a shard of another node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayLink {
    /// The other node's shard (`ShardId::remote`).
    pub peer: ShardId,
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// Datagrams found missing on arrival (gaps in the peer's sequence).
    pub lost: u64,
    /// Datagrams sent again because the peer asked.
    pub resent: u64,
    /// The last ping's round trip, microseconds (0: none yet).
    pub rtt_us: u64,
}

/// What a shard sends to the control thread.
pub enum ToControl {
    Event(ShardEvent),
    Report(Box<ShardReport>),
    /// The shard thread stopped for good (a panic outside any participant,
    /// or a socket error).
    Failed {
        shard: ShardId,
        reason: String,
    },
}

/// The control thread's handle on a shard.
#[derive(Clone)]
pub struct ShardHandle {
    pub index: ShardId,
    /// The address clients are told to send media to (ICE candidate).
    pub advertised: SocketAddr,
    /// The ICE-TCP candidate's address: `advertised` but where the shards
    /// share one UDP port and ICE-TCP keeps a port per shard.
    pub advertised_tcp: SocketAddr,
    pub commands: mpsc::UnboundedSender<ShardCommand>,
}

/// A data plane the server can run under its control thread: the pinned
/// shards or the work-stealing baseline. The control thread reaches it only
/// through the [`ShardHandle`]s it gives back and hears from it only on the
/// [`ToControl`] channel its spec names.
pub trait DataPlane {
    /// What it needs to start: its sockets, the engines' settings, where its
    /// shards report.
    type Spec;

    /// Starts it (its threads or runtime, every shard's loop).
    fn start(spec: Self::Spec) -> std::io::Result<Self>
    where
        Self: Sized;

    /// The control thread's handle on each shard it sees, in shard order:
    /// the `i`th handle's `index` is `ShardId(i)`.
    fn handles(&self) -> Vec<ShardHandle>;

    /// How many cores one of those shards stands for: admission multiplies
    /// `--max-participants-per-shard` by it (1 for a pinned shard; the
    /// worker count for the baseline's one logical shard).
    fn cores_per_shard(&self) -> usize;

    /// Ends it, after the control thread's `Shutdown` commands: `clean` when
    /// every shard said it closed before the deadline (then what it started
    /// is waited for), else what still runs is left or stopped.
    fn finish(self, clean: bool);
}

/// What a command leaves its caller to do once the engine took it.
#[must_use]
pub enum Applied {
    /// Nothing.
    Done,
    /// A renegotiation's answer (or why there is none): the caller sends it
    /// ([`Answer::send`]) once whatever must precede it is done.
    Answer(Answer),
    /// The engine closed every connection (`Shutdown`): the caller stops
    /// and then says so on `done`.
    Shutdown(oneshot::Sender<()>),
    /// The cluster's other nodes: the caller's relay takes them.
    Relay(Vec<RelayNode>),
}

/// A renegotiation's outcome, not sent yet.
pub struct Answer {
    pub result: Result<String, OfferError>,
    reply: oneshot::Sender<Result<String, OfferError>>,
}

impl Answer {
    /// Sends it to the control thread (which may have stopped waiting).
    pub fn send(self) {
        let _ = self.reply.send(self.result);
    }
}

/// The one command dispatch: applies `cmd` to `engine` at `now` through the
/// engine's control entry points, for the shard loop and the work-stealing
/// participant tasks alike. What is left (an answer to send, a shutdown to
/// confirm) comes back in [`Applied`].
pub fn apply(engine: &mut Engine, now: Instant, cmd: ShardCommand) -> Applied {
    match cmd {
        ShardCommand::Add {
            id,
            room,
            name,
            accepted,
            roster,
        } => {
            engine.add_participant(now, id, room, name, *accepted, roster);
            Applied::Done
        }
        ShardCommand::Remove { id, reason } => {
            engine.remove_participant_for(now, id, reason);
            Applied::Done
        }
        ShardCommand::Room(update) => {
            engine.apply_room(now, update);
            Applied::Done
        }
        ShardCommand::Renegotiate { id, offer, reply } => Applied::Answer(Answer {
            result: engine.renegotiate(now, id, *offer),
            reply,
        }),
        ShardCommand::Shutdown { done } => {
            engine.close_all(now);
            Applied::Shutdown(done)
        }
        ShardCommand::Recording {
            room,
            change,
            notice,
        } => {
            engine.set_recording(now, room, change, notice);
            Applied::Done
        }
        ShardCommand::Relay(nodes) => Applied::Relay(nodes),
    }
}

/// The tests' shard failure ([`Faults`], `--test-fail-shard-room` in a
/// `fault-injection` build): the shard (or the work-stealing hub) panics
/// outside any participant when a join for that room reaches it. Nothing in
/// other builds.
pub fn fail_if_injected(faults: &Faults, cmd: &ShardCommand) {
    if let ShardCommand::Add { roster, .. } = cmd
        && faults.fails_shard(&roster.name)
    {
        #[allow(
            clippy::panic,
            reason = "the tests' fault injection: false but in a fault-injection build"
        )]
        {
            panic!("injected shard failure (--test-fail-shard-room)");
        }
    }
}
