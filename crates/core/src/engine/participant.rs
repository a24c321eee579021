//! One participant on a shard, split by what each part owns: its
//! connection ([`Session`]: the `Rtc`, poisoning, the end-of-batch drain),
//! what it publishes ([`Publisher`]) and what it is sent ([`Subscriber`]).
//! The engine borrows the parts it needs apart (`let Participant { session,
//! subscriber, .. } = p`), so that forwarding can write into a
//! subscriber's `Rtc` while it walks its slots.
//!
//! Must not: decide what goes in a slot ([`super::policy`] does, from the
//! room view), know its addresses ([`super::demux`]) or its deadlines
//! ([`super::timers`]).

use std::time::Instant;

use str0m::Rtc;

use super::publisher::Publisher;
use super::session::Session;
use super::subscriber::Subscriber;
use crate::ids::{ParticipantId, RoomId};
use crate::offer::MediaLine;

pub(super) struct Participant {
    pub(super) room: RoomId,
    pub(super) session: Session,
    pub(super) publisher: Publisher,
    pub(super) subscriber: Subscriber,
}

impl Participant {
    pub(super) fn new(
        id: ParticipantId,
        room: RoomId,
        rtc: Rtc,
        tracks: &[MediaLine],
        slots: &[MediaLine],
    ) -> Self {
        let mut p = Participant {
            room,
            session: Session::new(id, rtc),
            publisher: Publisher::default(),
            subscriber: Subscriber::default(),
        };
        let _ = p.add_lines(tracks, slots);
        p
    }

    /// Re-reads what a negotiation decided: each track's rids, the stream
    /// guard, and each slot's send options.
    pub(super) fn negotiated(&mut self, now: Instant) {
        self.publisher.negotiated(&self.session.rtc, now);
        self.subscriber.negotiated(&mut self.session.rtc);
    }

    /// Adds m-lines from a (re)negotiation, ignoring mids already known.
    /// Returns true if anything was new.
    pub(super) fn add_lines(&mut self, tracks: &[MediaLine], slots: &[MediaLine]) -> bool {
        let t = self.publisher.add_tracks(tracks);
        let s = self.subscriber.add_slots(slots);
        t || s
    }
}
