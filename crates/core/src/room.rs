//! A room as one shard sees it: the whole roster (members on any shard, sent by
//! the control thread as a value), which of them live here, which peer shards
//! host the others, and who spoke last.
//!
//! Owns the ranking that fills receive slots (most recent speaker first, then
//! join order). Must not: hold participants' `Rtc`s (the engine does).

use std::time::{Duration, Instant};

use str0m::media::{MediaKind, Mid};

use crate::ids::{ParticipantId, RoomId, ShardId, TrackKey};
use crate::offer::MediaLine;

/// Audio louder than this (dBov, RFC 6464 as str0m reports it: 0 is loudest) counts as speech.
const SPEECH_LEVEL: i8 = -50;
/// Speech older than this does not count for the active speaker.
const SPEAKER_HOLD: Duration = Duration::from_millis(1500);
/// Weight of one audio packet in a member's speech activity (an exponential
/// average over packets: ~20 packets, 400 ms of 20 ms Opus frames).
const ACTIVITY_ALPHA: f32 = 0.05;
/// A member becomes the speaker with at least this activity...
const SPEAKER_MIN_ACTIVITY: f32 = 0.3;
/// ...and, to take over from a current speaker who still talks, this much more.
const SPEAKER_MARGIN: f32 = 0.2;

/// A member of a room as the control thread describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: ParticipantId,
    pub name: String,
    pub shard: ShardId,
    pub tracks: Vec<MediaLine>,
    /// A receive-only viewer (WHEP, `/watch`): counted in rosters, not listed.
    pub viewer: bool,
    /// Its tracks that are muted or paused (the rest are neither), as its
    /// shard reported them.
    pub states: Vec<(Mid, TrackState)>,
}

impl MemberInfo {
    /// The state of its track `mid`.
    pub fn state(&self, mid: Mid) -> TrackState {
        state_of(&self.states, mid)
    }
}

/// The state of track `mid` in a list of the tracks that are muted or
/// paused (the default when it is not listed).
pub fn state_of(states: &[(Mid, TrackState)], mid: Mid) -> TrackState {
    states
        .iter()
        .find(|(m, _)| *m == mid)
        .map_or(TrackState::default(), |(_, s)| *s)
}

/// A published track's state as its publisher's shard knows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackState {
    /// The participant said so (`{"type":"mute"}`): its media is not
    /// forwarded until it unmutes.
    pub muted: bool,
    /// Its media stopped (camera off, a track ended or replaced by none):
    /// nothing arrived for [`PAUSED_AFTER`].
    pub paused: bool,
}

/// A published track that sent nothing this long is reported paused (a
/// camera at its lowest frame rate sends every 200 ms or so; Opus with DTX
/// every 400 ms).
pub const PAUSED_AFTER: Duration = Duration::from_millis(1500);

/// The full roster of a room, sent to every shard hosting one of its members
/// whenever it changes.
#[derive(Clone, Debug)]
pub struct RoomUpdate {
    pub room: RoomId,
    pub name: String,
    pub members: Vec<MemberInfo>,
    /// Who left the room with this update, and why (a `left` event to the
    /// members who stay): `left`, a shard's leave reason, `node_lost` (its
    /// node left the cluster), `node_draining`. Empty for other changes.
    pub departed: Vec<Departed>,
}

/// A member who left with a roster update ([`RoomUpdate::departed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departed {
    pub id: ParticipantId,
    pub name: String,
    pub reason: &'static str,
}

#[derive(Debug)]
pub struct MemberView {
    pub info: MemberInfo,
    /// Last audio packet that carried speech.
    pub last_spoke: Option<Instant>,
    /// Recent speech activity in [0, 1] (share of recent packets with speech).
    pub activity: f32,
    /// When this member was last the active speaker: what slot ranking uses,
    /// so that two people talking at once do not make slots flap.
    pub last_dominant: Option<Instant>,
}

#[derive(Debug)]
pub struct RoomView {
    pub id: RoomId,
    pub name: String,
    /// In join order.
    pub members: Vec<MemberView>,
    /// Shards other than this one that host members: where this room's media goes.
    pub peer_shards: Vec<ShardId>,
    /// Members hosted on this shard.
    pub local: Vec<ParticipantId>,
    pub speaker: Option<ParticipantId>,
}

impl RoomView {
    pub fn new(id: RoomId, name: String) -> Self {
        RoomView {
            id,
            name,
            members: Vec::new(),
            peer_shards: Vec::new(),
            local: Vec::new(),
            speaker: None,
        }
    }

    /// Replaces the roster, keeping speech history of members that stay.
    /// Returns true if membership or tracks changed.
    pub fn apply(&mut self, update: RoomUpdate, my_shard: ShardId) -> bool {
        self.name = update.name;
        let mut changed = update.members.len() != self.members.len();
        let mut members = Vec::with_capacity(update.members.len());
        for info in update.members {
            let old = self.members.iter().find(|m| m.info.id == info.id);
            changed |= old.is_none_or(|o| o.info != info);
            members.push(MemberView {
                last_spoke: old.and_then(|o| o.last_spoke),
                activity: old.map_or(0.0, |o| o.activity),
                last_dominant: old.and_then(|o| o.last_dominant),
                info,
            });
        }
        self.members = members;
        self.local = self
            .members
            .iter()
            .filter(|m| m.info.shard == my_shard)
            .map(|m| m.info.id)
            .collect();
        let mut peers: Vec<ShardId> = self
            .members
            .iter()
            .map(|m| m.info.shard)
            .filter(|&s| s != my_shard)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        self.peer_shards = peers;
        if self.speaker.is_some_and(|s| !self.has_member(s)) {
            self.speaker = None;
        }
        changed
    }

    /// Every listed member's tracks with their state (what a roster
    /// update's `track` events are the difference of).
    pub fn track_states(&self) -> Vec<(TrackKey, MediaKind, TrackState)> {
        self.members
            .iter()
            .filter(|m| !m.info.viewer)
            .flat_map(|m| {
                m.info.tracks.iter().map(|l| {
                    let key = TrackKey {
                        participant: m.info.id,
                        mid: l.mid,
                    };
                    (key, l.kind, m.info.state(l.mid))
                })
            })
            .collect()
    }

    pub fn has_member(&self, id: ParticipantId) -> bool {
        self.members.iter().any(|m| m.info.id == id)
    }

    pub fn has_track(&self, t: TrackKey) -> bool {
        self.members
            .iter()
            .any(|m| m.info.id == t.participant && m.info.tracks.iter().any(|l| l.mid == t.mid))
    }

    pub fn member(&self, id: ParticipantId) -> Option<&MemberView> {
        self.members.iter().find(|m| m.info.id == id)
    }

    /// Records an audio packet's level; cheap enough for every audio packet.
    pub fn note_audio(
        &mut self,
        from: ParticipantId,
        level: Option<i8>,
        vad: Option<bool>,
        now: Instant,
    ) {
        let speaking = level.is_some_and(|l| l > SPEECH_LEVEL) && vad != Some(false);
        if let Some(m) = self.members.iter_mut().find(|m| m.info.id == from) {
            let x = if speaking { 1.0 } else { 0.0 };
            m.activity += ACTIVITY_ALPHA * (x - m.activity);
            if speaking {
                m.last_spoke = Some(now);
            }
        }
    }

    /// Re-evaluates the active speaker (called every room tick); returns true
    /// when it changed. A speaker keeps the floor while they talk unless
    /// someone is clearly more active (hysteresis against flapping).
    pub fn update_speaker(&mut self, now: Instant) -> bool {
        let recent = |m: &MemberView| {
            m.last_spoke
                .is_some_and(|t| now.saturating_duration_since(t) < SPEAKER_HOLD)
        };
        let current = self.speaker.and_then(|id| {
            self.members
                .iter()
                .find(|m| m.info.id == id)
                .filter(|m| recent(m))
                .map(|m| m.activity)
        });
        let candidate = self
            .members
            .iter()
            .filter(|m| recent(m) && m.activity >= SPEAKER_MIN_ACTIVITY)
            .max_by(|a, b| a.activity.total_cmp(&b.activity))
            .map(|m| (m.info.id, m.activity));
        let changed = match (candidate, current) {
            (Some((id, _)), None) => Some(id),
            (Some((id, act)), Some(cur))
                if Some(id) != self.speaker && act > cur + SPEAKER_MARGIN =>
            {
                Some(id)
            }
            _ => None,
        };
        if let Some(id) = changed {
            self.speaker = Some(id);
        }
        if let Some(id) = self.speaker
            && let Some(m) = self.members.iter_mut().find(|m| m.info.id == id)
        {
            m.last_dominant = Some(now);
        }
        changed.is_some()
    }

    /// Tracks of `kind` that `viewer` could receive, best first: most recent
    /// speaker first, then the rest in join order.
    pub fn ranked_tracks(&self, viewer: ParticipantId, kind: MediaKind) -> Vec<TrackKey> {
        let mut ranked: Vec<(Option<Instant>, usize, TrackKey)> = Vec::new();
        for (order, m) in self.members.iter().enumerate() {
            if m.info.id == viewer {
                continue;
            }
            for line in m.info.tracks.iter().filter(|l| l.kind == kind) {
                ranked.push((
                    m.last_dominant,
                    order,
                    TrackKey {
                        participant: m.info.id,
                        mid: line.mid,
                    },
                ));
            }
        }
        // Some(latest) first, then None; ties by join order.
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        ranked.into_iter().map(|(_, _, t)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u64, shard: usize) -> MemberInfo {
        MemberInfo {
            id: ParticipantId(id),
            name: format!("m{id}"),
            shard: ShardId(shard),
            viewer: false,
            states: Vec::new(),
            tracks: vec![
                MediaLine {
                    mid: "0".into(),
                    kind: MediaKind::Video,
                },
                MediaLine {
                    mid: "1".into(),
                    kind: MediaKind::Audio,
                },
            ],
        }
    }

    #[test]
    fn roster_and_ranking() {
        let mut r = RoomView::new(RoomId(1), "r".into());
        let changed = r.apply(
            RoomUpdate {
                room: RoomId(1),
                name: "r".into(),
                members: vec![info(1, 0), info(2, 1), info(3, 0)],
                departed: Vec::new(),
            },
            ShardId(0),
        );
        assert!(changed);
        assert_eq!(r.local, vec![ParticipantId(1), ParticipantId(3)]);
        assert_eq!(r.peer_shards, vec![ShardId(1)]);
        let ranked = r.ranked_tracks(ParticipantId(1), MediaKind::Video);
        assert_eq!(
            ranked.iter().map(|t| t.participant.0).collect::<Vec<_>>(),
            vec![2, 3]
        );
        // Participant 3 speaks for a while: it becomes the speaker and ranks first.
        let now = Instant::now();
        for _ in 0..20 {
            r.note_audio(ParticipantId(3), Some(-20), Some(true), now);
            r.note_audio(ParticipantId(2), Some(-100), None, now); // silence
        }
        assert!(r.update_speaker(now));
        assert_eq!(r.speaker, Some(ParticipantId(3)));
        assert!(!r.update_speaker(now));
        let ranked = r.ranked_tracks(ParticipantId(1), MediaKind::Video);
        assert_eq!(ranked[0].participant, ParticipantId(3));
        // 2 starts talking too, as much as 3: no flapping, 3 keeps the floor.
        for _ in 0..40 {
            r.note_audio(ParticipantId(3), Some(-20), Some(true), now);
            r.note_audio(ParticipantId(2), Some(-20), Some(true), now);
        }
        assert!(!r.update_speaker(now));
        // 3 goes quiet: 2 takes over.
        for _ in 0..40 {
            r.note_audio(ParticipantId(3), Some(-100), Some(false), now);
            r.note_audio(ParticipantId(2), Some(-20), Some(true), now);
        }
        assert!(r.update_speaker(now));
        assert_eq!(r.speaker, Some(ParticipantId(2)));
    }
}
