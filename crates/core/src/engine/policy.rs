//! Slot policy: which published track each of a subscriber's receive slots
//! shows, as pure functions of its slots and its room view.
//!
//! Pinned sources stay; the other slots show the room's best-ranked tracks
//! (the room ranks by recent speech, then join order); a slot whose source
//! left is refilled. Must not: touch an `Rtc`, send anything or request
//! keyframes (the engine acts on the returned [`Assignment`]).

use str0m::media::MediaKind;

use super::slot::Slot;
use crate::ids::{ParticipantId, TrackKey};
use crate::room::RoomView;

/// What an assignment changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Assignment {
    /// Some slot's source changed: the subscriber must be told.
    pub(super) changed: bool,
    /// Tracks that just entered a slot: they need a keyframe now.
    pub(super) new_sources: Vec<TrackKey>,
}

/// Fills `viewer`'s slots from its room's ranking.
pub(super) fn assign(slots: &mut [Slot], room: &RoomView, viewer: ParticipantId) -> Assignment {
    let mut a = Assignment::default();
    for kind in [MediaKind::Video, MediaKind::Audio] {
        if !slots.iter().any(|s| s.kind == kind) {
            continue;
        }
        let ranked = room.ranked_tracks(viewer, kind);
        // Drop sources that left the room.
        for s in slots.iter_mut().filter(|s| s.kind == kind) {
            if s.source.is_some_and(|t| !room.has_track(t)) {
                s.pinned = false;
                a.changed |= s.set_source(None);
            }
        }
        let n = slots.iter().filter(|s| s.kind == kind).count();
        let pinned: Vec<TrackKey> = slots
            .iter()
            .filter(|s| s.kind == kind && s.pinned)
            .filter_map(|s| s.source)
            .collect();
        let desired: Vec<TrackKey> = pinned
            .iter()
            .copied()
            .chain(ranked.into_iter().filter(|t| !pinned.contains(t)))
            .take(n)
            .collect();
        // Free unpinned slots showing something no longer desired.
        for s in slots.iter_mut().filter(|s| s.kind == kind && !s.pinned) {
            if s.source.is_some_and(|t| !desired.contains(&t)) {
                a.changed |= s.set_source(None);
            }
        }
        // Fill empty slots with desired tracks not yet shown, best first.
        for t in desired {
            if slots.iter().any(|s| s.source == Some(t)) {
                continue;
            }
            if let Some(s) = slots
                .iter_mut()
                .find(|s| s.kind == kind && s.source.is_none())
            {
                s.set_source(Some(t));
                a.changed = true;
                a.new_sources.push(t);
            }
        }
    }
    a
}

/// Pins `target`'s track of the slot's kind into the slot with mid `mid`
/// (it leaves any other slot it was in), then refills the rest. `None` when
/// the slot or the target's track does not exist.
pub(super) fn pin(
    slots: &mut [Slot],
    room: &RoomView,
    viewer: ParticipantId,
    mid: &str,
    target: ParticipantId,
) -> Option<Assignment> {
    let kind = slots.iter().find(|s| s.mid.to_string() == mid)?.kind;
    let line = room
        .member(target)?
        .info
        .tracks
        .iter()
        .find(|l| l.kind == kind)?;
    let track = TrackKey {
        participant: target,
        mid: line.mid,
    };
    let mut a = Assignment {
        changed: true,
        new_sources: Vec::new(),
    };
    for other in slots.iter_mut() {
        if other.source == Some(track) && other.mid.to_string() != mid {
            other.pinned = false;
            other.set_source(None);
        }
    }
    if let Some(slot) = slots.iter_mut().find(|s| s.mid.to_string() == mid) {
        slot.pinned = true;
        if slot.set_source(Some(track)) {
            a.new_sources.push(track);
        }
    }
    let rest = assign(slots, room, viewer);
    a.new_sources.extend(rest.new_sources);
    Some(a)
}

/// Releases the pin on slot `mid` (its source stays until the ranking
/// changes it), then refills.
pub(super) fn unpin(
    slots: &mut [Slot],
    room: &RoomView,
    viewer: ParticipantId,
    mid: &str,
) -> Assignment {
    if let Some(slot) = slots.iter_mut().find(|s| s.mid.to_string() == mid) {
        slot.pinned = false;
    }
    assign(slots, room, viewer)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::ids::{RoomId, ShardId};
    use crate::offer::MediaLine;
    use crate::room::{MemberInfo, RoomUpdate};

    fn room(ids: &[u64]) -> RoomView {
        let mut r = RoomView::new(RoomId(1), "r".into());
        r.apply(
            RoomUpdate {
                room: RoomId(1),
                name: "r".into(),
                members: ids
                    .iter()
                    .map(|&id| MemberInfo {
                        id: ParticipantId(id),
                        name: format!("m{id}"),
                        shard: ShardId(0),
                        viewer: false,
                        states: Vec::new(),
                        tracks: vec![MediaLine {
                            mid: "0".into(),
                            kind: MediaKind::Video,
                        }],
                    })
                    .collect(),
                departed: Vec::new(),
            },
            ShardId(0),
        );
        r
    }

    fn video_slots(n: usize) -> Vec<Slot> {
        (0..n)
            .map(|i| Slot::new(format!("s{i}").as_str().into(), MediaKind::Video))
            .collect()
    }

    fn shown(slots: &[Slot]) -> Vec<Option<u64>> {
        slots
            .iter()
            .map(|s| s.source.map(|t| t.participant.0))
            .collect()
    }

    fn track(id: u64) -> TrackKey {
        TrackKey {
            participant: ParticipantId(id),
            mid: "0".into(),
        }
    }

    #[test]
    fn fills_in_join_order_skipping_the_viewer_and_refills_on_leave() {
        let me = ParticipantId(1);
        let mut slots = video_slots(2);
        let a = assign(&mut slots, &room(&[1, 2, 3, 4]), me);
        assert_eq!(shown(&slots), vec![Some(2), Some(3)]);
        assert_eq!(a.new_sources, vec![track(2), track(3)]);
        assert!(
            slots
                .iter()
                .all(|s| s.layer.current.is_none() && s.layer.fresh)
        );
        // Nothing changed: nothing to tell.
        assert_eq!(
            assign(&mut slots, &room(&[1, 2, 3, 4]), me),
            Assignment::default()
        );
        // 2 leaves: its slot is refilled with 4; 3 stays where it was.
        let a = assign(&mut slots, &room(&[1, 3, 4]), me);
        assert_eq!(shown(&slots), vec![Some(4), Some(3)]);
        assert_eq!(a.new_sources, vec![track(4)]);
    }

    #[test]
    fn the_recent_speaker_displaces_the_last_ranked() {
        let me = ParticipantId(1);
        let mut r = room(&[1, 2, 3, 4]);
        let mut slots = video_slots(2);
        assign(&mut slots, &r, me);
        let now = Instant::now();
        for i in 0..40 {
            r.note_audio(ParticipantId(4), Some(-20), None, now);
            r.update_speaker(now + Duration::from_millis(i));
        }
        let a = assign(&mut slots, &r, me);
        assert!(a.changed);
        assert_eq!(shown(&slots), vec![Some(2), Some(4)]);
    }

    #[test]
    fn a_pin_holds_against_the_ranking_until_unpinned() {
        let me = ParticipantId(1);
        let r = room(&[1, 2, 3, 4]);
        let mut slots = video_slots(2);
        assign(&mut slots, &r, me);
        let a = pin(&mut slots, &r, me, "s1", ParticipantId(4)).unwrap();
        assert_eq!(shown(&slots), vec![Some(2), Some(4)]);
        assert_eq!(a.new_sources, vec![track(4)]);
        assert!(slots[1].pinned);
        // Pinning a track shown elsewhere moves it.
        pin(&mut slots, &r, me, "s0", ParticipantId(4)).unwrap();
        assert_eq!(shown(&slots), vec![Some(4), Some(2)]);
        // Unpinned, the ranking (2 and 3 first) takes the slot back.
        unpin(&mut slots, &r, me, "s0");
        assert_eq!(shown(&slots), vec![Some(3), Some(2)]);
        assert!(slots.iter().all(|s| !s.pinned));
        assert!(pin(&mut slots, &r, me, "nope", ParticipantId(4)).is_none());
        assert!(pin(&mut slots, &r, me, "s0", ParticipantId(9)).is_none());
    }
}
