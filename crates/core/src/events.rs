//! Room events sent to participants on their data channel (schema: docs/api.md).
//! Serialised with serde; built only when something changes, never per packet.

use serde::Serialize;

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct TrackJson {
    pub mid: String,
    pub kind: &'static str,
    /// Its publisher muted it: nothing of it is forwarded.
    pub muted: bool,
    /// Its media stopped arriving (camera off, track ended).
    pub paused: bool,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct MemberJson {
    pub id: String,
    pub name: String,
    pub tracks: Vec<TrackJson>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct SlotJson {
    pub mid: String,
    pub kind: &'static str,
    pub participant: Option<String>,
    pub track: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RoomEvent {
    Welcome {
        participant: String,
        room: String,
    },
    /// The members who publish or take part; receive-only viewers (WHEP,
    /// `/watch`) are only counted.
    Roster {
        participants: Vec<MemberJson>,
        viewers: usize,
    },
    Slots {
        slots: Vec<SlotJson>,
    },
    Speaker {
        participant: Option<String>,
    },
    /// The server removed the participant (API DELETE, shutdown, a new join
    /// of its identity (`replaced`), a failure): the last event before DTLS
    /// closes.
    Bye {
        reason: &'static str,
    },
    /// Another member left the room, and why: `left` (it left, or its
    /// node's snapshot no longer has it), a leave reason of its shard
    /// (`ice_disconnected`, `closed`, …), `replaced`, `node_draining` (it
    /// is moving to another node), `node_lost` (its node left the
    /// cluster), `shard_failed`. The roster that follows no longer lists
    /// it.
    Left {
        participant: String,
        name: String,
        reason: &'static str,
    },
    /// Dynacast, to a simulcast publisher: the rids of its track `mid` that
    /// some subscriber takes now; it may stop sending the others until a
    /// later `layers` names them again (then starting with a keyframe).
    Layers {
        mid: String,
        active: Vec<String>,
    },
    /// Dynacast, to a publisher of one scalable (SVC) encoding: how many of
    /// its spatial layers some subscriber takes now (the lowest always); it
    /// may encode only those (a lower `scalabilityMode`) until a later `svc`
    /// asks for more.
    Svc {
        mid: String,
        spatial: u8,
    },
    /// An application message from another participant (`from`: its id,
    /// `name`: its display name), to the whole room (`to` null) or to the
    /// ids in `to`.
    Message {
        from: String,
        name: String,
        to: Option<Vec<String>>,
        topic: String,
        payload: serde_json::Value,
    },
    /// A published track's state changed: its publisher muted or unmuted
    /// it (`muted`), or its media stopped or came back (`paused`). The
    /// roster's tracks carry the same two flags.
    Track {
        participant: String,
        mid: String,
        kind: &'static str,
        muted: bool,
        paused: bool,
    },
    /// The room is being recorded (`active`), or its recording `id`
    /// stopped; `error`: the recorder failed (a full disk) or fell behind,
    /// while the call goes on. Sent on start, stop and failure, and to a
    /// member who joins while a recording runs.
    Recording {
        active: bool,
        id: String,
        error: Option<String>,
    },
    /// A request of this participant's that was refused, and why (a
    /// message is never dropped without one).
    Error {
        request: &'static str,
        reason: &'static str,
    },
}

/// What a client may ask for on the data channel.
#[derive(serde::Deserialize, Debug, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientRequest {
    Pin {
        participant: String,
        mid: String,
    },
    Unpin {
        mid: String,
    },
    /// How the subscriber shows slot `mid`: its rendered size in CSS
    /// pixels (0x0: hidden, its video pauses) and, optionally, the highest
    /// quality it wants ("low", "medium", "high").
    View {
        mid: String,
        width: u16,
        height: u16,
        #[serde(default)]
        quality: Option<Quality>,
    },
    /// An application message to the room (`to` absent or null) or to the
    /// participants named in `to`, on `topic`, with any JSON `payload`.
    Message {
        #[serde(default)]
        to: Option<Vec<String>>,
        topic: String,
        #[serde(default)]
        payload: serde_json::Value,
    },
    /// Mutes (`muted: true`) or unmutes one of the participant's own
    /// published tracks, by its mid. A muted track is not forwarded; on
    /// unmute its subscribers get a keyframe.
    Mute {
        mid: String,
        muted: bool,
    },
}

/// A subscriber's cap on a slot's simulcast quality.
#[derive(serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    Low,
    Medium,
    High,
}

pub fn kind_str(kind: str0m::media::MediaKind) -> &'static str {
    match kind {
        str0m::media::MediaKind::Audio => "audio",
        str0m::media::MediaKind::Video => "video",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_matches_the_docs() {
        let e = RoomEvent::Slots {
            slots: vec![SlotJson {
                mid: "2".into(),
                kind: "video",
                participant: None,
                track: None,
            }],
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"slots","slots":[{"mid":"2","kind":"video","participant":null,"track":null}]}"#
        );
        let r: ClientRequest =
            serde_json::from_str(r#"{"type":"pin","participant":"p1","mid":"2"}"#).unwrap();
        assert_eq!(
            r,
            ClientRequest::Pin {
                participant: "p1".into(),
                mid: "2".into()
            }
        );
        assert!(serde_json::from_str::<ClientRequest>(r#"{"type":"dance"}"#).is_err());
    }
}
