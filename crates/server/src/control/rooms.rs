//! The control thread's side of the room directory. The directory itself
//! (rooms and members, placement, admission limits, one seat per identity,
//! rosters, ETags, the renegotiation in-flight mark, [`RoomError`]) is
//! [`corelay_core::directory`], plain data shared with the simulator; it is
//! re-exported here under the names the control thread uses.
//!
//! Owns what the server adds: the ids of a newcomer ([`RandomIds`]: a
//! random public id, and its resource capability from the operating
//! system's CSPRNG). Must not: decide placement or admission (the
//! directory does), know HTTP (statuses are [`super::http`]'s), hold
//! channels to the shards ([`super::State`] tells them).

use corelay_core::ParticipantId;
pub use corelay_core::directory::{
    Admission, Admitted, Departure, Directory, Flavor, Ids, Limits, Member, NewMember,
    Renegotiation, Room, RoomError, ShardLoad, etag, valid_room_name,
};

/// A newcomer's ids as the server draws them: a random public id (so ids
/// tell nothing of how many joined; not a secret), and an unguessable
/// resource id, 128 bits from the operating system's CSPRNG (the secret).
pub struct RandomIds;

impl Ids for RandomIds {
    fn participant(&mut self) -> ParticipantId {
        ParticipantId(fastrand::u64(1..1 << 53))
    }

    fn resource(&mut self) -> Result<String, RoomError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|_| RoomError::NoRandomness)?;
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_capabilities() {
        let r = RandomIds.resource().unwrap();
        assert_eq!(r.len(), 32);
        assert!(r.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(r, RandomIds.resource().unwrap());
        let id = RandomIds.participant();
        assert!((1..1 << 53).contains(&id.0));
    }
}
