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
        write!(f, "{}", self.0)
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
}
