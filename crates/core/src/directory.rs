//! The room directory: every room and its members, placement of
//! participants on shards, admission control (rooms, participants per room,
//! shard capacity and load, failed shards), one seat per identity, rosters
//! as the shards get them ([`RoomUpdate`]), ETags and the in-flight mark of
//! a renegotiation. The server's control thread keeps one
//! (`crates/server/src/control/rooms.rs` wraps it), and so does the
//! simulator's control plane (`crates/sim`), so both place and roster alike.
//!
//! Plain data and decisions only. Must not: know HTTP (errors are
//! [`RoomError`], with the API's stable codes; the server maps them to
//! statuses), hold channels to the shards (methods return what the shards
//! must be told, the caller tells them), build a str0m `Rtc` (offers are
//! accepted and rehearsed by the caller before it asks for admission), read
//! a clock (a member's join time is [`NewMember::joined`]) or draw
//! randomness (a newcomer's public id and resource capability come from the
//! caller's [`Ids`]: the server's from the OS, the simulator's counted, so
//! its runs repeat). It imports `ids`, `offer` and `room`; none of them
//! imports it.
//!
//! One seat per identity: with authentication, a room holds at most one
//! member per (identity, [`Flavor`]). A join whose token's `sub` already
//! holds that seat replaces the member holding it, in the same admission
//! ([`Admitted::replaced`]): one token can hold at most three seats of a
//! room (a call, a WHIP publisher, a WHEP viewer), however often it joins.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Instant;

use serde::Serialize;
use str0m::media::Mid;

use crate::ids::{ParticipantId, RoomId, ShardId};
use crate::offer::{MediaLine, OfferError, VideoCodec};
use crate::room::{Departed, MemberInfo, RoomUpdate, TrackState, state_of};

/// How a participant joined: the API it must be addressed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Participant,
    Whip,
    Whep,
}

/// Admission limits (the server's `--max-*` options).
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_participants_per_shard: usize,
    pub max_shard_load: f64,
    pub max_participants_per_room: usize,
    pub max_rooms: usize,
}

impl Limits {
    /// No limit at all (the simulator's: its tests place by hand).
    pub fn unlimited() -> Self {
        Limits {
            max_participants_per_shard: usize::MAX,
            max_shard_load: f64::INFINITY,
            max_participants_per_room: usize::MAX,
            max_rooms: usize::MAX,
        }
    }
}

/// Where a newcomer's ids come from: the directory draws no randomness
/// itself. The server draws both from the OS and `fastrand`
/// (`crates/server/src/control/rooms.rs`); the simulator counts, so that
/// its runs repeat.
pub trait Ids {
    /// A candidate public id (rosters, logs); drawn again while a member
    /// holds it.
    fn participant(&mut self) -> ParticipantId;
    /// The secret part of a resource URL: a capability, unguessable in the
    /// server. Drawn before the id.
    fn resource(&mut self) -> Result<String, RoomError>;
}

/// Why the directory refused a request. [`RoomError::code`] is the stable
/// error code of the API; `Display` is the human message.
#[derive(Debug, Clone, PartialEq)]
pub enum RoomError {
    /// The room name breaks [`valid_room_name`].
    BadRoomName,
    /// The room has `members`, the most allowed.
    RoomFull { room: String, members: usize },
    /// `open` rooms are open, the most allowed.
    TooManyRooms { open: usize },
    /// No shard can take one more participant: all are full (`full`), or
    /// every one with room is busier than `max_load`.
    NoCapacity {
        shards: usize,
        per_shard: usize,
        max_load: f64,
        full: bool,
    },
    /// No such participant resource in `room` (the message does not echo
    /// the resource id: it is a secret).
    UnknownResource { room: String },
    /// No participant with this public id.
    UnknownParticipant(ParticipantId),
    /// The participant left while its request was under way.
    LeftMeanwhile,
    /// A PATCH without `If-Match` (or with `*`).
    PreconditionRequired,
    /// `If-Match` is not the current ETag.
    EtagMismatch { current: String },
    /// Another renegotiation of the participant is on its way.
    RenegotiationInProgress,
    /// Every shard a join was placed on stopped fitting before its offer
    /// was accepted for it (shards failing or filling meanwhile).
    PlacementUnsettled,
    /// The participant's shard thread stopped.
    ShardStopped,
    /// The participant's shard did not answer in time.
    ShardSilent,
    /// No randomness for a capability ([`Ids::resource`]).
    NoRandomness,
    /// Placement chose a shard the control thread has no handle on (a bug).
    NoShard,
    /// The offer was refused (parse, limits, codec, rehearsal, or by the shard).
    Offer(OfferError),
}

impl RoomError {
    /// The stable error code of the API.
    pub fn code(&self) -> &'static str {
        match self {
            RoomError::BadRoomName => "bad_room_name",
            RoomError::RoomFull { .. } => "room_full",
            RoomError::TooManyRooms { .. } => "too_many_rooms",
            RoomError::NoCapacity { .. } | RoomError::PlacementUnsettled => "no_capacity",
            RoomError::UnknownResource { .. }
            | RoomError::UnknownParticipant(_)
            | RoomError::LeftMeanwhile => "not_found",
            RoomError::PreconditionRequired => "precondition_required",
            RoomError::EtagMismatch { .. } => "etag_mismatch",
            RoomError::RenegotiationInProgress => "renegotiation_in_progress",
            RoomError::ShardStopped | RoomError::ShardSilent => "shard_unavailable",
            RoomError::NoRandomness | RoomError::NoShard => "internal",
            RoomError::Offer(e) => e.code(),
        }
    }
}

impl fmt::Display for RoomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoomError::BadRoomName => f.write_str(
                "room names are 1-64 characters of A-Z, a-z, 0-9, '-', '_' and '.', starting with a letter or digit",
            ),
            RoomError::RoomFull { room, members } => write!(
                f,
                "room {room} has {members} participants, the most allowed (--max-participants-per-room)"
            ),
            RoomError::TooManyRooms { open } => write!(
                f,
                "{open} rooms are open, the most allowed (--max-rooms)"
            ),
            RoomError::NoCapacity {
                shards,
                per_shard,
                max_load,
                full,
            } => {
                if *full {
                    write!(
                        f,
                        "all {shards} shards are full ({per_shard} participants each, --max-participants-per-shard)"
                    )
                } else {
                    write!(
                        f,
                        "every shard with room is busier than {:.0}% (--max-shard-load)",
                        max_load * 100.0
                    )
                }
            }
            RoomError::UnknownResource { room } => {
                write!(f, "no such participant in room {room}")
            }
            RoomError::UnknownParticipant(id) => write!(f, "no participant {id}"),
            RoomError::LeftMeanwhile => f.write_str("the participant left meanwhile"),
            RoomError::PreconditionRequired => f.write_str(
                "PATCH needs If-Match with the participant's current ETag (\"*\" is not accepted)",
            ),
            RoomError::EtagMismatch { current } => {
                write!(f, "If-Match does not match the current ETag {current}")
            }
            RoomError::RenegotiationInProgress => {
                f.write_str("another renegotiation of this participant is in progress")
            }
            RoomError::PlacementUnsettled => {
                f.write_str("the shards changed while the offer was being accepted; retry")
            }
            RoomError::ShardStopped => f.write_str("the participant's shard stopped"),
            RoomError::ShardSilent => f.write_str("the participant's shard did not answer"),
            RoomError::NoRandomness => f.write_str("no randomness available"),
            RoomError::NoShard => f.write_str("placement chose no shard"),
            RoomError::Offer(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RoomError {}

impl From<OfferError> for RoomError {
    fn from(e: OfferError) -> Self {
        RoomError::Offer(e)
    }
}

/// One participant as the directory knows it.
#[derive(Debug)]
pub struct Member {
    pub id: ParticipantId,
    /// The secret part of its resource URL (a capability: [`Ids::resource`]).
    resource: String,
    /// The offer its session state derives from: the last one applied.
    offer: String,
    /// A renegotiation is on its way to the shard: another must wait (409).
    renegotiating: bool,
    /// Who it is: the access token's `sub`; without authentication its id.
    pub identity: String,
    pub name: String,
    pub shard: ShardId,
    pub flavor: Flavor,
    pub tracks: Vec<MediaLine>,
    pub slots: Vec<MediaLine>,
    /// Its tracks that are muted or paused, as its shard reported them.
    pub states: Vec<(Mid, TrackState)>,
    /// The video codecs its session negotiated (a renegotiation is
    /// rehearsed with them).
    codecs: Vec<VideoCodec>,
    version: u64,
    pub joined: Instant,
}

impl Member {
    /// The offer in force (its ICE credentials are the client's current ones).
    pub fn offer(&self) -> &str {
        &self.offer
    }

    /// Its current ETag.
    pub fn etag(&self) -> String {
        etag(self.id, self.version)
    }

    /// The state of its track `mid` (muted, paused).
    pub fn state(&self, mid: Mid) -> TrackState {
        state_of(&self.states, mid)
    }
}

pub struct Room {
    id: RoomId,
    pub members: Vec<Member>,
    /// Its video codec, fixed by its first video publisher (None before).
    pub codec: Option<VideoCodec>,
}

impl Room {
    /// The shards hosting its members, ascending, each once.
    pub fn shards(&self) -> Vec<ShardId> {
        let mut shards: Vec<ShardId> = self.members.iter().map(|m| m.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }
}

/// What placement knows of a shard.
#[derive(Clone, Debug, Default)]
pub struct ShardLoad {
    /// Why the shard thread stopped, when it did: it takes no one new.
    pub failed: Option<String>,
    pub participants: usize,
    /// Share of wall time its thread used the CPU (its last report).
    pub busy: f64,
}

/// A joining participant, its offer accepted for the shard it was placed on.
pub struct NewMember<'a> {
    pub name: Option<&'a str>,
    /// The access token's `sub` (None without authentication: the id stands in).
    pub identity: Option<&'a str>,
    /// The offer (kept: a renegotiation is rehearsed against it).
    pub sdp: &'a str,
    pub flavor: Flavor,
    pub tracks: Vec<MediaLine>,
    pub slots: Vec<MediaLine>,
    /// The room codec its offer was accepted under ([`Directory::prepare_join`]).
    pub accepted_under: Option<VideoCodec>,
    /// The video codecs its session negotiated.
    pub codecs: Vec<VideoCodec>,
    /// The codec it gives the room (it publishes video in a room without one).
    pub room_codec: Option<VideoCodec>,
    /// Now, as the caller's clock reads it: the member's join time.
    pub joined: Instant,
}

/// An admitted participant: what its shard and the client need.
#[derive(Debug)]
pub struct Admitted {
    pub id: ParticipantId,
    /// The secret id in its resource URL.
    pub resource: String,
    pub room: RoomId,
    pub name: String,
    pub etag: String,
    /// The room's roster with the newcomer, for its own shard...
    pub roster: RoomUpdate,
    /// ...and the other shards hosting members, which get it too.
    pub notify: Vec<ShardId>,
    /// The member of the same identity and flavor it replaced (already out
    /// of the directory and of `roster`), and the shard that hosts it: that
    /// shard must remove it.
    pub replaced: Option<(ParticipantId, ShardId)>,
}

/// What [`Directory::admit`] decided.
#[derive(Debug)]
pub enum Admission {
    Admitted(Box<Admitted>),
    /// Placement now chooses another shard than the one the offer was
    /// accepted for (the directory changed meanwhile): accept it for this
    /// one and ask again.
    Elsewhere(ShardId),
    /// The room's codec changed since the offer was accepted (another
    /// publisher fixed it meanwhile): accept it again under this one.
    CodecChanged(Option<VideoCodec>),
}

/// A participant removed from the directory: what its room's shards must hear.
#[derive(Debug)]
pub struct Departure {
    pub id: ParticipantId,
    /// Its display name (the `left` event names it).
    pub name: String,
    pub room: String,
    /// The shard that hosted it.
    pub shard: ShardId,
    /// The room's new roster and the shards hosting the remaining members
    /// (None when it was the last one: the room closed).
    pub roster: Option<(RoomUpdate, Vec<ShardId>)>,
}

/// A renegotiation marked in flight: what the caller needs to rehearse it
/// and send it to the participant's shard.
#[derive(Debug)]
pub struct Renegotiation {
    pub id: ParticipantId,
    pub shard: ShardId,
    /// The offer in force, to rehearse the new one against.
    pub previous: String,
    /// The video codecs its session negotiated.
    pub codecs: Vec<VideoCodec>,
}

/// The one rule for room names (docs/api.md): 1-64 characters of A-Z, a-z,
/// 0-9, '-', '_' and '.', starting with a letter or digit (so never "." or
/// "..", which URL normalisation would turn into another path).
pub fn valid_room_name(room: &str) -> bool {
    room.len() <= 64
        && room
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && room
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub fn etag(id: ParticipantId, version: u64) -> String {
    format!("\"{id}.{version}\"")
}

/// The directory: every room, every member, and every shard's load.
pub struct Directory {
    limits: Limits,
    shards: Vec<ShardLoad>,
    rooms: BTreeMap<String, Room>,
    where_is: HashMap<ParticipantId, String>,
    /// The key of the hash that names rooms ([`Directory::room_id`]).
    room_key: (u64, u64),
    /// Members on other nodes of the cluster, by room, then by the node's
    /// slot (as the node last said: [`Directory::set_remote_node`]). Their
    /// shards are [`ShardId::remote`] ids.
    remote: BTreeMap<String, BTreeMap<usize, Vec<MemberInfo>>>,
    /// The identity of each member on another node, when its node said.
    remote_identity: HashMap<ParticipantId, String>,
    admission_refusals: u64,
}

impl Directory {
    pub fn new(limits: Limits, shards: usize) -> Self {
        Directory {
            limits,
            shards: vec![ShardLoad::default(); shards],
            rooms: BTreeMap::new(),
            where_is: HashMap::new(),
            room_key: (0, 0),
            remote: BTreeMap::new(),
            remote_identity: HashMap::new(),
            admission_refusals: 0,
        }
    }

    /// Sets the key rooms are named with. Every node of a cluster uses the
    /// same (from the cluster secret), so that a room has one id on all of
    /// them and a packet of it crosses nodes under that id; a lone server
    /// draws one. Set it before the first join.
    pub fn set_room_key(&mut self, key: (u64, u64)) {
        self.room_key = key;
    }

    /// The id of the room `name`: a keyed 64-bit hash of its name (SipHash,
    /// so that nobody without the key can make two names collide; a
    /// collision with an open room is refused anyway, in
    /// [`Directory::admit`]).
    pub fn room_id(&self, name: &str) -> RoomId {
        use std::hash::Hasher;
        #[allow(
            deprecated,
            reason = "std's SipHash-2-4 with our keys; the deprecation points at a crate for the same function"
        )]
        let mut h = std::hash::SipHasher::new_with_keys(self.room_key.0, self.room_key.1);
        h.write(name.as_bytes());
        RoomId(h.finish())
    }

    /// Replaces what this directory knows of the node in slot `node`: its
    /// members, by room (an empty list: it has none, or it is gone). Returns
    /// the new roster of each room here whose members it changed, with the
    /// shards to send it to.
    pub fn set_remote_node(
        &mut self,
        node: usize,
        rooms: Vec<(String, Vec<MemberInfo>)>,
        reason: &'static str,
    ) -> Vec<(RoomUpdate, Vec<ShardId>)> {
        // Who is gone, per room (the `left` events of the rosters below).
        let mut gone: BTreeMap<String, Vec<Departed>> = BTreeMap::new();
        for (room, nodes) in &self.remote {
            let Some(before) = nodes.get(&node) else {
                continue;
            };
            let after = rooms.iter().find(|(r, _)| r == room).map(|(_, m)| m);
            for m in before {
                if after.is_none_or(|a| a.iter().all(|x| x.id != m.id)) {
                    gone.entry(room.clone()).or_default().push(Departed {
                        id: m.id,
                        name: m.name.clone(),
                        reason,
                    });
                }
            }
        }
        let mut changed: Vec<String> = Vec::new();
        let mut incoming: BTreeMap<String, Vec<MemberInfo>> = BTreeMap::new();
        for (room, members) in rooms {
            if !members.is_empty() {
                incoming.entry(room).or_default().extend(members);
            }
        }
        // Rooms it left.
        for (room, nodes) in self.remote.iter_mut() {
            if !incoming.contains_key(room) && nodes.remove(&node).is_some() {
                changed.push(room.clone());
            }
        }
        self.remote.retain(|_, nodes| !nodes.is_empty());
        let listed: std::collections::HashSet<ParticipantId> = self
            .remote
            .values()
            .flat_map(|nodes| nodes.values().flatten().map(|m| m.id))
            .chain(incoming.values().flatten().map(|m| m.id))
            .collect();
        self.remote_identity.retain(|id, _| listed.contains(id));
        for (room, members) in incoming {
            let nodes = self.remote.entry(room.clone()).or_default();
            if nodes.get(&node) != Some(&members) {
                nodes.insert(node, members);
                changed.push(room);
            }
        }
        changed
            .into_iter()
            .filter_map(|room| {
                let shards = self.rooms.get(&room)?.shards();
                let mut roster = self.roster(&room)?;
                roster.departed = gone.remove(&room).unwrap_or_default();
                Some((roster, shards))
            })
            .collect()
    }

    /// The identities (token `sub`s) of members on other nodes, as their
    /// nodes said; a member whose identity holds a seat here too is not
    /// listed (it moved here, and its old node has not let it go yet).
    pub fn set_remote_identities(&mut self, node: usize, ids: Vec<(ParticipantId, String)>) {
        let mine: std::collections::HashSet<ParticipantId> = self
            .remote
            .values()
            .filter_map(|nodes| nodes.get(&node))
            .flatten()
            .map(|m| m.id)
            .collect();
        self.remote_identity.retain(|id, _| !mine.contains(id));
        self.remote_identity.extend(ids);
    }

    /// The members of rooms here that are on other nodes, with the slot of
    /// their node; but one whose identity a member here holds (one seat
    /// per identity: the one here is the newer).
    pub fn remote_members(&self, room: &str) -> impl Iterator<Item = (usize, &MemberInfo)> {
        let here = self.rooms.get(room);
        self.remote
            .get(room)
            .into_iter()
            .flat_map(|nodes| nodes.iter())
            .flat_map(|(node, members)| members.iter().map(move |m| (*node, m)))
            .filter(move |(_, m)| {
                let Some(identity) = self.remote_identity.get(&m.id) else {
                    return true;
                };
                here.is_none_or(|r| r.members.iter().all(|l| l.identity != *identity))
            })
    }

    /// This node's members, by room, as another node's directory takes
    /// them ([`Directory::set_remote_node`], their shards made remote ids
    /// there).
    pub fn local_members(&self) -> Vec<(String, Vec<MemberInfo>)> {
        self.rooms
            .keys()
            .filter_map(|name| {
                let mut update = self.roster(name)?;
                update.members.retain(|m| !m.shard.is_remote());
                Some((name.clone(), update.members))
            })
            .collect()
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn shard_loads(&self) -> &[ShardLoad] {
        &self.shards
    }

    fn load(&self, shard: ShardId) -> Option<&ShardLoad> {
        self.shards.get(shard.0)
    }

    fn load_mut(&mut self, shard: ShardId) -> Option<&mut ShardLoad> {
        self.shards.get_mut(shard.0)
    }

    /// A shard's latest busy fraction (from its report).
    pub fn set_busy(&mut self, shard: ShardId, busy: f64) {
        if let Some(s) = self.load_mut(shard) {
            s.busy = busy;
        }
    }

    pub fn rooms(&self) -> impl Iterator<Item = (&str, &Room)> {
        self.rooms.iter().map(|(name, r)| (name.as_str(), r))
    }

    pub fn room(&self, room: &str) -> Option<&Room> {
        self.rooms.get(room)
    }

    pub fn room_count(&self) -> usize {
        self.rooms.len()
    }

    pub fn participant_count(&self) -> usize {
        self.where_is.len()
    }

    pub fn contains(&self, id: ParticipantId) -> bool {
        self.where_is.contains_key(&id)
    }

    /// Joins refused by admission control (no capacity, too many rooms).
    pub fn admission_refusals(&self) -> u64 {
        self.admission_refusals
    }

    /// Can `shard` take one more? `freed`: the shard of a member the join
    /// replaces (its seat counts as free).
    fn fits(&self, shard: ShardId, s: &ShardLoad, freed: Option<ShardId>) -> bool {
        let participants = s
            .participants
            .saturating_sub(usize::from(freed == Some(shard)));
        s.failed.is_none()
            && participants < self.limits.max_participants_per_shard
            && s.busy < self.limits.max_shard_load
    }

    /// Admission control and placement: the room's own shard while it has
    /// room (zero hops), else the least loaded shard that can take one more.
    pub fn place(&mut self, room: &str) -> Result<ShardId, RoomError> {
        self.place_freeing(room, None)
    }

    /// [`Directory::place`] for a join that replaces a member on `freed`.
    fn place_freeing(&mut self, room: &str, freed: Option<ShardId>) -> Result<ShardId, RoomError> {
        if let Some(r) = self.rooms.get(room) {
            // The shard hosting most of the room first.
            let mut counts: Vec<(ShardId, usize)> = Vec::new();
            for m in &r.members {
                match counts.iter_mut().find(|(s, _)| *s == m.shard) {
                    Some(c) => c.1 += 1,
                    None => counts.push((m.shard, 1)),
                }
            }
            counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for (s, _) in counts {
                if self.load(s).is_some_and(|l| self.fits(s, l, freed)) {
                    return Ok(s);
                }
            }
        }
        let best = self
            .shards
            .iter()
            .enumerate()
            .filter(|(i, s)| self.fits(ShardId(*i), s, freed))
            .min_by(|(_, a), (_, b)| {
                a.participants
                    .cmp(&b.participants)
                    .then(a.busy.total_cmp(&b.busy))
            })
            .map(|(i, _)| ShardId(i));
        best.ok_or_else(|| {
            self.admission_refusals += 1;
            let per_shard = self.limits.max_participants_per_shard;
            RoomError::NoCapacity {
                shards: self.shards.len(),
                per_shard,
                max_load: self.limits.max_shard_load,
                full: self.shards.iter().all(|s| s.participants >= per_shard),
            }
        })
    }

    /// The member holding the seat a join of `identity` (the token's `sub`;
    /// None without authentication: every join is someone new) and
    /// `flavor` would take in `room`, and its shard.
    fn seat_holder(
        &self,
        room: &str,
        identity: Option<&str>,
        flavor: Flavor,
    ) -> Option<(ParticipantId, ShardId)> {
        let identity = identity?;
        self.rooms
            .get(room)?
            .members
            .iter()
            .find(|m| m.flavor == flavor && m.identity == identity)
            .map(|m| (m.id, m.shard))
    }

    /// The limits on rooms: a valid name, room in the room (a join that
    /// replaces a member takes its seat), and a free room when it is a new
    /// one.
    fn check_room(&mut self, room: &str, replacing: bool) -> Result<(), RoomError> {
        if !valid_room_name(room) {
            return Err(RoomError::BadRoomName);
        }
        match self.rooms.get(room) {
            Some(r) if !replacing && r.members.len() >= self.limits.max_participants_per_room => {
                Err(RoomError::RoomFull {
                    room: room.to_string(),
                    members: r.members.len(),
                })
            }
            None if self.rooms.len() >= self.limits.max_rooms => {
                self.admission_refusals += 1;
                Err(RoomError::TooManyRooms {
                    open: self.rooms.len(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The first step of a join: admission control and placement. The
    /// caller then accepts the offer for the returned shard and under the
    /// room's video codec (None: the room has none yet) without holding the
    /// directory, and asks [`Directory::admit`].
    pub fn prepare_join(&mut self, room: &str) -> Result<(ShardId, Option<VideoCodec>), RoomError> {
        self.prepare_join_as(room, None, Flavor::Participant)
    }

    /// [`Directory::prepare_join`] for `identity` (the token's `sub`) joining as
    /// `flavor`: a member holding that seat already does not count against
    /// the room's limit, nor its seat against its shard's.
    pub fn prepare_join_as(
        &mut self,
        room: &str,
        identity: Option<&str>,
        flavor: Flavor,
    ) -> Result<(ShardId, Option<VideoCodec>), RoomError> {
        let holder = self.seat_holder(room, identity, flavor);
        self.check_room(room, holder.is_some())?;
        let shard = self.place_freeing(room, holder.map(|h| h.1))?;
        Ok((shard, self.rooms.get(room).and_then(|r| r.codec)))
    }

    /// [`Directory::prepare_join`] on a shard the caller chose instead of
    /// placement's (the simulator's tests place by hand): the room's limits
    /// as ever, and `shard` must be able to take one more (else
    /// [`RoomError::NoShard`] when there is no such shard,
    /// [`RoomError::NoCapacity`] when it is failed, full or too busy).
    /// Returns the room's video codec; [`Directory::admit`] with `shard`
    /// and `insist` then admits there.
    pub fn prepare_join_on(
        &mut self,
        room: &str,
        shard: ShardId,
    ) -> Result<Option<VideoCodec>, RoomError> {
        self.check_room(room, false)?;
        let load = self.load(shard).ok_or(RoomError::NoShard)?;
        let per_shard = self.limits.max_participants_per_shard;
        let full = load.participants >= per_shard;
        if !self.fits(shard, load, None) {
            self.admission_refusals += 1;
            return Err(RoomError::NoCapacity {
                shards: 1,
                per_shard,
                max_load: self.limits.max_shard_load,
                full,
            });
        }
        Ok(self.rooms.get(room).and_then(|r| r.codec))
    }

    /// The second step of a join: the same checks again (the directory may
    /// have changed since [`Directory::prepare_join`]), then the member is in.
    /// `prepared`: the shard its offer was accepted for. When placement now
    /// picks another one, the answer is [`Admission::Elsewhere`], unless
    /// `insist` and `prepared` can still take one more.
    ///
    /// A member of the room with the newcomer's identity and flavor (with
    /// authentication) is replaced: it leaves the directory here, in the
    /// same step, and [`Admitted::replaced`] names it for its shard.
    ///
    /// `ids` gives the newcomer's resource capability and public id.
    pub fn admit(
        &mut self,
        room: &str,
        prepared: ShardId,
        insist: bool,
        new: NewMember<'_>,
        ids: &mut impl Ids,
    ) -> Result<Admission, RoomError> {
        let holder = self.seat_holder(room, new.identity, new.flavor);
        let freed = holder.map(|h| h.1);
        self.check_room(room, holder.is_some())?;
        let shard = self.place_freeing(room, freed)?;
        let prepared_fits = self
            .load(prepared)
            .is_some_and(|s| self.fits(prepared, s, freed));
        if shard != prepared && !(insist && prepared_fits) {
            return Ok(Admission::Elsewhere(shard));
        }
        let codec = self.rooms.get(room).and_then(|r| r.codec);
        if codec != new.accepted_under {
            return Ok(Admission::CodecChanged(codec));
        }
        let shard = prepared;
        let resource = ids.resource()?;
        // The seat's previous holder leaves; its room stays open (same id
        // and codec) for the newcomer.
        if let Some((old, _)) = holder {
            self.remove_member(old);
        }
        // Public ids (rosters, logs) are random too, so they tell nothing of
        // how many joined; they are not secrets (the resource is).
        let id = loop {
            let id = ids.participant();
            if !self.where_is.contains_key(&id) {
                break id;
            }
        };
        let name = new
            .name
            .map(|n| {
                n.chars()
                    .filter(|c| !c.is_control())
                    .take(64)
                    .collect::<String>()
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("guest-{:04x}", id.0 & 0xffff));
        if !self.rooms.contains_key(room) {
            let id = self.room_id(room);
            if self.rooms.values().any(|r| r.id == id) {
                // Two names, one hash: never seen, but never merged either.
                return Err(RoomError::PlacementUnsettled);
            }
            self.rooms.insert(
                room.to_string(),
                Room {
                    id,
                    members: Vec::new(),
                    codec: None,
                },
            );
        }
        let r = self
            .rooms
            .get_mut(room)
            .ok_or(RoomError::PlacementUnsettled)?;
        if r.codec.is_none() {
            r.codec = new.room_codec;
        }
        r.members.push(Member {
            id,
            resource: resource.clone(),
            offer: new.sdp.to_string(),
            renegotiating: false,
            identity: new.identity.map_or_else(|| id.to_string(), str::to_string),
            name: name.clone(),
            shard,
            flavor: new.flavor,
            tracks: new.tracks,
            slots: new.slots,
            states: Vec::new(),
            codecs: new.codecs,
            version: 1,
            joined: new.joined,
        });
        let room_id = r.id;
        let notify = r.shards().into_iter().filter(|s| *s != shard).collect();
        self.where_is.insert(id, room.to_string());
        if let Some(s) = self.load_mut(shard) {
            s.participants += 1;
        }
        let roster = self.roster(room).ok_or(RoomError::LeftMeanwhile)?;
        Ok(Admission::Admitted(Box::new(Admitted {
            id,
            resource,
            room: room_id,
            name,
            etag: etag(id, 1),
            roster,
            notify,
            replaced: holder,
        })))
    }

    /// Takes a member out of its room (which stays open, even empty) and
    /// off its shard's count. Returns its room's name and the member.
    fn remove_member(&mut self, id: ParticipantId) -> Option<(String, Member)> {
        let room = self.where_is.remove(&id)?;
        let r = self.rooms.get_mut(&room)?;
        let pos = r.members.iter().position(|m| m.id == id)?;
        let m = r.members.remove(pos);
        if let Some(s) = self.shards.get_mut(m.shard.0) {
            s.participants = s.participants.saturating_sub(1);
        }
        Some((room, m))
    }

    /// Removes a participant (API DELETE, or its shard reported it gone).
    pub fn leave(&mut self, id: ParticipantId) -> Result<Departure, RoomError> {
        let (room, m) = self
            .remove_member(id)
            .ok_or(RoomError::UnknownParticipant(id))?;
        let Some(r) = self.rooms.get(&room) else {
            return Err(RoomError::UnknownParticipant(id));
        };
        let roster = if r.members.is_empty() {
            self.rooms.remove(&room);
            None
        } else {
            // The leaver's shard needs the new roster too if it hosts others.
            let shards = r.shards();
            self.roster(&room).map(|u| (u, shards))
        };
        Ok(Departure {
            id,
            name: m.name.clone(),
            room,
            shard: m.shard,
            roster,
        })
    }

    /// Looks up a participant for the API: it must be in `room` and of `flavor`.
    pub fn find(&self, room: &str, resource: &str, flavor: Flavor) -> Result<&Member, RoomError> {
        self.rooms
            .get(room)
            .and_then(|r| r.members.iter().find(|m| m.resource == resource))
            .filter(|m| m.flavor == flavor)
            .ok_or_else(|| RoomError::UnknownResource {
                room: room.to_string(),
            })
    }

    /// The preconditions of a PATCH: the resource exists and `If-Match` is
    /// its current ETag (a weak `*` is refused: a renegotiation must say
    /// which state it builds on).
    pub fn check_patch(
        &self,
        room: &str,
        resource: &str,
        if_match: Option<&str>,
    ) -> Result<&Member, RoomError> {
        self.check_patch_as(room, resource, Flavor::Participant, if_match)
    }

    /// [`Directory::check_patch`] for a member of `flavor` (a WHIP/WHEP ICE
    /// restart by fragment renegotiates too).
    pub fn check_patch_as(
        &self,
        room: &str,
        resource: &str,
        flavor: Flavor,
        if_match: Option<&str>,
    ) -> Result<&Member, RoomError> {
        let m = self.find(room, resource, flavor)?;
        let current = etag(m.id, m.version);
        match if_match.map(str::trim) {
            None | Some("*") => Err(RoomError::PreconditionRequired),
            Some(v) if v != current => Err(RoomError::EtagMismatch { current }),
            Some(_) => Ok(m),
        }
    }

    /// Starts a renegotiation: checks the preconditions and marks it in
    /// flight, so that another one is refused until
    /// [`Directory::finish_renegotiate`]. The caller rehearses the offer against
    /// [`Renegotiation::previous`] without holding the directory.
    pub fn begin_renegotiate(
        &mut self,
        room: &str,
        resource: &str,
        if_match: Option<&str>,
    ) -> Result<Renegotiation, RoomError> {
        self.begin_renegotiate_as(room, resource, Flavor::Participant, if_match)
    }

    /// [`Directory::begin_renegotiate`] for a member of `flavor`.
    pub fn begin_renegotiate_as(
        &mut self,
        room: &str,
        resource: &str,
        flavor: Flavor,
        if_match: Option<&str>,
    ) -> Result<Renegotiation, RoomError> {
        let m = self.check_patch_as(room, resource, flavor, if_match)?;
        if m.renegotiating {
            return Err(RoomError::RenegotiationInProgress);
        }
        if self.load(m.shard).is_none_or(|s| s.failed.is_some()) {
            return Err(RoomError::ShardStopped);
        }
        let r = Renegotiation {
            id: m.id,
            shard: m.shard,
            previous: m.offer.clone(),
            codecs: m.codecs.clone(),
        };
        if let Some(m) = self.member_mut(r.id) {
            m.renegotiating = true;
        }
        Ok(r)
    }

    /// Records the end of a renegotiation: the offer now in force when it
    /// applied (`Some`), nothing new when it did not. Returns the ETag
    /// (None when the participant left meanwhile).
    pub fn finish_renegotiate(
        &mut self,
        id: ParticipantId,
        applied: Option<String>,
    ) -> Option<String> {
        let m = self.member_mut(id)?;
        m.renegotiating = false;
        if let Some(offer) = applied {
            m.offer = offer;
            m.version += 1;
        }
        Some(etag(id, m.version))
    }

    /// A member and the name of its room.
    pub fn member(&self, id: ParticipantId) -> Option<(&str, &Member)> {
        let room = self.where_is.get(&id)?;
        let m = self.rooms.get(room)?.members.iter().find(|m| m.id == id)?;
        Some((room.as_str(), m))
    }

    fn member_mut(&mut self, id: ParticipantId) -> Option<&mut Member> {
        let room = self.where_is.get(&id)?;
        self.rooms
            .get_mut(room)?
            .members
            .iter_mut()
            .find(|m| m.id == id)
    }

    /// A member's shard told what it sends and receives now. Returns the
    /// room's new roster and the shards that must get it.
    pub fn lines_changed(
        &mut self,
        id: ParticipantId,
        tracks: Vec<MediaLine>,
        slots: Vec<MediaLine>,
    ) -> Option<(RoomUpdate, Vec<ShardId>)> {
        let m = self.member_mut(id)?;
        m.states
            .retain(|(mid, _)| tracks.iter().any(|t| t.mid == *mid));
        m.tracks = tracks;
        m.slots = slots;
        let room = self.where_is.get(&id)?;
        let shards = self.rooms.get(room)?.shards();
        Some((self.roster(room)?, shards))
    }

    /// A member's shard told that one of its tracks was muted or unmuted,
    /// paused or resumed. Returns the room's new roster and the shards
    /// that must get it; None if nothing changed (or it is gone).
    pub fn track_state(
        &mut self,
        id: ParticipantId,
        mid: Mid,
        state: TrackState,
    ) -> Option<(RoomUpdate, Vec<ShardId>)> {
        let m = self.member_mut(id)?;
        if !m.tracks.iter().any(|t| t.mid == mid) {
            return None;
        }
        let old = m.states.iter().position(|(x, _)| *x == mid);
        match (old, state == TrackState::default()) {
            (Some(i), true) => {
                m.states.swap_remove(i);
            }
            (Some(i), false) => {
                let slot = m.states.get_mut(i)?;
                if slot.1 == state {
                    return None;
                }
                slot.1 = state;
            }
            (None, false) => m.states.push((mid, state)),
            (None, true) => return None,
        }
        let room = self.where_is.get(&id)?;
        let shards = self.rooms.get(room)?.shards();
        Some((self.roster(room)?, shards))
    }

    /// The roster of `room` as the shards get it.
    pub fn roster(&self, room: &str) -> Option<RoomUpdate> {
        let r = self.rooms.get(room)?;
        Some(RoomUpdate {
            room: r.id,
            name: room.to_string(),
            members: r
                .members
                .iter()
                .map(|m| MemberInfo {
                    id: m.id,
                    name: m.name.clone(),
                    shard: m.shard,
                    tracks: m.tracks.clone(),
                    viewer: m.flavor == Flavor::Whep,
                    states: m.states.clone(),
                })
                // Members on other nodes after this node's own (a node
                // orders its own by join time; across nodes there is no
                // common clock to order by).
                .chain(self.remote_members(room).map(|(_, m)| m.clone()))
                .collect(),
            departed: Vec::new(),
        })
    }

    /// Shards whose thread stopped, and why.
    pub fn failed_shards(&self) -> Vec<(ShardId, String)> {
        self.shards
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.failed.clone().map(|why| (ShardId(i), why)))
            .collect()
    }

    /// A shard thread stopped: it takes no one new, and its participants
    /// (whose calls ended with it) leave their rooms.
    pub fn shard_failed(&mut self, shard: ShardId, reason: String) -> Vec<Departure> {
        let Some(s) = self.load_mut(shard) else {
            return Vec::new();
        };
        s.failed = Some(reason);
        let gone: Vec<ParticipantId> = self
            .rooms
            .values()
            .flat_map(|r| r.members.iter().filter(|m| m.shard == shard).map(|m| m.id))
            .collect();
        gone.into_iter()
            .filter_map(|id| self.leave(id).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids as the server draws them, from `fastrand` (a test's own thread).
    struct TestIds;

    impl Ids for TestIds {
        fn participant(&mut self) -> ParticipantId {
            ParticipantId(fastrand::u64(1..1 << 53))
        }
        fn resource(&mut self) -> Result<String, RoomError> {
            Ok(format!("{:032x}", fastrand::u128(..)))
        }
    }

    fn limits() -> Limits {
        Limits {
            max_participants_per_shard: 3,
            max_shard_load: 0.9,
            max_participants_per_room: 4,
            max_rooms: 2,
        }
    }

    fn new_member(name: &str) -> NewMember<'_> {
        NewMember {
            name: Some(name),
            identity: None,
            sdp: "v=0 (an offer)",
            flavor: Flavor::Participant,
            tracks: Vec::new(),
            slots: Vec::new(),
            accepted_under: None,
            codecs: vec![VideoCodec::H264],
            room_codec: None,
            joined: Instant::now(),
        }
    }

    /// Both steps of a join, as the control thread runs them.
    fn join(rooms: &mut Directory, room: &str, name: &str) -> Result<Admitted, RoomError> {
        let (mut shard, mut codec) = rooms.prepare_join(room)?;
        loop {
            let new = NewMember {
                accepted_under: codec,
                ..new_member(name)
            };
            match rooms.admit(room, shard, false, new, &mut TestIds)? {
                Admission::Admitted(a) => return Ok(*a),
                Admission::Elsewhere(s) => shard = s,
                Admission::CodecChanged(c) => codec = c,
            }
        }
    }

    #[test]
    fn members_on_other_nodes_join_the_roster_and_leave_it_with_their_node() {
        let mut rooms = Directory::new(limits(), 2);
        rooms.set_room_key((1, 2));
        let a = join(&mut rooms, "r", "alice").unwrap();
        // A room's id is its keyed name: the same on every node with the key.
        assert_eq!(a.room, rooms.room_id("r"));
        let mut other = Directory::new(limits(), 2);
        other.set_room_key((1, 2));
        assert_eq!(other.room_id("r"), a.room);
        assert_ne!(rooms.room_id("s"), a.room);

        let bob = MemberInfo {
            id: ParticipantId(77),
            name: "bob".into(),
            shard: ShardId::remote(4, 1).unwrap(),
            tracks: Vec::new(),
            viewer: false,
            states: Vec::new(),
        };
        let updates = rooms.set_remote_node(4, vec![("r".into(), vec![bob.clone()])], "left");
        assert_eq!(updates.len(), 1);
        let (roster, shards) = &updates[0];
        assert_eq!(shards, &vec![ShardId(shard_of(&rooms, a.id))]);
        let ids: Vec<_> = roster.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![a.id, bob.id]);
        // The same snapshot again changes nothing; a room with nobody here
        // is kept for a later join, with no roster to send.
        assert!(
            rooms
                .set_remote_node(4, vec![("r".into(), vec![bob.clone()])], "left")
                .is_empty()
        );
        assert!(
            rooms
                .set_remote_node(
                    4,
                    vec![
                        ("r".into(), vec![bob.clone()]),
                        ("s".into(), vec![bob.clone()])
                    ],
                    "left"
                )
                .is_empty()
        );
        // bob moves here (same identity): the one on the other node, not
        // let go yet, is not listed twice.
        rooms.set_remote_identities(4, vec![(bob.id, "bob-sub".into())]);
        let mut new = new_member("bob");
        new.identity = Some("bob-sub");
        let (shard, codec) = rooms.prepare_join("r").unwrap();
        let new = NewMember {
            accepted_under: codec,
            ..new
        };
        let Admission::Admitted(b2) = rooms.admit("r", shard, true, new, &mut TestIds).unwrap()
        else {
            panic!("not admitted");
        };
        let ids: Vec<_> = b2.roster.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![a.id, b2.id]);
        assert_eq!(rooms.remote_members("r").count(), 0);
        rooms.leave(b2.id).unwrap();
        assert_eq!(rooms.remote_members("r").count(), 1);
        // Its own members only, for the other nodes.
        let mine = rooms.local_members();
        assert_eq!(mine.len(), 1);
        assert_eq!(
            mine[0].1.iter().map(|m| m.id).collect::<Vec<_>>(),
            vec![a.id]
        );
        // The node is gone: its members leave the roster.
        let updates = rooms.set_remote_node(4, Vec::new(), "node_lost");
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].0.members.len(), 1);
        assert_eq!(
            updates[0].0.departed,
            vec![Departed {
                id: bob.id,
                name: "bob".into(),
                reason: "node_lost"
            }]
        );
        assert_eq!(rooms.remote_members("s").count(), 0);
    }

    fn shard_of(rooms: &Directory, id: ParticipantId) -> usize {
        rooms
            .rooms()
            .flat_map(|(_, r)| r.members.iter())
            .find(|m| m.id == id)
            .map(|m| m.shard.0)
            .unwrap()
    }

    #[test]
    fn room_names() {
        assert!(valid_room_name("a"));
        assert!(valid_room_name("Room-1_x.y"));
        assert!(valid_room_name(&"a".repeat(64)));
        for bad in ["", ".", "..", "-a", "a b", "a/b", "ä", &"a".repeat(65)] {
            assert!(!valid_room_name(bad), "{bad:?}");
        }
        let mut rooms = Directory::new(limits(), 1);
        assert_eq!(
            rooms.prepare_join("..").unwrap_err(),
            RoomError::BadRoomName
        );
    }

    #[test]
    fn a_new_room_goes_to_the_least_loaded_shard() {
        let mut rooms = Directory::new(
            Limits {
                max_rooms: 10,
                ..limits()
            },
            3,
        );
        let a = join(&mut rooms, "a", "ann").unwrap();
        assert_eq!(shard_of(&rooms, a.id), 0);
        let b = join(&mut rooms, "b", "bob").unwrap();
        assert_eq!(shard_of(&rooms, b.id), 1);
        let c = join(&mut rooms, "c", "cy").unwrap();
        assert_eq!(shard_of(&rooms, c.id), 2);
        // Equal counts: the less busy one.
        rooms.set_busy(ShardId(0), 0.5);
        rooms.set_busy(ShardId(1), 0.1);
        rooms.set_busy(ShardId(2), 0.3);
        let d = join(&mut rooms, "d", "dee").unwrap();
        assert_eq!(shard_of(&rooms, d.id), 1);
    }

    #[test]
    fn a_room_stays_on_its_shard_while_it_has_room() {
        let mut rooms = Directory::new(limits(), 2);
        let first = join(&mut rooms, "r", "a").unwrap();
        assert_eq!(shard_of(&rooms, first.id), 0);
        // Shard 1 is emptier, but the room lives on 0.
        let second = join(&mut rooms, "r", "b").unwrap();
        assert_eq!(shard_of(&rooms, second.id), 0);
        let third = join(&mut rooms, "r", "c").unwrap();
        assert_eq!(shard_of(&rooms, third.id), 0);
        assert_eq!(third.notify, Vec::<ShardId>::new());
        // Shard 0 is full (3 per shard): the room spills over to 1, and
        // shard 0 hears of the newcomer.
        let fourth = join(&mut rooms, "r", "d").unwrap();
        assert_eq!(shard_of(&rooms, fourth.id), 1);
        assert_eq!(fourth.notify, vec![ShardId(0)]);
        assert_eq!(fourth.roster.members.len(), 4);
    }

    #[test]
    fn failed_and_busy_shards_get_no_one() {
        let mut rooms = Directory::new(limits(), 3);
        rooms.set_busy(ShardId(1), 0.95);
        let failed = rooms.shard_failed(ShardId(0), "boom".into());
        assert!(failed.is_empty());
        assert_eq!(
            rooms.failed_shards(),
            vec![(ShardId(0), "boom".to_string())]
        );
        let a = join(&mut rooms, "r", "a").unwrap();
        assert_eq!(shard_of(&rooms, a.id), 2);
        rooms.set_busy(ShardId(2), 0.95);
        let e = join(&mut rooms, "r", "b").unwrap_err();
        assert_eq!(e.code(), "no_capacity");
        assert_eq!(
            e.to_string(),
            "every shard with room is busier than 90% (--max-shard-load)"
        );
        assert_eq!(rooms.admission_refusals(), 1);
    }

    #[test]
    fn a_failed_shard_takes_its_participants_out_of_their_rooms() {
        let mut rooms = Directory::new(limits(), 2);
        let a = join(&mut rooms, "r", "a").unwrap();
        let b = join(&mut rooms, "s", "b").unwrap();
        assert_eq!(shard_of(&rooms, b.id), 1);
        let gone = rooms.shard_failed(ShardId(0), "boom".into());
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].id, a.id);
        assert!(gone[0].roster.is_none(), "room r closed");
        assert!(rooms.room("r").is_none());
        assert!(rooms.contains(b.id));
        // Room r again: not on the failed shard.
        let c = join(&mut rooms, "r", "c").unwrap();
        assert_eq!(shard_of(&rooms, c.id), 1);
    }

    #[test]
    fn full_shards_refuse_with_no_capacity() {
        let mut rooms = Directory::new(
            Limits {
                max_participants_per_shard: 1,
                ..limits()
            },
            2,
        );
        join(&mut rooms, "r", "a").unwrap();
        join(&mut rooms, "r", "b").unwrap();
        let e = join(&mut rooms, "r", "c").unwrap_err();
        assert_eq!(
            e,
            RoomError::NoCapacity {
                shards: 2,
                per_shard: 1,
                max_load: 0.9,
                full: true
            }
        );
        assert_eq!(
            e.to_string(),
            "all 2 shards are full (1 participants each, --max-participants-per-shard)"
        );
        assert_eq!(rooms.admission_refusals(), 1);
    }

    #[test]
    fn room_and_room_count_limits() {
        let mut rooms = Directory::new(
            Limits {
                max_participants_per_shard: 100,
                max_participants_per_room: 2,
                ..limits()
            },
            1,
        );
        join(&mut rooms, "r", "a").unwrap();
        join(&mut rooms, "r", "b").unwrap();
        let e = join(&mut rooms, "r", "c").unwrap_err();
        assert_eq!(
            e,
            RoomError::RoomFull {
                room: "r".into(),
                members: 2
            }
        );
        // A full room is a conflict, not an admission refusal.
        assert_eq!(rooms.admission_refusals(), 0);
        join(&mut rooms, "s", "d").unwrap();
        let e = join(&mut rooms, "t", "e").unwrap_err();
        assert_eq!(e, RoomError::TooManyRooms { open: 2 });
        assert_eq!(
            e.to_string(),
            "2 rooms are open, the most allowed (--max-rooms)"
        );
        assert_eq!(rooms.admission_refusals(), 1);
    }

    #[test]
    fn admission_is_checked_again_when_the_offer_is_ready() {
        let mut rooms = Directory::new(
            Limits {
                max_participants_per_room: 1,
                ..limits()
            },
            2,
        );
        // Two joins of one room prepared at once: the second admission
        // finds the room full.
        let (s1, _) = rooms.prepare_join("r").unwrap();
        let (s2, _) = rooms.prepare_join("r").unwrap();
        assert!(matches!(
            rooms
                .admit("r", s1, false, new_member("a"), &mut TestIds)
                .unwrap(),
            Admission::Admitted(_)
        ));
        let e = rooms
            .admit("r", s2, false, new_member("b"), &mut TestIds)
            .unwrap_err();
        assert_eq!(e.code(), "room_full");
        assert_eq!(rooms.participant_count(), 1);
    }

    /// A room takes its first video publisher's codec; a join accepted
    /// before that happened is asked to accept its offer again under it.
    #[test]
    fn the_first_publisher_fixes_the_room_codec() {
        let mut rooms = Directory::new(limits(), 2);
        let (s1, c1) = rooms.prepare_join("r").unwrap();
        let (s2, c2) = rooms.prepare_join("r").unwrap();
        assert_eq!((c1, c2), (None, None));
        let publisher = NewMember {
            room_codec: Some(VideoCodec::Vp8),
            codecs: vec![VideoCodec::Vp8],
            ..new_member("a")
        };
        let Admission::Admitted(_) = rooms
            .admit("r", s1, false, publisher, &mut TestIds)
            .unwrap()
        else {
            panic!("first admission")
        };
        assert_eq!(rooms.room("r").and_then(|r| r.codec), Some(VideoCodec::Vp8));
        // The second was accepted when the room had no codec: again, under VP8.
        match rooms
            .admit("r", s2, false, new_member("b"), &mut TestIds)
            .unwrap()
        {
            Admission::CodecChanged(Some(VideoCodec::Vp8)) => {}
            other => panic!("{other:?}"),
        }
        let (_, c) = rooms.prepare_join("r").unwrap();
        assert_eq!(c, Some(VideoCodec::Vp8));
        // A later publisher does not change it.
        let later = NewMember {
            accepted_under: Some(VideoCodec::Vp8),
            room_codec: Some(VideoCodec::H264),
            ..new_member("c")
        };
        let Admission::Admitted(_) = rooms.admit("r", s2, false, later, &mut TestIds).unwrap()
        else {
            panic!("admission under the room codec")
        };
        assert_eq!(rooms.room("r").and_then(|r| r.codec), Some(VideoCodec::Vp8));
    }

    #[test]
    fn a_changed_placement_sends_the_join_elsewhere() {
        let mut rooms = Directory::new(limits(), 2);
        // Two joins of a new room prepared at once: both on shard 0.
        let (s1, _) = rooms.prepare_join("r").unwrap();
        let (s2, _) = rooms.prepare_join("q").unwrap();
        assert_eq!((s1, s2), (ShardId(0), ShardId(0)));
        let Admission::Admitted(_) = rooms
            .admit("r", s1, false, new_member("a"), &mut TestIds)
            .unwrap()
        else {
            panic!("first admission")
        };
        // Shard 0 now has one more: room q belongs on shard 1.
        match rooms
            .admit("q", s2, false, new_member("b"), &mut TestIds)
            .unwrap()
        {
            Admission::Elsewhere(ShardId(1)) => {}
            other => panic!("{other:?}"),
        }
        // Insisting on a shard that still fits admits there.
        let Admission::Admitted(a) = rooms
            .admit("q", s2, true, new_member("b"), &mut TestIds)
            .unwrap()
        else {
            panic!("insisted admission")
        };
        assert_eq!(shard_of(&rooms, a.id), 0);
        // A shard that failed meanwhile is never insisted on.
        rooms.shard_failed(ShardId(0), "boom".into());
        let (s, _) = rooms.prepare_join("p").unwrap();
        assert_eq!(s, ShardId(1));
        match rooms
            .admit("p", ShardId(0), true, new_member("c"), &mut TestIds)
            .unwrap()
        {
            Admission::Elsewhere(ShardId(1)) => {}
            other => panic!("{other:?}"),
        }
    }

    /// A join on a shard the caller chose: admitted there while it can
    /// take one more, whatever placement would pick.
    #[test]
    fn a_join_can_be_placed_on_a_requested_shard() {
        let mut rooms = Directory::new(
            Limits {
                max_participants_per_shard: 1,
                ..limits()
            },
            3,
        );
        fn on(
            rooms: &mut Directory,
            room: &str,
            shard: usize,
            name: &str,
        ) -> Result<Admitted, RoomError> {
            let codec = rooms.prepare_join_on(room, ShardId(shard))?;
            let new = NewMember {
                accepted_under: codec,
                ..new_member(name)
            };
            match rooms.admit(room, ShardId(shard), true, new, &mut TestIds)? {
                Admission::Admitted(a) => Ok(*a),
                other => panic!("{other:?}"),
            }
        }
        let a = on(&mut rooms, "r", 2, "a").unwrap();
        assert_eq!(shard_of(&rooms, a.id), 2);
        let b = on(&mut rooms, "r", 0, "b").unwrap();
        assert_eq!(shard_of(&rooms, b.id), 0);
        assert_eq!(b.notify, vec![ShardId(2)]);
        assert_eq!(
            on(&mut rooms, "r", 2, "c").unwrap_err().code(),
            "no_capacity",
            "shard 2 is full"
        );
        assert_eq!(
            rooms.prepare_join_on("r", ShardId(3)).unwrap_err(),
            RoomError::NoShard
        );
    }

    #[test]
    fn join_and_leave_keep_rosters_and_counts() {
        let mut rooms = Directory::new(limits(), 1);
        let a = join(&mut rooms, "r", "ann").unwrap();
        assert_eq!(a.etag, format!("\"{}.1\"", a.id));
        assert_eq!(a.resource.len(), 32);
        assert_eq!(a.roster.members.len(), 1);
        let b = join(&mut rooms, "r", "\u{7}bob\n").unwrap();
        assert_eq!(b.name, "bob", "control characters are dropped");
        assert_eq!(b.room, a.room, "one room, one id");
        let names: Vec<_> = b.roster.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["ann", "bob"]);
        assert_eq!(rooms.shard_loads()[0].participants, 2);
        // Identity: the id without authentication.
        let m = rooms.find("r", &a.resource, Flavor::Participant).unwrap();
        assert_eq!(m.identity, a.id.to_string());

        let d = rooms.leave(a.id).unwrap();
        assert_eq!(d.shard, ShardId(0));
        let (roster, shards) = d.roster.unwrap();
        assert_eq!(roster.members.len(), 1);
        assert_eq!(shards, vec![ShardId(0)]);
        assert_eq!(rooms.shard_loads()[0].participants, 1);
        assert_eq!(
            rooms.leave(a.id).unwrap_err(),
            RoomError::UnknownParticipant(a.id)
        );
    }

    #[test]
    fn the_last_leave_closes_the_room() {
        let mut rooms = Directory::new(limits(), 1);
        let a = join(&mut rooms, "r", "a").unwrap();
        assert_eq!(rooms.room_count(), 1);
        let d = rooms.leave(a.id).unwrap();
        assert!(d.roster.is_none());
        assert_eq!(rooms.room_count(), 0);
        assert_eq!(rooms.participant_count(), 0);
        assert_eq!(rooms.shard_loads()[0].participants, 0);
        // A new room of that name has the same id (its keyed name) and
        // nothing of the old one.
        let b = join(&mut rooms, "r", "b").unwrap();
        assert_eq!(b.room, a.room);
        assert_eq!(rooms.room("r").map(|r| r.members.len()), Some(1));
    }

    #[test]
    fn resources_are_found_by_room_and_flavor_only() {
        let mut rooms = Directory::new(limits(), 1);
        let a = join(&mut rooms, "r", "a").unwrap();
        assert!(rooms.find("r", &a.resource, Flavor::Participant).is_ok());
        for (room, resource, flavor) in [
            ("s", a.resource.as_str(), Flavor::Participant),
            ("r", a.resource.as_str(), Flavor::Whip),
            ("r", "0123", Flavor::Participant),
        ] {
            let e = rooms.find(room, resource, flavor).unwrap_err();
            assert_eq!(e.code(), "not_found");
            assert!(!e.to_string().contains(&a.resource), "{e}");
        }
    }

    #[test]
    fn patch_needs_the_current_etag() {
        let mut rooms = Directory::new(limits(), 1);
        let a = join(&mut rooms, "r", "a").unwrap();
        fn patch(
            rooms: &Directory,
            resource: &str,
            if_match: Option<&str>,
        ) -> Result<ParticipantId, RoomError> {
            rooms.check_patch("r", resource, if_match).map(|m| m.id)
        }
        let res = a.resource.as_str();
        assert_eq!(
            patch(&rooms, res, None),
            Err(RoomError::PreconditionRequired)
        );
        assert_eq!(
            patch(&rooms, res, Some("*")),
            Err(RoomError::PreconditionRequired)
        );
        assert_eq!(
            patch(&rooms, res, Some("\"1.1\"")),
            Err(RoomError::EtagMismatch {
                current: a.etag.clone()
            })
        );
        assert_eq!(patch(&rooms, res, Some(&format!(" {} ", a.etag))), Ok(a.id));

        // An applied renegotiation moves the ETag on; a refused one does not.
        let r = rooms
            .begin_renegotiate("r", &a.resource, Some(&a.etag))
            .unwrap();
        assert_eq!(r.previous, "v=0 (an offer)");
        assert_eq!(rooms.finish_renegotiate(a.id, None), Some(a.etag.clone()));
        rooms
            .begin_renegotiate("r", &a.resource, Some(&a.etag))
            .unwrap();
        let next = rooms
            .finish_renegotiate(a.id, Some("v=0 (another)".into()))
            .unwrap();
        assert_eq!(next, format!("\"{}.2\"", a.id));
        assert!(matches!(
            patch(&rooms, res, Some(&a.etag)),
            Err(RoomError::EtagMismatch { .. })
        ));
        let r = rooms
            .begin_renegotiate("r", &a.resource, Some(&next))
            .unwrap();
        assert_eq!(r.previous, "v=0 (another)");
    }

    #[test]
    fn one_renegotiation_at_a_time() {
        let mut rooms = Directory::new(limits(), 2);
        let a = join(&mut rooms, "r", "a").unwrap();
        let r = rooms
            .begin_renegotiate("r", &a.resource, Some(&a.etag))
            .unwrap();
        assert_eq!((r.id, r.shard), (a.id, ShardId(0)));
        assert_eq!(
            rooms
                .begin_renegotiate("r", &a.resource, Some(&a.etag))
                .unwrap_err(),
            RoomError::RenegotiationInProgress
        );
        rooms.finish_renegotiate(a.id, None);
        rooms
            .begin_renegotiate("r", &a.resource, Some(&a.etag))
            .unwrap();
        rooms.finish_renegotiate(a.id, None);
        // Its shard stopped (its members left with it): the participant is
        // gone, and so is its resource.
        rooms.shard_failed(ShardId(0), "boom".into());
        assert_eq!(
            rooms
                .begin_renegotiate("r", &a.resource, Some(&a.etag))
                .unwrap_err()
                .code(),
            "not_found"
        );
        assert_eq!(rooms.finish_renegotiate(a.id, None), None);
    }

    /// One seat per (identity, flavor): a join of an identity that holds
    /// one takes it over, even in a full room on a full shard; without an
    /// identity every join is someone new.
    #[test]
    fn a_join_of_the_same_identity_and_flavor_replaces_its_seat() {
        let mut rooms = Directory::new(
            Limits {
                max_participants_per_shard: 2,
                max_participants_per_room: 2,
                ..limits()
            },
            1,
        );
        let as_ = |identity, flavor| NewMember {
            identity: Some(identity),
            flavor,
            ..new_member(identity)
        };
        let admit = |rooms: &mut Directory, new: NewMember<'_>| -> Result<Admitted, RoomError> {
            let (shard, _) = rooms.prepare_join_as("r", new.identity, new.flavor)?;
            match rooms.admit("r", shard, false, new, &mut TestIds)? {
                Admission::Admitted(a) => Ok(*a),
                other => panic!("{other:?}"),
            }
        };
        let a1 = admit(&mut rooms, as_("alice", Flavor::Participant)).unwrap();
        assert_eq!(a1.replaced, None);
        let b = admit(&mut rooms, as_("bob", Flavor::Participant)).unwrap();
        // The room and the shard are full: alice still gets back in, in
        // place of herself.
        let a2 = admit(&mut rooms, as_("alice", Flavor::Participant)).unwrap();
        assert_eq!(a2.replaced, Some((a1.id, ShardId(0))));
        assert_eq!(a2.room, a1.room, "the room stays open");
        let ids: Vec<_> = a2.roster.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, [b.id, a2.id]);
        assert!(!rooms.contains(a1.id));
        assert_eq!(
            rooms
                .find("r", &a1.resource, Flavor::Participant)
                .unwrap_err()
                .code(),
            "not_found"
        );
        assert_eq!(rooms.participant_count(), 2);
        assert_eq!(rooms.shard_loads()[0].participants, 2);
        // Another flavor is another seat (here: no room for it); so is
        // another identity.
        assert_eq!(
            admit(&mut rooms, as_("alice", Flavor::Whep))
                .unwrap_err()
                .code(),
            "room_full"
        );
        assert_eq!(
            admit(&mut rooms, as_("carol", Flavor::Participant))
                .unwrap_err()
                .code(),
            "room_full"
        );
        // Without authentication there is no identity to hold a seat.
        assert_eq!(
            join(&mut rooms, "r", "alice").unwrap_err().code(),
            "room_full"
        );
    }

    #[test]
    fn lines_changed_updates_the_roster() {
        let mut rooms = Directory::new(limits(), 1);
        let a = join(&mut rooms, "r", "a").unwrap();
        let (roster, shards) = rooms.lines_changed(a.id, Vec::new(), Vec::new()).unwrap();
        assert_eq!(roster.members.len(), 1);
        assert_eq!(shards, vec![ShardId(0)]);
        assert!(
            rooms
                .lines_changed(ParticipantId(7), Vec::new(), Vec::new())
                .is_none()
        );
    }

    #[test]
    fn a_track_state_changes_the_roster_once_and_goes_with_its_track() {
        use str0m::media::MediaKind;
        let mut rooms = Directory::new(limits(), 1);
        let a = join(&mut rooms, "r", "a").unwrap();
        let v = MediaLine {
            mid: "v".into(),
            kind: MediaKind::Video,
        };
        rooms.lines_changed(a.id, vec![v], Vec::new()).unwrap();
        let muted = TrackState {
            muted: true,
            paused: false,
        };
        let states = |u: &RoomUpdate| u.members[0].states.clone();
        let (roster, shards) = rooms.track_state(a.id, v.mid, muted).unwrap();
        assert_eq!(states(&roster), vec![(v.mid, muted)]);
        assert_eq!(roster.members[0].state(v.mid), muted);
        assert_eq!(shards, vec![ShardId(0)]);
        // The same again changes nothing; a track it lacks, or a stranger,
        // neither.
        assert!(rooms.track_state(a.id, v.mid, muted).is_none());
        assert!(rooms.track_state(a.id, "x".into(), muted).is_none());
        assert!(rooms.track_state(ParticipantId(7), v.mid, muted).is_none());
        let both = TrackState {
            muted: true,
            paused: true,
        };
        let (roster, _) = rooms.track_state(a.id, v.mid, both).unwrap();
        assert_eq!(states(&roster), vec![(v.mid, both)]);
        // Back to the default: nothing listed.
        let (roster, _) = rooms
            .track_state(a.id, v.mid, TrackState::default())
            .unwrap();
        assert!(states(&roster).is_empty());
        // A renegotiation that drops the track drops its state.
        rooms.track_state(a.id, v.mid, muted).unwrap();
        let (roster, _) = rooms.lines_changed(a.id, Vec::new(), Vec::new()).unwrap();
        assert!(states(&roster).is_empty());
    }
}
