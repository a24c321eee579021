//! The data channel: room events to a participant (welcome, roster, slots,
//! speaker, layers, track; schema in docs/api.md) and its requests (pin,
//! unpin, view, message, mute), each within the participant's request budget; the
//! room's application messages, to members here and, as one
//! [`PeerMsg::Message`] per peer shard, to members elsewhere; a refused
//! message answered with an `error` event that says why.
//!
//! Owns the JSON of the room protocol on the engine side. Must not: decide
//! slot contents itself ([`super::policy`] does) or write media.

use std::sync::Arc;
use std::time::Instant;

use str0m::channel::{ChannelData, ChannelId};
use str0m::media::MediaKind;

use super::io::guarded;
use super::policy::{self, Assignment};
use super::{Engine, MAX_REQUEST_BYTES, PeerMsg};
use crate::events::{ClientRequest, MemberJson, Quality, RoomEvent, SlotJson, TrackJson, kind_str};
use crate::ids::{LayerKey, ParticipantId, RoomId, TrackKey};
use crate::room::{RoomView, TrackState};

impl Engine {
    pub(super) fn on_channel_open(&mut self, now: Instant, id: ParticipantId, cid: ChannelId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        p.session.channel = Some(cid);
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
        self.send_recording_notice(now, id, room_id);
    }

    /// A message on the data channel: a request, if the budget allows.
    pub(super) fn on_channel_data(&mut self, now: Instant, id: ParticipantId, d: ChannelData) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let limits = &self.settings.participant;
        let refused = if d.data.len() > MAX_REQUEST_BYTES.max(limits.max_message_bytes) {
            Some("too_large")
        } else if !p.session.take_request(now, limits.requests_per_second) {
            Some("over_budget")
        } else {
            None
        };
        if let Some(reason) = refused {
            self.io.counters.dropped_requests += 1;
            if p.session.tell_over_budget(now) {
                self.send_event(
                    now,
                    id,
                    &RoomEvent::Error {
                        request: "request",
                        reason,
                    },
                );
            }
            return;
        }
        if d.binary {
            return;
        }
        match serde_json::from_slice::<ClientRequest>(&d.data) {
            Ok(ClientRequest::Message { to, topic, payload }) => {
                self.on_message(now, id, to, topic, payload);
            }
            Ok(ClientRequest::Mute { mid, muted }) if d.data.len() <= MAX_REQUEST_BYTES => {
                self.on_mute(now, id, &mid, muted);
            }
            Ok(req) if d.data.len() <= MAX_REQUEST_BYTES => self.on_client_request(id, req),
            Ok(_) => self.io.counters.dropped_requests += 1,
            Err(_) => {}
        }
    }

    /// An application message: checked (the sender's grant, the topic, the
    /// recipients), then delivered to the room's members here and handed
    /// once to each peer shard that hosts a recipient. Refused: counted in
    /// `dropped_requests` and answered with an `error` event.
    fn on_message(
        &mut self,
        now: Instant,
        id: ParticipantId,
        to: Option<Vec<String>>,
        topic: String,
        payload: serde_json::Value,
    ) {
        let checked = self.check_message(id, to.as_deref(), &topic);
        let (room_id, recipients) = match checked {
            Ok(ok) => ok,
            Err(reason) => {
                self.io.counters.dropped_requests += 1;
                self.send_event(
                    now,
                    id,
                    &RoomEvent::Error {
                        request: "message",
                        reason,
                    },
                );
                return;
            }
        };
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let name = room
            .member(id)
            .map(|m| m.info.name.clone())
            .unwrap_or_default();
        let event = RoomEvent::Message {
            from: id.to_string(),
            name,
            to: recipients
                .as_ref()
                .map(|r| r.iter().map(ToString::to_string).collect()),
            topic,
            payload,
        };
        let Ok(text) = serde_json::to_string(&event) else {
            return;
        };
        let text: Arc<str> = text.into();
        let to: Option<Arc<[ParticipantId]>> = recipients.map(Into::into);
        // One copy per peer shard that hosts a recipient (all of the room's
        // peer shards for a message to everyone), on the control lane:
        // lossless, and in order per sender.
        let mut shards: Vec<_> = match &to {
            None => room.peer_shards.clone(),
            Some(ids) => ids
                .iter()
                .filter_map(|r| room.member(*r).map(|m| m.info.shard))
                .filter(|s| *s != self.shard)
                .collect(),
        };
        shards.sort_unstable_by_key(|s| s.0);
        shards.dedup();
        for shard in shards {
            self.io.out.peers.push((
                shard,
                PeerMsg::Message {
                    room: room_id,
                    from: id,
                    to: to.clone(),
                    text: text.clone(),
                },
            ));
        }
        self.deliver_message(now, room_id, id, to.as_deref(), &text);
    }

    /// Whether `id` may send a message on `topic` to `to` (`None`: the
    /// room): its room and its recipients, or the reason it may not.
    fn check_message(
        &self,
        id: ParticipantId,
        to: Option<&[String]>,
        topic: &str,
    ) -> Result<(RoomId, Option<Vec<ParticipantId>>), &'static str> {
        let p = self.participants.get(&id).ok_or("not_allowed")?;
        if !p.session.publish_data {
            return Err("not_allowed");
        }
        if !valid_topic(topic) {
            return Err("bad_topic");
        }
        let room = self.rooms.get(&p.room).ok_or("not_allowed")?;
        let Some(to) = to else {
            return Ok((p.room, None));
        };
        if to.is_empty() {
            return Err("no_recipient");
        }
        if to.len() > MAX_RECIPIENTS {
            return Err("too_many_recipients");
        }
        let mut ids = Vec::with_capacity(to.len());
        for r in to {
            let r = r
                .parse::<ParticipantId>()
                .ok()
                .filter(|r| *r != id && room.member(*r).is_some())
                .ok_or("unknown_recipient")?;
            if !ids.contains(&r) {
                ids.push(r);
            }
        }
        Ok((p.room, Some(ids)))
    }

    /// Mutes or unmutes one of the participant's own tracks. A change is
    /// reported to the control thread (the roster and a `track` event
    /// carry it to the room); an unmuted video track's layers are asked
    /// for a keyframe, so its subscribers' pictures come back at once. An
    /// unknown mid is refused with an `error` event.
    fn on_mute(&mut self, now: Instant, id: ParticipantId, mid: &str, muted: bool) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(t) = p
            .publisher
            .tracks
            .iter_mut()
            .find(|t| t.mid.to_string() == mid)
        else {
            self.io.counters.dropped_requests += 1;
            self.send_event(
                now,
                id,
                &RoomEvent::Error {
                    request: "mute",
                    reason: "unknown_track",
                },
            );
            return;
        };
        if !t.flow.set_muted(muted) {
            return;
        }
        let (mid, state) = (t.mid, t.flow.state());
        let layers = if t.kind == MediaKind::Video && !muted {
            t.rids.len().clamp(1, super::MAX_LAYERS)
        } else {
            0
        };
        self.io
            .out
            .control
            .push(super::ShardEvent::TrackState { id, mid, state });
        let track = TrackKey {
            participant: id,
            mid,
        };
        for layer in (0..layers).filter_map(|l| u8::try_from(l).ok()) {
            self.request_keyframe(now, LayerKey { track, layer });
        }
    }

    /// Writes a message event's JSON to the members here it is for: those
    /// in `to`, or every member but the sender.
    pub(super) fn deliver_message(
        &mut self,
        now: Instant,
        room: RoomId,
        from: ParticipantId,
        to: Option<&[ParticipantId]>,
        text: &str,
    ) {
        let Some(room) = self.rooms.get(&room) else {
            return;
        };
        let local: Vec<ParticipantId> = room
            .local
            .iter()
            .copied()
            .filter(|m| *m != from && to.is_none_or(|to| to.contains(m)))
            .collect();
        for m in local {
            self.send_text(now, m, text);
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
                match policy::pin(&mut p.subscriber.slots, room, id, &mid, target) {
                    Some(a) => a,
                    None => return,
                }
            }
            ClientRequest::Unpin { mid } => policy::unpin(&mut p.subscriber.slots, room, id, &mid),
            ClientRequest::View {
                mid,
                width,
                height,
                quality,
            } => {
                if let Some(slot) = p
                    .subscriber
                    .slots
                    .iter_mut()
                    .find(|s| s.mid.to_string() == mid)
                {
                    slot.view.width = width;
                    slot.view.height = height;
                    slot.view.max_rank = match quality {
                        Some(Quality::Low) => 0,
                        Some(Quality::Medium) => 1,
                        Some(Quality::High) | None => u8::MAX,
                    };
                    self.io.todo.realloc.push(id);
                }
                return;
            }
            ClientRequest::Message { .. } | ClientRequest::Mute { .. } => return,
        };
        self.assigned(id, done);
    }

    /// Acts on an assignment: tell the subscriber, ask for keyframes of
    /// tracks new in its slots.
    pub(super) fn assigned(&mut self, id: ParticipantId, a: Assignment) {
        if a.changed {
            self.io.todo.slots_dirty.push(id);
        }
        // New sources need a keyframe of the layer the allocation picks.
        if a.changed || !a.new_sources.is_empty() {
            self.io.todo.realloc.push(id);
        }
    }

    pub(super) fn send_slots(&mut self, now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get(&id) else {
            return;
        };
        let ev = RoomEvent::Slots {
            slots: p
                .subscriber
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

    /// A `track` event to each local member for each track of the room
    /// whose state differs from `before` (a track new to the roster is
    /// told by the roster alone, unless it is muted or paused).
    pub(super) fn send_track_changes(
        &mut self,
        now: Instant,
        room_id: RoomId,
        before: &[(TrackKey, MediaKind, TrackState)],
    ) {
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let events: Vec<RoomEvent> = room
            .track_states()
            .into_iter()
            .filter(|(key, _, state)| {
                let old = before.iter().find(|(k, ..)| k == key).map(|(.., s)| *s);
                old.unwrap_or_default() != *state
            })
            .map(|(key, kind, state)| RoomEvent::Track {
                participant: key.participant.to_string(),
                mid: key.mid.to_string(),
                kind: kind_str(kind),
                muted: state.muted,
                paused: state.paused,
            })
            .collect();
        if events.is_empty() {
            return;
        }
        for id in room.local.clone() {
            for ev in &events {
                self.send_event(now, id, ev);
            }
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
        if let Ok(text) = serde_json::to_string(ev) {
            self.send_text(now, id, &text);
        }
    }

    /// Writes an event's JSON on the participant's data channel, if it is
    /// open.
    fn send_text(&mut self, now: Instant, id: ParticipantId, text: &str) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(cid) = p.session.channel else {
            return;
        };
        let written = guarded(&mut self.io, id, &mut p.session.poisoned, |_| {
            p.session
                .rtc
                .channel(cid)
                .is_none_or(|mut ch| ch.write(false, text.as_bytes()).is_ok())
        });
        if written == Some(false) {
            self.io.counters.rtc_errors += 1;
        }
        self.drain(now, None, id);
    }
}

/// The most recipients one message may name.
const MAX_RECIPIENTS: usize = 64;

/// A topic is 1 to 64 bytes of letters, digits and `_ . : / -`.
fn valid_topic(topic: &str) -> bool {
    (1..=64).contains(&topic.len())
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:/-".contains(&b))
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
                    .map(|l| {
                        let state = m.info.state(l.mid);
                        TrackJson {
                            mid: l.mid.to_string(),
                            kind: kind_str(l.kind),
                            muted: state.muted,
                            paused: state.paused,
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use str0m::channel::ChannelConfig;
    use str0m::media::MediaKind;

    use super::super::io::fixture::{HERE, add, engine, line, participant, room, track};
    use super::super::participant::Participant;
    use super::*;
    use crate::ids::ShardId;

    const SUB: u64 = 1;

    /// Subscriber 1 with two video slots; publishers 2 (here) and 3 (on
    /// shard 1), each with a video track; a viewer, 4.
    fn setup(t0: Instant) -> Engine {
        let mut e = engine();
        add(
            &mut e,
            t0,
            SUB,
            &[],
            &[line("s0", MediaKind::Video), line("s1", MediaKind::Video)],
        );
        room(
            &mut e,
            &[
                (SUB, HERE, false, vec![]),
                (2, HERE, false, vec![line("v", MediaKind::Video)]),
                (3, ShardId(1), false, vec![line("w", MediaKind::Video)]),
                (4, ShardId(1), true, vec![]),
            ],
        );
        e
    }

    fn data(p: &mut Participant, binary: bool, text: &str) -> ChannelData {
        let id = p
            .session
            .rtc
            .direct_api()
            .create_data_channel(ChannelConfig::default());
        ChannelData {
            id,
            binary,
            data: text.as_bytes().to_vec(),
        }
    }

    fn send(e: &mut Engine, now: Instant, text: &str) {
        let d = data(participant(e, SUB), false, text);
        e.on_channel_data(now, ParticipantId(SUB), d);
    }

    fn view(mid: &str, w: u16, h: u16, quality: &str) -> String {
        let q = if quality.is_empty() {
            String::new()
        } else {
            format!(r#","quality":"{quality}""#)
        };
        format!(r#"{{"type":"view","mid":"{mid}","width":{w},"height":{h}{q}}}"#)
    }

    fn slot_view(e: &mut Engine, i: usize) -> (u16, u16, u8) {
        let v = participant(e, SUB).subscriber.slots[i].view;
        (v.width, v.height, v.max_rank)
    }

    #[test]
    fn a_view_request_sets_the_slots_size_and_quality_cap_and_reallocates() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        send(&mut e, t0, &view("s1", 320, 180, "low"));
        assert_eq!(slot_view(&mut e, 1), (320, 180, 0));
        assert_eq!(
            slot_view(&mut e, 0),
            (1280, 720, u8::MAX),
            "the other slot as it was"
        );
        assert_eq!(e.io.todo.realloc, vec![ParticipantId(SUB)]);
        send(&mut e, t0, &view("s1", 640, 360, "medium"));
        assert_eq!(slot_view(&mut e, 1), (640, 360, 1));
        send(&mut e, t0, &view("s1", 0, 0, "high"));
        assert_eq!(slot_view(&mut e, 1), (0, 0, u8::MAX));
        send(&mut e, t0, &view("s1", 100, 100, ""));
        assert_eq!(
            slot_view(&mut e, 1),
            (100, 100, u8::MAX),
            "no quality: no cap"
        );
        assert!(
            e.io.todo.slots_dirty.is_empty(),
            "a view changes no assignment"
        );
    }

    #[test]
    fn requests_the_engine_cannot_read_change_nothing() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        for bad in [
            view("s9", 320, 180, "low"),   // no such slot
            view("s0", 320, 180, "ultra"), // no such quality
            r#"{"type":"dance"}"#.to_string(),
            r#"{"type":"pin","participant":"not-an-id","mid":"s0"}"#.to_string(),
            r#"{"type":"pin","participant":"p99","mid":"s0"}"#.to_string(),
            "not json".to_string(),
        ] {
            send(&mut e, t0, &bad);
        }
        let d = data(participant(&mut e, SUB), true, &view("s0", 1, 1, "low"));
        e.on_channel_data(t0, ParticipantId(SUB), d);
        assert_eq!(
            slot_view(&mut e, 0),
            (1280, 720, u8::MAX),
            "binary is not a request"
        );
        assert!(e.io.todo.realloc.is_empty());
        assert!(e.io.todo.slots_dirty.is_empty());
        assert!(
            participant(&mut e, SUB)
                .subscriber
                .slots
                .iter()
                .all(|s| s.source.is_none())
        );
        assert_eq!(e.io.counters.dropped_requests, 0, "within the budget");
    }

    #[test]
    fn an_oversized_request_is_refused_unread() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let mut big = view("s0", 320, 180, "low");
        big.push_str(&" ".repeat(MAX_REQUEST_BYTES));
        send(&mut e, t0, &big);
        assert_eq!(e.io.counters.dropped_requests, 1);
        assert_eq!(slot_view(&mut e, 0), (1280, 720, u8::MAX));
    }

    #[test]
    fn requests_beyond_the_budget_are_dropped_until_it_refills() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let rate = e.settings.participant.requests_per_second;
        assert!(rate > 0);
        // A burst of twice the rate, then nothing until time passes.
        for i in 0..2 * rate {
            send(&mut e, t0, &view("s0", i as u16 + 1, 1, ""));
        }
        assert_eq!(e.io.counters.dropped_requests, 0);
        send(&mut e, t0, &view("s0", 999, 1, ""));
        assert_eq!(e.io.counters.dropped_requests, 1);
        assert_eq!(
            slot_view(&mut e, 0).0,
            2 * rate as u16,
            "the last one allowed"
        );
        // One request's worth of time later: one more.
        let t1 = t0 + Duration::from_secs_f64(1.0 / f64::from(rate));
        send(&mut e, t1, &view("s0", 7, 1, ""));
        assert_eq!(slot_view(&mut e, 0).0, 7);
        send(&mut e, t1, &view("s0", 8, 1, ""));
        assert_eq!(e.io.counters.dropped_requests, 2);
        assert_eq!(slot_view(&mut e, 0).0, 7);
    }

    /// A message request; `pN` in `to` stands for participant N's id.
    fn message(to: &str, topic: &str, payload: &str) -> String {
        let mut to = to.to_owned();
        for n in [99, 4, 3, 2, 1] {
            to = to.replace(&format!("p{n}"), &ParticipantId(n).to_string());
        }
        format!(r#"{{"type":"message","to":{to},"topic":"{topic}","payload":{payload}}}"#)
    }

    /// Messages handed to peer shards: (shard, to, text).
    fn handed(e: &mut Engine) -> Vec<(ShardId, Option<Vec<u64>>, String)> {
        std::mem::take(&mut e.io.out.peers)
            .into_iter()
            .filter_map(|(s, m)| match m {
                PeerMsg::Message { from, to, text, .. } => {
                    assert_eq!(from, ParticipantId(SUB));
                    Some((
                        s,
                        to.map(|t| t.iter().map(|p| p.0).collect()),
                        text.to_string(),
                    ))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_message_goes_once_to_each_peer_shard_that_hosts_a_recipient() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        send(&mut e, t0, &message("null", "chat", r#"{"hi":1}"#));
        let h = handed(&mut e);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!((h[0].0, &h[0].1), (ShardId(1), &None));
        let ev: serde_json::Value = serde_json::from_str(&h[0].2).expect("json");
        assert_eq!(
            ev,
            serde_json::json!({"type": "message", "from": ParticipantId(SUB).to_string(),
                "name": "m1", "to": null, "topic": "chat", "payload": {"hi": 1}})
        );
        // To a member here only: no peer shard is bothered.
        send(&mut e, t0, &message(r#"["p2"]"#, "dm", "1"));
        assert_eq!(handed(&mut e), vec![]);
        // To members on both: one copy, naming them, for shard 1.
        send(&mut e, t0, &message(r#"["p2","p3","p4","p3"]"#, "dm", "1"));
        let h = handed(&mut e);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].1, Some(vec![2, 3, 4]), "named once each");
        assert_eq!(e.io.counters.dropped_requests, 0);
    }

    #[test]
    fn a_refused_message_is_counted_once_and_goes_nowhere() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let many: Vec<String> = (0..65).map(|_| "\"p2\"".to_string()).collect();
        let cases = [
            message(r#"["p99"]"#, "dm", "1"),
            message(r#"["p1"]"#, "dm", "1"),
            message("[]", "dm", "1"),
            message(&format!("[{}]", many.join(",")), "dm", "1"),
            message("null", "", "1"),
            message("null", "with space", "1"),
            message("null", &"t".repeat(65), "1"),
            message("null", "chat", &format!("\"{}\"", "x".repeat(16 * 1024))),
        ];
        for (i, m) in cases.iter().enumerate() {
            send(&mut e, t0 + Duration::from_secs(i as u64), m);
            assert_eq!(e.io.counters.dropped_requests, i as u64 + 1, "{m:.80}");
        }
        assert_eq!(handed(&mut e), vec![]);
        // Without the grant, nothing is sent either.
        participant(&mut e, SUB).session.publish_data = false;
        send(
            &mut e,
            t0 + Duration::from_secs(60),
            &message("null", "chat", "1"),
        );
        assert_eq!(e.io.counters.dropped_requests, cases.len() as u64 + 1);
        assert_eq!(handed(&mut e), vec![]);
    }

    #[test]
    fn a_message_from_a_peer_shard_is_not_sent_on_to_another() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        // Nothing to see without an open channel but that it does not
        // loop back to a peer, and that a stranger room is ignored.
        e.handle_peer(
            t0,
            PeerMsg::Message {
                room: crate::ids::RoomId(999),
                from: ParticipantId(3),
                to: None,
                text: "{}".into(),
            },
        );
        assert!(e.io.out.peers.is_empty());
    }

    #[test]
    fn a_pin_puts_the_member_in_that_slot_and_an_unpin_releases_it() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        send(
            &mut e,
            t0,
            r#"{"type":"pin","participant":"p3","mid":"s1"}"#,
        );
        let slots = &participant(&mut e, SUB).subscriber.slots;
        assert_eq!(slots[1].source, Some(track(3, "w")));
        assert!(slots[1].pinned);
        assert_eq!(
            e.io.todo.slots_dirty,
            vec![ParticipantId(SUB)],
            "told of its slots"
        );
        assert_eq!(
            e.io.todo.realloc,
            vec![ParticipantId(SUB)],
            "a layer for the new source"
        );

        e.io.todo.slots_dirty.clear();
        e.io.todo.realloc.clear();
        send(&mut e, t0, r#"{"type":"unpin","mid":"s1"}"#);
        assert!(!participant(&mut e, SUB).subscriber.slots[1].pinned);
    }

    #[test]
    fn the_roster_lists_members_in_join_order_and_counts_viewers() {
        let t0 = Instant::now();
        let e = setup(t0);
        let room = e.rooms.get(&super::super::io::fixture::ROOM).expect("room");
        let RoomEvent::Roster {
            participants,
            viewers,
        } = roster_event(room)
        else {
            panic!("a roster");
        };
        assert_eq!(viewers, 1);
        let ids: Vec<String> = participants.iter().map(|m| m.id.clone()).collect();
        let want: Vec<String> = (1..=3).map(|i| ParticipantId(i).to_string()).collect();
        assert_eq!(ids, want);
        assert_eq!(participants[1].name, "m2");
        assert_eq!(
            participants[2].tracks,
            vec![TrackJson {
                mid: "w".into(),
                kind: "video",
                muted: false,
                paused: false,
            }]
        );
        assert_eq!(
            speaker_event(room),
            RoomEvent::Speaker { participant: None }
        );
    }
}
