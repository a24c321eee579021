//! The shard's own egress: a forwarded RTP packet written, encrypted and
//! handed to the socket by the engine, past str0m's send path.
//!
//! str0m sends each slot's first packets itself (which settles the stream's
//! clock rate, payload type for resends and the mid until the receiver binds
//! the SSRC); after that every packet of a connected subscriber goes here:
//! its header (the slot's SSRC, sequence number and timestamp, the end-to-end
//! extensions, a transport-wide sequence number from str0m, the mid until the
//! receiver has reported on the SSRC), its payload (VP8 descriptor patched),
//! AES with a copy of the subscriber's SRTP transmit context into the buffer
//! of a datagram already sent (no allocation per packet), and str0m told
//! of the send ([`str0m::change::DirectApi::note_own_send`]: sender report
//! counts and RTP time, statistics, the pacer's debt, the TWCC send register,
//! the estimator) so that reports, feedback, the estimate and padding stay
//! str0m's and stay right. The datagrams wait in the subscriber's `held`
//! list until the end of the receive batch, so that a frame's packets
//! still leave as one GSO run.
//!
//! Resends: each forwarded video packet is kept once in the shard's
//! [`Recent`] (the publisher's payload, shared) and each slot it went to
//! keeps a small entry naming it, for the subscriber's resend history time;
//! a NACK str0m cannot answer from its own history reaches
//! [`answer_nacks`], which hands the packet back to str0m to send on the
//! RTX stream, under its resend-ratio cap. str0m keeps a few of the packets
//! a second as padding material (it pads and probes by resending recent
//! packets; str0m patch 15), not in its resend history.
//!
//! What it saves per forwarded packet against `write_rtp`: str0m's send
//! queue, its walk of the subscriber's `Rtc` to find the packet, and the
//! clock feed before each write (the send is told its time). Measured at 70
//! rooms of 4: 4.7 % less server CPU per forwarded packet, and 6.5 % less
//! again once str0m took its padding from these packets (str0m patch 15)
//! instead of a copy of each in its resend history.
//!
//! Owns: the per-subscriber SRTP copy and scratch buffer, the resend
//! history (the shard's and each slot's). Must not: choose what a slot
//! shows or rewrite numbering (that is [`super::forward`] and
//! [`super::slot`]); send anything str0m has not been told of.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::Rtc;
use str0m::media::{Mid, Pt};
use str0m::net::Transmit;
use str0m::rtp::{
    ExtensionMap, ExtensionValues, RtpHeader, RtpWrite, SeqNo, SrtpContext, Vp8Patch,
};

use crate::media::{E2eExt, MediaPacket};
use crate::svc::dd::DdRaw;

/// Room for the largest packet: an RTP header with every extension and a
/// payload that fits a datagram (larger payloads go through str0m, which
/// refuses them in its own way).
const BUF_LEN: usize = 2048;
/// The largest payload this path writes.
const MAX_PAYLOAD: usize = 1500;
/// The most packets a slot's history holds, whatever its time (about 3 s of
/// a 3 Mbit/s layer).
const MAX_HISTORY: usize = 1024;

/// A subscriber's side of the own egress: its SRTP transmit context (a copy
/// of str0m's, same keys) and the buffer a packet is written into before it
/// is encrypted.
pub(super) struct Egress {
    tx: SrtpContext,
    buf: Vec<u8>,
}

impl Egress {
    /// From the subscriber's `Rtc` once its DTLS handshake gave SRTP keys.
    fn new(rtc: &mut Rtc) -> Option<Box<Self>> {
        // The copy never sends SRTCP (str0m sends every report itself).
        let (_, tx) = rtc.direct_api().srtp_contexts(0)?;
        Some(Box::new(Egress {
            tx,
            buf: vec![0; BUF_LEN],
        }))
    }
}

/// The video packets the shard forwarded on the own egress lately, once
/// each however many subscribers it went to: what a resend needs of the
/// publisher's packet (its payload, shared, not copied). A slot's history
/// refers to them by number, so that a forwarded packet costs its slot a
/// small entry and no reference count (str0m's per-subscriber history
/// entry, and a first form of this one that held the payload per slot,
/// were each about 7 % of the shard at 70 rooms of 4).
#[derive(Default)]
pub(super) struct Recent {
    /// The number of `items`' first entry.
    first: u64,
    items: VecDeque<Kept>,
    /// The instant slot histories count their milliseconds from.
    epoch: Option<Instant>,
    /// The longest resend history of the subscribers sent to, in the last
    /// [`KEEP_WINDOW`] and the one before: how long packets stay here.
    longest: [Duration; 2],
    window_at: Option<Instant>,
}

/// How often [`Recent`] forgets the longest resend history it has seen (so
/// that a long one leaving shortens what it keeps).
const KEEP_WINDOW: Duration = Duration::from_secs(2);

struct Kept {
    at: Instant,
    received: Instant,
    marker: bool,
    ext: E2eExt,
    dd: Option<Arc<DdRaw>>,
    payload: Arc<[u8]>,
}

/// The most packets [`Recent`] holds, whatever their age (about 5 s of a
/// shard forwarding 50,000 a second).
const MAX_RECENT: usize = 1 << 18;

impl Recent {
    /// A subscriber whose history is `keep` long was sent a packet.
    fn note_keep(&mut self, keep: Duration) {
        if let Some(l) = self.longest.get_mut(1)
            && keep > *l
        {
            *l = keep;
        }
    }

    /// Keeps `media` (sent at `now`) and returns its number. What is older
    /// than the longest resend history of the subscribers sent to lately
    /// goes (so the payloads are held as long as str0m's per-subscriber
    /// history held them).
    pub(super) fn keep(&mut self, now: Instant, media: &MediaPacket) -> u64 {
        if self
            .window_at
            .is_none_or(|t| now.saturating_duration_since(t) >= KEEP_WINDOW)
        {
            self.window_at = Some(now);
            self.longest = [self.longest[1], Duration::ZERO];
        }
        let age = self.longest[0].max(self.longest[1]);
        while self
            .items
            .front()
            .is_some_and(|k| now.saturating_duration_since(k.at) > age)
            || self.items.len() >= MAX_RECENT
        {
            self.items.pop_front();
            self.first += 1;
        }
        self.items.push_back(Kept {
            at: now,
            received: media.received,
            marker: media.marker,
            ext: media.ext,
            dd: media.dd.clone(),
            payload: media.payload.clone(),
        });
        self.first + self.items.len() as u64 - 1
    }

    /// `now` in milliseconds since the first packet kept (wraps after 49
    /// days; only differences of a few seconds are taken).
    fn ms(&mut self, now: Instant) -> u32 {
        let epoch = *self.epoch.get_or_insert(now);
        now.saturating_duration_since(epoch).as_millis() as u32
    }

    fn get(&self, n: u64) -> Option<&Kept> {
        let i = usize::try_from(n.checked_sub(self.first)?).ok()?;
        self.items.get(i)
    }
}

/// One packet a slot sent on the own egress, kept for a resend: what its
/// header said that is the slot's own, and the number of the publisher's
/// packet in [`Recent`].
struct Sent {
    seq: u64,
    kept: u64,
    time: u32,
    /// When it was sent, in milliseconds of [`Recent`]'s clock.
    at_ms: u32,
    pt: Pt,
    patch: Option<Vp8Patch>,
    /// Its RTP marker as this slot sent it (an SVC slot ends its pictures
    /// at its own highest spatial layer, not at the publisher's).
    marker: bool,
}

/// A slot's side of the own egress: the header extension ids of its m-line
/// and its resend history (video only; in sequence order).
#[derive(Default)]
pub(super) struct SlotEgress {
    exts: Option<ExtensionMap>,
    history: VecDeque<Sent>,
    /// When `history` was last trimmed, in milliseconds of [`Recent`]'s
    /// clock (see [`PRUNE_MS`]).
    pruned_ms: u32,
    /// The highest sequence number in `history` (its last entry's), kept
    /// here: reading that entry for the order check was a cache miss per
    /// packet.
    last_seq: Option<u64>,
}

/// How often a slot's history drops what it need not keep any more, in
/// milliseconds: each look at its oldest entry was a cache miss when made
/// per packet. The history holds at most this much more than the
/// subscriber's resend time, and a NACK is answered only within that time
/// anyway ([`SlotEgress::find`]).
const PRUNE_MS: u32 = 100;

impl std::fmt::Debug for SlotEgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotEgress")
            .field("history", &self.history.len())
            .finish()
    }
}

impl SlotEgress {
    /// A renegotiation may have moved the extension ids.
    pub(super) fn renegotiated(&mut self) {
        self.exts = None;
    }

    /// Whether any packet of this slot went out on the own egress lately
    /// (only such a slot can have NACKs str0m cannot answer).
    fn active(&self) -> bool {
        !self.history.is_empty()
    }

    /// Adds `sent`; what was sent more than `keep` before it goes (and
    /// what [`Recent`] let go of, which cannot be resent).
    fn remember(&mut self, sent: Sent, recent: &Recent, keep: Duration) {
        if sent.at_ms.wrapping_sub(self.pruned_ms) >= PRUNE_MS {
            self.pruned_ms = sent.at_ms;
            let keep_ms = keep.as_millis() as u32;
            while self.history.front().is_some_and(|s| {
                s.kept < recent.first || sent.at_ms.wrapping_sub(s.at_ms) > keep_ms
            }) {
                self.history.pop_front();
            }
        }
        if self.history.len() >= MAX_HISTORY {
            self.history.pop_front();
        }
        // Kept sorted for the lookup of a NACK: a late packet (the
        // publisher's resend of one lost on its way in) goes in its place.
        match self.last_seq {
            Some(last) if last >= sent.seq => {
                if let Err(i) = self.history.binary_search_by_key(&sent.seq, |s| s.seq) {
                    self.history.insert(i, sent);
                }
            }
            _ => {
                self.last_seq = Some(sent.seq);
                self.history.push_back(sent);
            }
        }
    }

    /// Packet `seq` and the publisher's packet it carried, if sent at most
    /// `keep` before `now`.
    fn find<'r>(
        &self,
        seq: u64,
        recent: &'r Recent,
        now: Instant,
        keep: Duration,
    ) -> Option<(&Sent, &'r Kept)> {
        let i = self.history.binary_search_by_key(&seq, |s| s.seq).ok()?;
        let sent = self.history.get(i)?;
        let kept = recent
            .get(sent.kept)
            .filter(|k| now.saturating_duration_since(k.at) <= keep)?;
        Some((sent, kept))
    }
}

/// What a slot changes in the publisher's packet besides its numbering.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Changes {
    /// VP8 picture ids continuous across the slot's switches.
    pub(super) patch: Option<Vp8Patch>,
    /// The RTP marker this slot sends (the publisher's, or the end of the
    /// slot's highest SVC layer).
    pub(super) marker: bool,
}

/// What forwarding knows of one packet for one slot.
pub(super) struct Out<'a> {
    pub(super) mid: Mid,
    pub(super) pt: Pt,
    pub(super) seq: u64,
    pub(super) time: u32,
    pub(super) changes: Changes,
    pub(super) media: &'a MediaPacket,
    pub(super) nackable: bool,
    /// Its number in [`Recent`], once kept there for an earlier slot.
    pub(super) kept: &'a mut Option<u64>,
}

/// Writes `out` as a datagram for the subscriber whose `rtc` this is, and
/// tells str0m it was sent; `None` (nothing written, nothing counted) where
/// str0m must send it ([`str0m::change::DirectApi::note_own_send`]), or the
/// subscriber has no nominated ICE pair or SRTP keys yet. `keep` is how long
/// a video packet stays resendable (the subscriber's resend history).
/// The datagram is written into the buffer `buffer` gives (a sent one's,
/// from [`super::Outputs::spare_buffer`]), taken only once the packet is
/// sure to be written.
#[allow(clippy::too_many_arguments)]
pub(super) fn send(
    egress: &mut Option<Box<Egress>>,
    slot: &mut SlotEgress,
    rtc: &mut Rtc,
    now: Instant,
    out: Out<'_>,
    recent: &mut Recent,
    keep: Duration,
    buffer: impl FnOnce() -> Vec<u8>,
) -> Option<Transmit> {
    let media = out.media;
    if media.payload.len() > MAX_PAYLOAD {
        return None;
    }
    let (proto, source, destination) = rtc.direct_api().send_addr()?;
    if egress.is_none() {
        *egress = Egress::new(rtc);
    }
    let e = egress.as_mut()?;
    if slot.exts.is_none() {
        slot.exts = rtc.media(out.mid).map(|m| m.remote_extmap().clone());
    }
    let exts = slot.exts.as_ref()?;
    // str0m takes a few of these packets a second as padding material.
    let packet = || {
        rtp_write(
            out.pt,
            SeqNo::from(out.seq),
            out.time,
            Body::from(media).marker(out.changes.marker),
            out.changes.patch,
        )
        .nackable(out.nackable)
    };
    let own = rtc.direct_api().note_own_send(
        out.mid,
        None,
        exts,
        now,
        SeqNo::from(out.seq),
        out.time,
        media.received,
        media.payload.len(),
        packet,
    )?;
    let mut ext_vals = Body::from(media).ext_values();
    ext_vals.transport_cc = own.transport_cc;
    ext_vals.mid = own.mid;
    ext_vals.rid = own.rid;
    ext_vals.abs_send_time = Some(now);
    let mut header = RtpHeader {
        payload_type: out.pt,
        sequence_number: out.seq as u16,
        timestamp: out.time,
        ssrc: own.ssrc,
        marker: out.changes.marker,
        ext_vals,
        ..Default::default()
    };
    let header_len = header.write_to(&mut e.buf, exts);
    header.header_len = header_len;
    let (head, payload) = match &out.changes.patch {
        // A VP8 picture-id patch rewrites the payload's first bytes: the
        // patched copy goes behind the header in the scratch buffer.
        Some(p) => {
            let end = header_len + media.payload.len();
            p.copy_to(&media.payload, e.buf.get_mut(header_len..end)?);
            e.buf.get(..end)?.split_at_checked(header_len)?
        }
        // Unchanged: encrypted from the publisher's payload where it lies
        // (str0m patch 16), not copied behind the header first.
        None => (e.buf.get(..header_len)?, media.payload.as_ref()),
    };
    // Into a sent datagram's buffer (str0m patch 17): no allocation.
    let mut contents = buffer();
    e.tx.protect_rtp_parts_into(head, payload, &header, out.seq, &mut contents);
    if out.nackable {
        recent.note_keep(keep);
        // The publisher's packet once, however many slots it goes to.
        let kept = match *out.kept {
            Some(k) => k,
            None => {
                let k = recent.keep(now, media);
                *out.kept = Some(k);
                k
            }
        };
        let sent = Sent {
            seq: out.seq,
            kept,
            time: out.time,
            at_ms: recent.ms(now),
            pt: out.pt,
            patch: out.changes.patch,
            marker: out.changes.marker,
        };
        slot.remember(sent, recent, keep);
    }
    Some(Transmit {
        proto,
        source,
        destination,
        contents: contents.into(),
    })
}

/// What str0m's `write_rtp` takes of a forwarded packet, wherever the
/// shard holds it (the packet being forwarded, or [`Recent`]).
pub(super) struct Body<'a> {
    received: Instant,
    marker: bool,
    ext: &'a E2eExt,
    dd: Option<&'a Arc<DdRaw>>,
    payload: &'a Arc<[u8]>,
}

impl Body<'_> {
    /// The same packet with the marker a slot gives it.
    pub(super) fn marker(self, marker: bool) -> Self {
        Body { marker, ..self }
    }

    /// Its end-to-end header extensions, the dependency descriptor among
    /// them: what every leg's header carries of the publisher's.
    fn ext_values(&self) -> ExtensionValues {
        let mut ext = self.ext.to_ext();
        if let Some(dd) = self.dd {
            ext.user_values.set_arc(dd.clone());
        }
        ext
    }
}

impl<'a> From<&'a MediaPacket> for Body<'a> {
    fn from(m: &'a MediaPacket) -> Self {
        Body {
            received: m.received,
            marker: m.marker,
            ext: &m.ext,
            dd: m.dd.as_ref(),
            payload: &m.payload,
        }
    }
}

impl<'a> From<&'a Kept> for Body<'a> {
    fn from(k: &'a Kept) -> Self {
        Body {
            received: k.received,
            marker: k.marker,
            ext: &k.ext,
            dd: k.dd.as_ref(),
            payload: &k.payload,
        }
    }
}

/// A forwarded packet as str0m's `write_rtp` takes it, nackable (str0m's
/// send path, a resend handed back, padding material); the one place that
/// builds it. The payload is shared, not copied.
pub(super) fn rtp_write(
    pt: Pt,
    seq: SeqNo,
    time: u32,
    body: Body<'_>,
    patch: Option<Vp8Patch>,
) -> RtpWrite {
    let w = RtpWrite::new(pt, seq, time, body.received, body.payload.clone())
        .marker(body.marker)
        .ext_vals(body.ext_values())
        .nackable(true);
    match patch {
        Some(p) => w.vp8_patch(p),
        None => w,
    }
}

/// Hands str0m the packets of the own egress its subscriber NACKed (str0m's
/// history does not have them) for a resend on the RTX stream; the number
/// handed back (those sent at most `keep` ago). `scratch` is reused between
/// calls.
pub(super) fn answer_nacks<'a>(
    rtc: &mut Rtc,
    slots: impl Iterator<Item = (Mid, &'a SlotEgress)>,
    recent: &Recent,
    now: Instant,
    keep: Duration,
    scratch: &mut Vec<SeqNo>,
) -> u64 {
    let mut handed = 0;
    let mut api = rtc.direct_api();
    for (mid, slot) in slots.filter(|(_, s)| s.active()) {
        let Some(tx) = api.stream_tx_by_mid(mid, None) else {
            continue;
        };
        scratch.clear();
        tx.take_unanswered_nacks(scratch);
        for seq in scratch.iter() {
            // Not in the history: older than the subscriber's resend
            // history, or sent by str0m (whose history answered already).
            let Some((s, k)) = slot.find(**seq, recent, now, keep) else {
                continue;
            };
            let body = Body::from(k).marker(s.marker);
            if tx.resend_own(rtp_write(s.pt, *seq, s.time, body, s.patch), now) {
                handed += 1;
            }
        }
    }
    handed
}

#[cfg(test)]
mod tests {
    use super::super::io::fixture::{track, video};
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn packet(seq: u64, at: Instant) -> MediaPacket {
        video(track(2, "v"), seq, 9_000, false, at)
    }

    /// Keeps a packet sent at `at` for a subscriber whose history is `keep`.
    fn kept(recent: &mut Recent, at: Instant, keep: Duration) -> u64 {
        recent.note_keep(keep);
        recent.keep(at, &packet(0, at))
    }

    fn sent(recent: &mut Recent, seq: u64, kept: u64, at: Instant) -> Sent {
        Sent {
            seq,
            kept,
            time: seq as u32 * 10,
            at_ms: recent.ms(at),
            pt: Pt::from(96),
            patch: None,
            marker: false,
        }
    }

    fn seqs(slot: &SlotEgress) -> Vec<u64> {
        slot.history.iter().map(|s| s.seq).collect()
    }

    #[test]
    fn the_shard_keeps_a_publishers_packet_once_and_shares_its_payload() {
        let t0 = Instant::now();
        let mut recent = Recent::default();
        let m = packet(1, t0);
        recent.note_keep(Duration::from_secs(1));
        assert_eq!(recent.keep(t0, &m), 0);
        assert_eq!(recent.keep(t0, &packet(2, t0)), 1);
        let k = recent.get(0).expect("kept");
        assert!(Arc::ptr_eq(&k.payload, &m.payload), "shared, not copied");
        assert_eq!((k.received, k.marker), (m.received, m.marker));
        assert!(recent.get(2).is_none());
    }

    #[test]
    fn the_shard_forgets_what_no_recent_subscriber_can_still_ask_for() {
        let t0 = Instant::now();
        let mut recent = Recent::default();
        let second = Duration::from_secs(1);
        assert_eq!(kept(&mut recent, t0, second), 0);
        assert_eq!(kept(&mut recent, t0 + 500 * MS, second), 1);
        assert_eq!(kept(&mut recent, t0 + 1200 * MS, second), 2);
        // Older than the longest history sent to: gone; numbers stay.
        assert!(recent.get(0).is_none());
        assert!(recent.get(1).is_some() && recent.get(2).is_some());

        // No subscriber with a history for a window: the last window's
        // longest still holds...
        assert_eq!(recent.keep(t0 + 2100 * MS, &packet(0, t0)), 3);
        assert!(recent.get(1).is_none(), "1.6 s old, longer than 1 s");
        assert!(recent.get(2).is_some(), "0.9 s old");
        assert_eq!(recent.keep(t0 + 3500 * MS, &packet(0, t0)), 4);
        // ...and after another one nothing older than now is kept, not even
        // a packet 0.6 s old.
        assert_eq!(recent.keep(t0 + 4100 * MS, &packet(0, t0)), 5);
        assert!(recent.get(3).is_none() && recent.get(4).is_none());
        assert!(recent.get(5).is_some());
    }

    #[test]
    fn a_slots_history_stays_in_sequence_order_and_answers_a_nack_by_number() {
        let t0 = Instant::now();
        let keep = Duration::from_secs(1);
        let mut recent = Recent::default();
        let mut slot = SlotEgress::default();
        assert!(!slot.active());
        for seq in [1000, 1001, 1003] {
            let k = kept(&mut recent, t0, keep);
            let s = sent(&mut recent, seq, k, t0);
            slot.remember(s, &recent, keep);
        }
        // A late packet (the publisher's own resend) goes in its place; a
        // duplicate is not kept twice.
        let k = kept(&mut recent, t0, keep);
        let late = sent(&mut recent, 1002, k, t0);
        slot.remember(late, &recent, keep);
        let k2 = kept(&mut recent, t0, keep);
        let dup = sent(&mut recent, 1001, k2, t0);
        slot.remember(dup, &recent, keep);
        assert_eq!(seqs(&slot), vec![1000, 1001, 1002, 1003]);
        assert_eq!(slot.last_seq, Some(1003));
        assert!(slot.active());

        let (s, _) = slot.find(1002, &recent, t0, keep).expect("in the history");
        assert_eq!((s.seq, s.kept, s.time), (1002, 3, 10_020));
        let (s, _) = slot.find(1001, &recent, t0, keep).expect("in the history");
        assert_eq!(s.kept, 1, "the first send of a number is what it resends");
        assert!(slot.find(999, &recent, t0, keep).is_none());
        assert!(slot.find(1004, &recent, t0, keep).is_none());
    }

    #[test]
    fn a_nack_later_than_the_resend_history_is_not_answered() {
        let t0 = Instant::now();
        let keep = Duration::from_millis(300);
        let mut recent = Recent::default();
        let mut slot = SlotEgress::default();
        let k = kept(&mut recent, t0, keep);
        let s = sent(&mut recent, 1000, k, t0);
        slot.remember(s, &recent, keep);
        assert!(slot.find(1000, &recent, t0 + 300 * MS, keep).is_some());
        assert!(slot.find(1000, &recent, t0 + 301 * MS, keep).is_none());
    }

    #[test]
    fn a_slots_history_drops_what_is_too_old_or_gone_from_the_shard() {
        let t0 = Instant::now();
        let keep = Duration::from_millis(500);
        let mut recent = Recent::default();
        let mut slot = SlotEgress::default();
        // One packet every 50 ms for 2 s.
        for i in 0..40u64 {
            let at = t0 + 50 * i as u32 * MS;
            let k = kept(&mut recent, at, keep);
            let s = sent(&mut recent, 1000 + i, k, at);
            slot.remember(s, &recent, keep);
        }
        // What is kept spans the resend time and at most a prune interval
        // more, never the whole 2 s.
        let span = slot.history.back().map(|s| s.at_ms).unwrap_or(0)
            - slot.history.front().map(|s| s.at_ms).unwrap_or(0);
        assert!(
            (500..=500 + PRUNE_MS).contains(&span),
            "history spans {span} ms: {:?}",
            seqs(&slot)
        );
        assert_eq!(slot.history.back().map(|s| s.seq), Some(1039));
    }

    #[test]
    fn a_slots_history_is_bounded_whatever_its_time() {
        let t0 = Instant::now();
        let keep = Duration::from_secs(3);
        let mut recent = Recent::default();
        let mut slot = SlotEgress::default();
        let n = MAX_HISTORY as u64 + 100;
        for seq in 0..n {
            let k = kept(&mut recent, t0, keep);
            let s = sent(&mut recent, seq, k, t0);
            slot.remember(s, &recent, keep);
        }
        assert_eq!(slot.history.len(), MAX_HISTORY);
        assert_eq!(slot.history.front().map(|s| s.seq), Some(100));
        assert!(slot.find(99, &recent, t0, keep).is_none());
        assert!(slot.find(n - 1, &recent, t0, keep).is_some());
    }

    #[test]
    fn nothing_is_written_or_kept_before_the_subscriber_has_a_path() {
        let t0 = Instant::now();
        let mut rtc = Rtc::builder().set_rtp_mode(true).build(t0);
        let mut egress = None;
        let mut slot = SlotEgress::default();
        let mut recent = Recent::default();
        let mut kept = None;
        let mut big = packet(1, t0);
        big.payload = Arc::from(vec![0u8; MAX_PAYLOAD + 1]);
        for m in [packet(1, t0), big] {
            let out = Out {
                mid: "s0".into(),
                pt: Pt::from(96),
                seq: 1000,
                time: 0,
                changes: Changes::default(),
                media: &m,
                nackable: true,
                kept: &mut kept,
            };
            let mut took_buffer = false;
            let t = send(
                &mut egress,
                &mut slot,
                &mut rtc,
                t0,
                out,
                &mut recent,
                Duration::from_secs(1),
                || {
                    took_buffer = true;
                    Vec::new()
                },
            );
            assert!(t.is_none(), "str0m sends it");
            assert!(!took_buffer, "a sent datagram's buffer stays in the pool");
        }
        assert!(egress.is_none(), "no SRTP copy without keys");
        assert_eq!(kept, None);
        assert!(recent.get(0).is_none());
        assert!(!slot.active());
    }
}
