//! The participant's own media path once connected (opt-in:
//! [`crate::ParticipantConfig::own_media_path`]): RTP media sent and
//! received with copies of str0m's SRTP contexts, past str0m's streams.
//!
//! Why: a load client pays per packet what an SFU pays per packet, and
//! through str0m that is about as much as the SFU itself (issue 12), so one
//! client core cannot drive one server core to saturation. A client needs
//! far less than an SFU: it checks what arrives and reports it, and sends on
//! its own schedule.
//!
//! What it owns: the SRTP copies, the receive state of each primary RTP
//! stream str0m has mapped to a slot (SSRC, slot, highest SRTP index), the
//! transport-wide sequence numbers of what it sends, the transport-wide
//! feedback (the receipts of every RTP packet from the server, those str0m
//! handles too, in str0m's own `TwccRecvRegister`, so the feedback the
//! server's estimator sees is built as str0m builds it; str0m patch 25
//! stops str0m's), the NACKs of the streams it took over, and the
//! encrypted datagrams waiting for the participant's next poll. What stays
//! with str0m: ICE (and its RTT samples), DTLS, SCTP, all other RTCP
//! (keyframe requests in, receiver reports out), and the first packets of
//! every stream (an SSRC is taken over once str0m has delivered a packet
//! of it, so mapping SSRCs to slots, RTX (the resends its NACKs ask for)
//! and padding stay str0m's).
//!
//! What it skips: the server's transport-wide feedback on what this
//! client sends, when it comes alone in its SRTCP packet (str0m sends it
//! so, apart from its reports). The client runs no send-side estimator, so
//! str0m would only decrypt, parse and keep it, and be woken for it: about
//! twenty times a second per participant. It is recognised by the SRTCP
//! packet's clear first 8 bytes and dropped unread (counted).
//!
//! Why the feedback is its own: handing str0m the receipts meant a str0m
//! wake-up (a walk of every timer and a poll of every output) for every
//! participant every 50 ms; the receive registers' notes wait 250 ms.
//!
//! Each packet it takes is also noted in its str0m stream (str0m patch 13,
//! `StreamRx::note_received`, handed in at most 250 ms late),
//! so str0m's receive register knows it as if str0m had received it: its
//! receiver reports (loss, jitter, highest sequence number), statistics,
//! pause detection and duplicate check (a resend of a packet taken here is
//! not delivered again).
//!
//! What it does more simply than str0m: a video stream's gap is NACKed
//! once, when the packet after it arrives (str0m asks again every 33 ms).
//! Its NACKs and feedback are its only RTCP, under an SRTCP index range
//! apart from str0m's (from 2^30), so the two never share an index or a
//! GCM nonce. It must not touch str0m's streams.

use std::time::{Duration, Instant};

use str0m::media::Pt;
use str0m::rtp::rtcp::{Rtcp, RtcpPacket, TwccRecvRegister};
use str0m::rtp::{ExtensionMap, ExtensionValues, RtpHeader, SrtpContext, Ssrc, extend_u16};

/// Where the transmit copy's SRTCP index starts (str0m's own starts at 0).
const SRTCP_INDEX_BASE: u32 = 1 << 30;
/// Packets noted between hand-overs at most; past it they go to str0m
/// early rather than wait without bound.
const MAX_NOTED: usize = 4096;
/// How long the packets noted for receiver reports wait before they go to
/// str0m's receive registers (a receiver report goes out about once a
/// second; each hand-over wakes str0m).
const NOTE_HOLD: Duration = Duration::from_millis(250);
/// Transport-wide feedback goes out this long after the first receipt it
/// reports (str0m's cadence: 50 ms after its last while it has receipts).
const TWCC_HOLD: Duration = Duration::from_millis(50);
/// Receipts str0m's register keeps after reporting them (str0m's value).
const TWCC_KEEP: usize = 100;
/// Largest feedback packet (str0m: its MTU less 100).
const TWCC_MAX_BYTES: usize = 1000;
/// Feedback packets built at most per hand-over (a 50 ms window of a
/// participant's receipts fits one).
const TWCC_MAX_REPORTS: usize = 8;
/// Larger gaps are not NACKed (str0m's receiver keeps 100 sequence numbers).
const MAX_NACK_GAP: u64 = 100;
/// Nor gaps that end a silence longer than this.
const NACK_MAX_SILENCE: Duration = Duration::from_millis(250);
/// Received streams taken over at most (a participant has a few slots; a
/// slot's SSRC changes only when its server changes it).
const MAX_STREAMS: usize = 64;
/// Sent datagrams held between polls at most (a video frame is a few
/// dozen); past it a send is refused (counted by the caller).
const MAX_OUT: usize = 1024;

/// One primary RTP stream taken over from str0m.
struct RxStream {
    ssrc: Ssrc,
    pt: Pt,
    /// Its losses are NACKed (video).
    nack: bool,
    /// RTP clock rate (for str0m's jitter figure).
    clock: u32,
    /// When its latest packet arrived.
    last_at: Instant,
    slot: usize,
    /// Highest SRTP index (rollover counter << 16 | sequence number) seen.
    max_index: u64,
}

/// A packet taken, for str0m's receiver report figures.
struct Noted {
    ssrc: Ssrc,
    index: u64,
    timestamp: u32,
    clock: u32,
    at: Instant,
    len: usize,
}

/// A media packet this path received and authenticated.
pub(crate) struct Incoming<'a> {
    pub header: &'a RtpHeader,
    /// Extended sequence number (the SRTP index).
    pub seq: u64,
    pub slot: usize,
    pub payload: &'a [u8],
}

/// An SRTCP packet holding one transport-wide feedback packet (RTPFB,
/// FMT 15; draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1) and
/// nothing else, judged from its clear first bytes: its length is the
/// whole packet less the SRTCP index (4 bytes) and the tag of either
/// profile (AES-GCM's 16, AES-CM-HMAC-SHA1-80's 10).
fn lone_transport_feedback(data: &[u8]) -> bool {
    let (Some(&b0), Some(&pt), Some(&hi), Some(&lo)) =
        (data.first(), data.get(1), data.get(2), data.get(3))
    else {
        return false;
    };
    if b0 & 0x1f != 15 || pt != 205 {
        return false;
    }
    let words = usize::from(u16::from_be_bytes([hi, lo]));
    let rest = data.len().checked_sub((words + 1) * 4);
    matches!(rest, Some(20) | Some(14))
}

/// What became of a datagram offered to [`FastPath::receive`].
pub(crate) enum Rx<'a> {
    /// Not RTP of a stream this path took over: str0m's.
    NotOurs,
    /// Unparsable or failed authentication: dropped.
    Dropped,
    /// Padding only (no payload).
    Padding,
    /// The server's transport-wide feedback alone: nothing here reads it
    /// (see the module doc).
    Feedback,
    /// Media for a slot.
    Media(Incoming<'a>),
}

pub(crate) struct FastPath {
    rx: SrtpContext,
    tx: SrtpContext,
    exts: ExtensionMap,
    streams: Vec<RxStream>,
    /// Transport-wide receipts of every RTP packet from the server.
    twcc: TwccRecvRegister,
    /// The first receipt not reported yet.
    twcc_since: Option<Instant>,
    /// Packets taken, not yet noted in their str0m streams (for receiver
    /// reports): SSRC, SRTP index, RTP timestamp, clock rate, arrival,
    /// payload length...
    noted: Vec<Noted>,
    /// ...since the first of them arrived.
    noted_since: Option<Instant>,
    /// Next transport-wide sequence number to send.
    twcc_seq: u16,
    /// Encrypted datagrams for the next poll.
    out: Vec<Vec<u8>>,
    scratch: Vec<u8>,
    /// Sender SSRC of its NACKs (any but 0: it is in the SRTCP nonce).
    sender_ssrc: u32,
    /// NACK packets sent.
    nacks_sent: u64,
    /// The last received header (kept here: it is 320 bytes).
    header: RtpHeader,
}

impl FastPath {
    /// The path of a connected `rtc`; `None` before DTLS has given the keys.
    pub fn of(rtc: &mut str0m::Rtc) -> Option<FastPath> {
        let mut api = rtc.direct_api();
        let (rx, tx) = api.srtp_contexts(SRTCP_INDEX_BASE)?;
        api.app_twcc_feedback();
        Some(FastPath {
            rx,
            tx,
            exts: api.extension_map().clone(),
            streams: Vec::new(),
            twcc: TwccRecvRegister::new(TWCC_KEEP),
            twcc_since: None,
            noted: Vec::new(),
            noted_since: None,
            twcc_seq: 0,
            out: Vec::new(),
            scratch: vec![0; 1500],
            header: RtpHeader::default(),
            sender_ssrc: fastrand::u32(1..),
            nacks_sent: 0,
        })
    }

    /// Take over `ssrc` (payload type `pt` at `clock` Hz, for `slot`), of
    /// which str0m delivered the packet with SRTP index `index`; a later one
    /// of a stream already taken over moves its highest index. True when
    /// the stream is new.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        &mut self,
        ssrc: Ssrc,
        pt: Pt,
        clock: u32,
        nack: bool,
        slot: usize,
        index: u64,
        at: Instant,
    ) -> bool {
        match self.streams.iter_mut().find(|s| s.ssrc == ssrc) {
            Some(s) => {
                s.max_index = s.max_index.max(index);
                s.slot = slot;
                false
            }
            None => {
                // Bounded: a server that keeps changing SSRCs costs the
                // oldest ones their place (their packets go to str0m).
                if self.streams.len() >= MAX_STREAMS {
                    self.streams.remove(0);
                }
                self.streams.push(RxStream {
                    ssrc,
                    pt,
                    nack,
                    clock,
                    last_at: at,
                    slot,
                    max_index: index,
                });
                true
            }
        }
    }

    /// A received datagram, at `now`.
    pub fn receive(&mut self, data: &[u8], now: Instant) -> Rx<'_> {
        // RTP by RFC 7983's first byte, not RTCP (payload types 192 to 223
        // with the marker bit's position).
        let (Some(b0), Some(b1)) = (data.first(), data.get(1)) else {
            return Rx::NotOurs;
        };
        if !(128..=191).contains(b0) {
            return Rx::NotOurs;
        }
        if (192..=223).contains(b1) {
            return if lone_transport_feedback(data) {
                Rx::Feedback
            } else {
                Rx::NotOurs
            };
        }
        let Some(ssrc) = corelay_core::rtp::ssrc(data) else {
            return Rx::NotOurs;
        };
        let ssrc = Ssrc::from(ssrc);
        let ours = self
            .streams
            .iter()
            .position(|s| s.ssrc == ssrc && *b1 & 0x7f == *s.pt);
        let Some(parsed) = RtpHeader::parse(data, &self.exts) else {
            // str0m's, and str0m drops it too (it would not have
            // registered a receipt for it either).
            return match ours {
                Some(_) => Rx::Dropped,
                None => Rx::NotOurs,
            };
        };
        // Every RTP packet's receipt is registered here, the ones str0m
        // handles (RTX, padding, a stream's first packets) too: the
        // feedback reports them all. Those are registered before str0m
        // authenticates them (str0m registers after): a forgery from the
        // server's address could claim a receipt, no more.
        let Some(stream) = ours.and_then(|i| self.streams.get_mut(i)) else {
            if let Some(t) = parsed.ext_vals.transport_cc {
                register_receipt(&mut self.twcc, &mut self.twcc_since, t, now);
            }
            return Rx::NotOurs;
        };
        self.header = parsed;
        let header = &self.header;
        let index = *header.sequence_number(Some(stream.max_index.into()));
        let Some(plain) = corelay_core::rtp::open(&mut self.rx, data, header, index) else {
            return Rx::Dropped;
        };
        // A gap: NACK what is missing, once (str0m's receiver asks again
        // every 33 ms while the packet is within its last 100; a resend
        // comes on the RTX stream, through str0m, and counts where it
        // lands like any packet).
        // Not after a silence (a paused slot, a layer off): what was lost
        // before it is too old to be worth a resend, which would arrive as
        // a frame seconds late.
        let first_missing = stream.max_index + 1;
        let fresh = now.saturating_duration_since(stream.last_at) <= NACK_MAX_SILENCE;
        stream.last_at = stream.last_at.max(now);
        if stream.nack && fresh && index > first_missing && index - first_missing <= MAX_NACK_GAP {
            let nack = nack_packet(
                self.sender_ssrc,
                *ssrc,
                first_missing as u16,
                index - first_missing,
            );
            if self.out.len() < MAX_OUT {
                self.out.push(self.tx.protect_rtcp(&nack));
                self.nacks_sent += 1;
            }
        }
        stream.max_index = stream.max_index.max(index);
        let slot = stream.slot;
        let clock = stream.clock;
        if let Some(t) = header.ext_vals.transport_cc {
            register_receipt(&mut self.twcc, &mut self.twcc_since, t, now);
        }
        if self.noted.len() < MAX_NOTED {
            self.noted.push(Noted {
                ssrc,
                index,
                timestamp: header.timestamp,
                clock,
                at: now,
                len: plain.len(),
            });
        }
        if self.noted_since.is_none() {
            self.noted_since = Some(now);
        }
        if plain.is_empty() {
            return Rx::Padding;
        }
        Rx::Media(Incoming {
            header,
            seq: index,
            slot,
            payload: plain,
        })
    }

    /// When the next transport-wide feedback is due.
    fn feedback_at(&self) -> Option<Instant> {
        self.twcc_since.map(|t| t + TWCC_HOLD)
    }

    /// When the packets noted are due at str0m.
    fn notes_at(&self) -> Option<Instant> {
        self.noted_since.map(|t| t + NOTE_HOLD)
    }

    /// When this path next has something to do ([`FastPath::feedback_due`]
    /// or [`FastPath::notes_due`]).
    pub fn next_at(&self) -> Option<Instant> {
        match (self.feedback_at(), self.notes_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether transport-wide feedback is due by `now`.
    pub fn feedback_due(&self, now: Instant) -> bool {
        self.feedback_at().is_some_and(|t| now >= t)
    }

    /// Whether the packets noted are due at str0m by `now` (or too many).
    pub fn notes_due(&self, now: Instant) -> bool {
        self.notes_at().is_some_and(|t| now >= t) || self.noted.len() >= MAX_NOTED / 2
    }

    /// Send the transport-wide feedback of every receipt not reported yet,
    /// built by str0m's register as str0m builds it, behind an empty
    /// receiver report (as str0m sends its feedback behind a report).
    pub fn send_feedback(&mut self) {
        self.twcc_since = None;
        let media = self.streams.first().map_or(0, |s| *s.ssrc);
        for _ in 0..TWCC_MAX_REPORTS {
            let Some(mut twcc) = self.twcc.build_report(TWCC_MAX_BYTES) else {
                break;
            };
            twcc.sender_ssrc = self.sender_ssrc.into();
            twcc.ssrc = media.into();
            let fb = Rtcp::Twcc(twcc);
            let len = fb.length_words() * 4;
            let mut p = vec![0u8; 8 + len];
            if let Some(head) = p.get_mut(..8) {
                head.copy_from_slice(&empty_report(self.sender_ssrc));
            }
            let Some(body) = p.get_mut(8..) else {
                break;
            };
            if fb.write_to(body) != len || self.out.len() >= MAX_OUT {
                break;
            }
            self.out.push(self.tx.protect_rtcp(&p));
        }
    }

    /// Hand the packets taken to their streams' receive registers in
    /// str0m (their receiver reports, statistics, pause detection).
    pub fn report_notes(&mut self, rtc: &mut str0m::Rtc) {
        self.noted_since = None;
        if self.noted.is_empty() {
            return;
        }
        let mut api = rtc.direct_api();
        for n in self.noted.drain(..) {
            if let Some(rx) = api.stream_rx(&n.ssrc) {
                rx.note_received(n.at, n.index.into(), n.timestamp, n.clock, n.len);
            }
        }
    }

    /// Encrypt one RTP packet for the next poll; false when too many wait.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        ssrc: Ssrc,
        pt: Pt,
        seq: u64,
        timestamp: u32,
        marker: bool,
        mut ext_vals: ExtensionValues,
        payload: &[u8],
    ) -> bool {
        if self.out.len() >= MAX_OUT {
            return false;
        }
        ext_vals.transport_cc = Some(self.twcc_seq);
        self.twcc_seq = self.twcc_seq.wrapping_add(1);
        let mut header = RtpHeader {
            payload_type: pt,
            sequence_number: seq as u16,
            timestamp,
            ssrc,
            marker,
            has_extension: true,
            ext_vals,
            ..Default::default()
        };
        // A header is at most 12 + 4 + 255 * 4 bytes; the scratch grows to
        // fit whatever the payload adds.
        let need = 12 + 4 + 1020 + payload.len();
        if self.scratch.len() < need {
            self.scratch.resize(need, 0);
        }
        let hlen = header.write_to(&mut self.scratch, &self.exts);
        header.header_len = hlen;
        let Some(dst) = self.scratch.get_mut(hlen..hlen + payload.len()) else {
            return false;
        };
        dst.copy_from_slice(payload);
        let Some(packet) = self.scratch.get(..hlen + payload.len()) else {
            return false;
        };
        let protected = self.tx.protect_rtp(packet, &header, seq);
        self.out.push(protected);
        true
    }

    /// NACK packets sent so far.
    pub fn nacks_sent(&self) -> u64 {
        self.nacks_sent
    }

    /// The datagrams sent since the last call, in order.
    pub fn drain_out(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.out.drain(..)
    }
}

/// Registers transport-wide receipt `seq` at `now` in `twcc`, extended to
/// 64 bits from the highest so far (as str0m's session does).
fn register_receipt(
    twcc: &mut TwccRecvRegister,
    since: &mut Option<Instant>,
    seq: u16,
    now: Instant,
) {
    let prev = twcc.max_seq().map(|s| *s);
    twcc.update_seq(extend_u16(prev, seq).into(), now);
    if since.is_none() {
        *since = Some(now);
    }
}

/// An RTCP receiver report with no report blocks from `sender`.
fn empty_report(sender: u32) -> [u8; 8] {
    let [a, b, c, d] = sender.to_be_bytes();
    [0x80, 201, 0, 1, a, b, c, d]
}

/// An empty receiver report and a generic NACK (RFC 4585, 6.2.1) for
/// `count` packets of `media` from sequence number `first`, as one
/// compound RTCP packet (str0m sends its feedback behind a report too).
fn nack_packet(sender: u32, media: u32, first: u16, count: u64) -> Vec<u8> {
    let mut fci: Vec<[u8; 4]> = Vec::new();
    let mut seq = first;
    let mut left = count;
    while left > 0 {
        let mut blp = 0u16;
        for bit in 0..16u64 {
            if bit + 1 < left {
                blp |= 1 << bit;
            }
        }
        let [a, b] = seq.to_be_bytes();
        let [c, d] = blp.to_be_bytes();
        fci.push([a, b, c, d]);
        let covered = left.min(17);
        seq = seq.wrapping_add(covered as u16);
        left -= covered;
    }
    let mut p = Vec::with_capacity(8 + 12 + 4 * fci.len());
    p.extend_from_slice(&empty_report(sender));
    p.extend_from_slice(&[0x81, 205]);
    p.extend_from_slice(&(2 + fci.len() as u16).to_be_bytes());
    p.extend_from_slice(&sender.to_be_bytes());
    p.extend_from_slice(&media.to_be_bytes());
    for f in fci {
        p.extend_from_slice(&f);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport-wide feedback packet as str0m writes it.
    fn feedback() -> Vec<u8> {
        let mut reg = TwccRecvRegister::new(TWCC_KEEP);
        let t0 = Instant::now();
        for seq in [1u64, 2, 4] {
            reg.update_seq(seq.into(), t0 + Duration::from_millis(seq));
        }
        let Some(twcc) = reg.build_report(TWCC_MAX_BYTES) else {
            panic!("no report");
        };
        let fb = Rtcp::Twcc(twcc);
        let mut p = vec![0u8; fb.length_words() * 4];
        assert_eq!(fb.write_to(&mut p), p.len());
        p
    }

    #[test]
    fn only_a_lone_feedback_packet_is_skipped() {
        let fb = feedback();
        // SRTCP: the index (4 bytes), then either profile's tag.
        for tag in [16, 10] {
            let mut p = fb.clone();
            p.extend_from_slice(&vec![0xa5; 4 + tag]);
            assert!(lone_transport_feedback(&p), "tag {tag}");
        }
        let srtcp = |rtcp: &[u8]| [rtcp, &[0xa5; 20][..]].concat();
        // Behind a report, or followed by one: str0m's to read.
        let rr = empty_report(7);
        assert!(!lone_transport_feedback(&srtcp(&[&rr[..], &fb].concat())));
        assert!(!lone_transport_feedback(&srtcp(&[&fb[..], &rr].concat())));
        // Another transport feedback message (a NACK, FMT 1).
        let nack = nack_packet(7, 9, 100, 3);
        let nack = nack.get(8..).unwrap_or_default();
        assert!(!lone_transport_feedback(&srtcp(nack)));
        // Cut short, empty, or RTP.
        let cut = srtcp(&fb);
        assert!(!lone_transport_feedback(
            cut.get(..cut.len() - 1).unwrap_or_default()
        ));
        assert!(!lone_transport_feedback(fb.get(..3).unwrap_or_default()));
        assert!(!lone_transport_feedback(&[]));
        let mut rtp = cut.clone();
        rtp[1] = 96;
        assert!(!lone_transport_feedback(&rtp));
    }

    #[test]
    fn a_nack_names_every_missing_packet_and_parses_as_one() {
        use str0m::rtp::rtcp::Rtcp;
        // 20 missing from 65_530: two FCI entries, across the wrap.
        let p = nack_packet(7, 9, 65_530, 20);
        assert_eq!(p.len(), 8 + 12 + 2 * 4);
        assert!(matches!(
            Rtcp::try_from(&p[..8]),
            Ok(Rtcp::ReceiverReport(_))
        ));
        let Ok(Rtcp::Nack(n)) = Rtcp::try_from(&p[8..]) else {
            panic!("not a NACK: {p:?}");
        };
        assert_eq!((*n.sender_ssrc, *n.ssrc), (7, 9));
        let mut seqs = Vec::new();
        for e in n.reports.iter() {
            seqs.push(e.pid);
            seqs.extend(
                (0..16u16)
                    .filter(|b| e.blp & (1 << b) != 0)
                    .map(|b| e.pid.wrapping_add(b + 1)),
            );
        }
        let want: Vec<u16> = (0..20u16).map(|i| 65_530u16.wrapping_add(i)).collect();
        assert_eq!(seqs, want);
    }
}
