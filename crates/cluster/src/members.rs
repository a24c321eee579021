//! Who is in which room on each node: every node publishes its own members
//! on a NATS subject, and every node listens to the others'.
//!
//! A node's [`Snapshot`] is the whole of its members, not a change: it is
//! published when its rooms change and again every second, so a lost or
//! late message is repaired by the next one (the state is re-sent, never
//! acknowledged; docs/architecture.md, "Cluster"). Rosters across nodes are
//! built from the latest snapshot of each node. A node's members are
//! dropped when the node leaves the directory's view (its heartbeats
//! stopped, it left, it restarted), not when its snapshots pause: while
//! NATS itself is down, nothing is heard and every call goes on.
//!
//! The control thread's only: never on the packet path. Must not: know
//! rooms beyond their names, or the shards' ids (a member's shard is its
//! index on its own node).

use serde::{Deserialize, Serialize};

use futures_util::StreamExt;

/// Where node `N` publishes: `corelay.members.N`.
pub const SUBJECT_PREFIX: &str = "corelay.members.";
/// The most a snapshot may weigh (NATS's default max payload).
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 20;

/// One node's members, all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub node_id: String,
    /// The node's epoch (its directory record's): a snapshot of an older
    /// process of the node is stale.
    pub epoch: u64,
    /// Counts up with each snapshot of this epoch: an older one arriving
    /// late is ignored.
    pub seq: u64,
    pub rooms: Vec<RoomMembers>,
}

/// The members of one room on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomMembers {
    pub room: String,
    pub members: Vec<Member>,
}

/// One member, as the roster needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its public id (`ParticipantId`'s number).
    pub id: u64,
    pub name: String,
    /// The index of its shard on its node.
    pub shard: u32,
    pub tracks: Vec<Track>,
    /// A receive-only viewer.
    #[serde(default)]
    pub viewer: bool,
    /// Who it is (its token's `sub`; its id without authentication): one
    /// seat per identity holds across nodes.
    #[serde(default)]
    pub identity: String,
}

/// One of its published tracks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Track {
    pub mid: String,
    /// `audio` or `video`.
    pub kind: String,
    #[serde(default)]
    pub muted: bool,
    #[serde(default)]
    pub paused: bool,
}

/// Publishes `snapshot` on its node's subject. Best effort: while NATS is
/// away the client buffers a little and the next snapshot repairs the rest.
pub async fn publish(client: &async_nats::Client, snapshot: &Snapshot) -> Result<(), String> {
    let bytes = serde_json::to_vec(snapshot).map_err(|e| e.to_string())?;
    if bytes.len() > MAX_SNAPSHOT_BYTES {
        return Err(format!(
            "this node's members take {} bytes, more than the {MAX_SNAPSHOT_BYTES} a snapshot may",
            bytes.len()
        ));
    }
    client
        .publish(
            format!("{SUBJECT_PREFIX}{}", snapshot.node_id),
            bytes.into(),
        )
        .await
        .map_err(|e| e.to_string())
}

/// Every node's snapshots but `me`'s, as they arrive; a message that is
/// not a snapshot is skipped (and logged at debug). Ends when the client
/// closes for good.
pub async fn subscribe(
    client: &async_nats::Client,
    me: &str,
) -> Result<impl futures_util::Stream<Item = Snapshot> + use<>, String> {
    let sub = client
        .subscribe(format!("{SUBJECT_PREFIX}*"))
        .await
        .map_err(|e| e.to_string())?;
    let me = me.to_owned();
    Ok(sub.filter_map(move |msg| {
        let snapshot = if msg.payload.len() > MAX_SNAPSHOT_BYTES {
            None
        } else {
            match serde_json::from_slice::<Snapshot>(&msg.payload) {
                Ok(s) if s.node_id != me && msg.subject.as_str().ends_with(&s.node_id) => Some(s),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!("cluster: a members message that is not a snapshot: {e}");
                    None
                }
            }
        };
        std::future::ready(snapshot)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_and_tolerates_missing_defaults() {
        let s = Snapshot {
            node_id: "a".into(),
            epoch: 5,
            seq: 1,
            rooms: vec![RoomMembers {
                room: "r".into(),
                members: vec![Member {
                    id: 9,
                    name: "alice".into(),
                    shard: 1,
                    tracks: vec![Track {
                        mid: "0".into(),
                        kind: "audio".into(),
                        muted: true,
                        paused: false,
                    }],
                    viewer: false,
                    identity: "alice".into(),
                }],
            }],
        };
        let bytes = serde_json::to_vec(&s).unwrap();
        assert_eq!(serde_json::from_slice::<Snapshot>(&bytes).unwrap(), s);
        let old: Member = serde_json::from_str(
            r#"{"id":1,"name":"b","shard":0,"tracks":[{"mid":"1","kind":"video"}]}"#,
        )
        .unwrap();
        assert!(!old.viewer && !old.tracks[0].muted);
    }
}
