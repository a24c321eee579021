//! The data channel: room events to a participant (welcome, roster, slots,
//! speaker, layers; schema in docs/api.md) and its requests (pin, unpin,
//! view), each within the participant's request budget.
//!
//! Owns the JSON of the room protocol on the engine side. Must not: decide
//! slot contents itself ([`super::policy`] does) or write media.

use std::time::Instant;

use str0m::channel::{ChannelData, ChannelId};

use super::io::guarded;
use super::policy::{self, Assignment};
use super::{Engine, MAX_REQUEST_BYTES};
use crate::events::{ClientRequest, MemberJson, Quality, RoomEvent, SlotJson, TrackJson, kind_str};
use crate::ids::{ParticipantId, RoomId};
use crate::room::RoomView;

impl Engine {
    pub(super) fn on_channel_open(&mut self, now: Instant, id: ParticipantId, cid: ChannelId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        p.channel = Some(cid);
        let room_id = p.room;
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let welcome = RoomEvent::Welcome {
            participant: id.to_string(),
            room: room.name.clone(),
        };
        let roster = roster_event(room);
        let speaker = speaker_event(room);
        self.send_event(now, id, &welcome);
        self.send_event(now, id, &roster);
        self.send_slots(now, id);
        self.send_event(now, id, &speaker);
    }

    /// A message on the data channel: a request, if the budget allows.
    pub(super) fn on_channel_data(&mut self, now: Instant, id: ParticipantId, d: ChannelData) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        if d.data.len() > MAX_REQUEST_BYTES
            || !p.take_request(now, self.settings.participant.requests_per_second)
        {
            self.io.counters.dropped_requests += 1;
            return;
        }
        if !d.binary
            && let Ok(req) = serde_json::from_slice::<ClientRequest>(&d.data)
        {
            self.on_client_request(id, req);
        }
    }

    fn on_client_request(&mut self, id: ParticipantId, req: ClientRequest) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(room) = self.rooms.get(&p.room) else {
            return;
        };
        let done = match req {
            ClientRequest::Pin { participant, mid } => {
                let Ok(target) = participant.parse::<ParticipantId>() else {
                    return;
                };
                match policy::pin(&mut p.slots, room, id, &mid, target) {
                    Some(a) => a,
                    None => return,
                }
            }
            ClientRequest::Unpin { mid } => policy::unpin(&mut p.slots, room, id, &mid),
            ClientRequest::View {
                mid,
                width,
                height,
                quality,
            } => {
                if let Some(slot) = p.slots.iter_mut().find(|s| s.mid.to_string() == mid) {
                    slot.view.width = width;
                    slot.view.height = height;
                    slot.view.max_rank = match quality {
                        Some(Quality::Low) => 0,
                        Some(Quality::Medium) => 1,
                        Some(Quality::High) | None => u8::MAX,
                    };
                    self.io.realloc.push(id);
                }
                return;
            }
        };
        self.assigned(id, done);
    }

    /// Acts on an assignment: tell the subscriber, ask for keyframes of
    /// tracks new in its slots.
    pub(super) fn assigned(&mut self, id: ParticipantId, a: Assignment) {
        if a.changed {
            self.io.slots_dirty.push(id);
        }
        // New sources need a keyframe of the layer the allocation picks.
        if a.changed || !a.new_sources.is_empty() {
            self.io.realloc.push(id);
        }
    }

    pub(super) fn send_slots(&mut self, now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get(&id) else {
            return;
        };
        let ev = RoomEvent::Slots {
            slots: p
                .slots
                .iter()
                .map(|s| SlotJson {
                    mid: s.mid.to_string(),
                    kind: kind_str(s.kind),
                    participant: s.source.map(|t| t.participant.to_string()),
                    track: s.source.map(|t| t.mid.to_string()),
                })
                .collect(),
        };
        self.send_event(now, id, &ev);
    }

    /// The room's roster to each local member.
    pub(super) fn send_roster(&mut self, now: Instant, room_id: RoomId) {
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let (local, roster) = (room.local.clone(), roster_event(room));
        for id in local {
            self.send_event(now, id, &roster);
        }
    }

    /// The room's active speaker to each local member.
    pub(super) fn send_speaker(&mut self, now: Instant, room_id: RoomId) {
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let (local, speaker) = (room.local.clone(), speaker_event(room));
        for id in local {
            self.send_event(now, id, &speaker);
        }
    }

    /// Sends a room event on the participant's data channel, if it is open.
    pub(super) fn send_event(&mut self, now: Instant, id: ParticipantId, ev: &RoomEvent) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(cid) = p.channel else {
            return;
        };
        let Ok(text) = serde_json::to_string(ev) else {
            return;
        };
        let written = guarded(&mut self.io, id, &mut p.poisoned, |_| {
            p.rtc
                .channel(cid)
                .is_none_or(|mut ch| ch.write(false, text.as_bytes()).is_ok())
        });
        if written == Some(false) {
            self.io.counters.rtc_errors += 1;
        }
        self.drain(now, None, id);
    }
}

fn speaker_event(room: &RoomView) -> RoomEvent {
    RoomEvent::Speaker {
        participant: room.speaker.map(|s| s.to_string()),
    }
}

fn roster_event(room: &RoomView) -> RoomEvent {
    RoomEvent::Roster {
        viewers: room.members.iter().filter(|m| m.info.viewer).count(),
        participants: room
            .members
            .iter()
            .filter(|m| !m.info.viewer)
            .map(|m| MemberJson {
                id: m.info.id.to_string(),
                name: m.info.name.clone(),
                tracks: m
                    .info
                    .tracks
                    .iter()
                    .map(|l| TrackJson {
                        mid: l.mid.to_string(),
                        kind: kind_str(l.kind),
                    })
                    .collect(),
            })
            .collect(),
    }
}
