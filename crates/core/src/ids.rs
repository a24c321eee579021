//! Identifiers shared by the control thread and the shards. Plain `Copy` values:
//! they travel in messages, never as references.

use std::fmt;
use std::str::FromStr;

use str0m::media::Mid;

/// A participant, unique for the life of the process. Rendered as `p` + 12 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ParticipantId(pub u64);

impl fmt::Display for ParticipantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{:012x}", self.0)
    }
}

impl FromStr for ParticipantId {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let hex = s.strip_prefix('p').ok_or(())?;
        u64::from_str_radix(hex, 16)
            .map(ParticipantId)
            .map_err(|_| ())
    }
}

/// A room, numbered by the control thread (which keeps the name).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct RoomId(pub u64);

/// A shard: one pinned thread with its socket and its [`Engine`](crate::Engine),
/// numbered from 0 by the server.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default, serde::Serialize)]
#[serde(transparent)]
pub struct ShardId(pub usize);

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.remote_parts() {
            Some((node, shard)) => write!(f, "n{node}/{shard}"),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Where the ids of other nodes' shards start: a shard of another node of
/// the cluster is a peer like a shard of this one, reached over the relay
/// instead of the mesh (docs/architecture.md, "Cluster"). Its id names the
/// node by the slot this node's control thread gave it and the shard by its
/// index there.
const REMOTE_BASE: usize = 1 << 24;
/// Shards a remote node may have (ids per node slot).
pub const REMOTE_SHARDS_PER_NODE: usize = 256;
/// Node slots this node can tell apart.
pub const REMOTE_NODE_SLOTS: usize = 1 << 16;

impl ShardId {
    /// Shard `shard` of the node in slot `node`; `None` when either is out
    /// of range.
    pub fn remote(node: usize, shard: usize) -> Option<ShardId> {
        (node < REMOTE_NODE_SLOTS && shard < REMOTE_SHARDS_PER_NODE)
            .then(|| ShardId(REMOTE_BASE + node * REMOTE_SHARDS_PER_NODE + shard))
    }

    /// Whether it is a shard of another node.
    pub fn is_remote(self) -> bool {
        self.0 >= REMOTE_BASE
    }

    /// Its node slot and shard index, when it is a shard of another node.
    pub fn remote_parts(self) -> Option<(usize, usize)> {
        let n = self.0.checked_sub(REMOTE_BASE)?;
        let node = n / REMOTE_SHARDS_PER_NODE;
        (node < REMOTE_NODE_SLOTS).then_some((node, n % REMOTE_SHARDS_PER_NODE))
    }
}

/// One published track: its publisher and the mid of the m-line in the publisher's SDP.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TrackKey {
    pub participant: ParticipantId,
    pub mid: Mid,
}

/// One simulcast layer of a published track (layer 0 without simulcast):
/// what a keyframe request names.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LayerKey {
    pub track: TrackKey,
    /// The layer's stable id (its rid's position in the publisher's offer).
    pub layer: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participant_id_round_trips() {
        let id = ParticipantId(0xabc_def);
        let s = id.to_string();
        assert_eq!(s, "p000000abcdef");
        assert_eq!(s.parse::<ParticipantId>(), Ok(id));
        assert!("x12".parse::<ParticipantId>().is_err());
        assert!("pzz".parse::<ParticipantId>().is_err());
    }

    #[test]
    fn remote_shards_are_told_apart_from_local_ones() {
        let r = ShardId::remote(3, 7).unwrap();
        assert!(r.is_remote() && !ShardId(7).is_remote());
        assert_eq!(r.remote_parts(), Some((3, 7)));
        assert_eq!(ShardId(7).remote_parts(), None);
        assert_eq!(r.to_string(), "n3/7");
        assert_ne!(ShardId::remote(0, 0), ShardId::remote(0, 1));
        assert_eq!(ShardId::remote(0, REMOTE_SHARDS_PER_NODE), None);
        assert_eq!(ShardId::remote(REMOTE_NODE_SLOTS, 0), None);
    }
}
