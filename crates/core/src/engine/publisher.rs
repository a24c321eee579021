//! What a participant publishes: its tracks (codec, simulcast rids,
//! dynacast's view of which layers it sends), which SSRC is which track
//! and layer, which unseen SSRCs may reach its `Rtc` ([`StreamGuard`]),
//! and its side of the shard's own ingress.
//!
//! Must not: call into its `Rtc` but to read what negotiation decided (the
//! caller passes it), forward media ([`super::forward`]) or decide which
//! layers it is told to send ([`super::simulcast`]).

use std::time::Instant;

use str0m::Rtc;
use str0m::format::CodecSpec;
use str0m::media::{MediaKind, Mid, Pt};
use str0m::rtp::Ssrc;

use super::streams::{MAX_LAYERS, StreamGuard};
use crate::offer::MediaLine;

#[derive(Debug)]
pub(super) struct PublishedTrack {
    pub(super) mid: Mid,
    pub(super) kind: MediaKind,
    /// Last payload type seen and its codec (publishers rarely switch).
    pub(super) codec: Option<(Pt, CodecSpec)>,
    /// Its simulcast rids in offer order (a layer's stable id is its
    /// position); empty without simulcast.
    pub(super) rids: Vec<str0m::media::Rid>,
    /// The rids the publisher was last told to send (dynacast), as a bit
    /// per layer; all of them until the first notice.
    pub(super) active: u32,
    /// When some subscriber last needed each layer (dynacast's hold).
    pub(super) last_needed: [Option<Instant>; MAX_LAYERS],
    /// When dynacast last resumed a paused layer because the ones the
    /// publisher was told to send had all gone silent.
    pub(super) probed_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Publisher {
    pub(super) tracks: Vec<PublishedTrack>,
    /// Which unseen SSRCs may reach the `Rtc` ([`StreamGuard`]).
    pub(super) guard: StreamGuard,
    /// Its side of the shard's own ingress ([`super::ingress`]), from the
    /// first media packet str0m delivered.
    pub(super) ingress: Option<Box<super::ingress::Ingress>>,
    /// SSRC -> (index in `tracks`, layer), filled on first sight of each SSRC.
    ssrcs: Vec<(Ssrc, usize, u8)>,
}

impl Publisher {
    /// Adds the tracks of a (re)negotiation, ignoring mids already known;
    /// true if any was new.
    pub(super) fn add_tracks(&mut self, tracks: &[MediaLine]) -> bool {
        let before = self.tracks.len();
        for t in tracks {
            if !self.tracks.iter().any(|x| x.mid == t.mid) {
                self.tracks.push(PublishedTrack {
                    mid: t.mid,
                    kind: t.kind,
                    codec: None,
                    rids: Vec::new(),
                    active: 1,
                    last_needed: [None; MAX_LAYERS],
                    probed_at: None,
                });
            }
        }
        before != self.tracks.len()
    }

    /// Re-reads what a negotiation decided: each track's rids and the
    /// stream guard. The own ingress starts over, each stream from str0m's
    /// next delivery of it (a negotiation may change extension ids and
    /// payload types; str0m's duplicate check knows every packet the
    /// ingress counted).
    pub(super) fn negotiated(&mut self, rtc: &Rtc, now: Instant) {
        for t in &mut self.tracks {
            if let Some(m) = rtc.media(t.mid)
                && let str0m::media::Rids::Specific(r) = m.rids_rx()
                && t.rids.is_empty()
            {
                t.rids = r.iter().take(MAX_LAYERS).copied().collect();
                t.active = (1 << t.rids.len()) - 1;
                t.last_needed = [Some(now); MAX_LAYERS];
            }
        }
        self.guard = StreamGuard::from_rtc(rtc, self.tracks.iter().map(|t| t.mid));
        self.ingress = None;
    }

    pub(super) fn track_lines(&self) -> Vec<MediaLine> {
        self.tracks
            .iter()
            .map(|t| MediaLine {
                mid: t.mid,
                kind: t.kind,
            })
            .collect()
    }

    /// Whether an SSRC was already seen on one of its tracks.
    pub(super) fn knows_ssrc(&self, ssrc: u32) -> bool {
        self.ssrcs.iter().any(|(s, ..)| **s == ssrc)
    }

    /// Which published track an incoming SSRC belongs to, and its layer.
    pub(super) fn track_index(&mut self, rtc: &mut Rtc, ssrc: Ssrc) -> Option<(usize, u8)> {
        if let Some(&(_, i, layer)) = self.ssrcs.iter().find(|(s, ..)| *s == ssrc) {
            return Some((i, layer));
        }
        let (mid, rid) = rtc
            .direct_api()
            .stream_rx(&ssrc)
            .map(|s| (s.mid(), s.rid()))?;
        let i = self.tracks.iter().position(|t| t.mid == mid)?;
        let layer = match rid {
            Some(rid) => self
                .tracks
                .get(i)?
                .rids
                .iter()
                .position(|r| *r == rid)
                .and_then(|l| u8::try_from(l).ok())?,
            None => 0,
        };
        // A new SSRC of a track's layer replaces the old one (str0m does the
        // same), so this stays bounded by tracks and layers.
        self.ssrcs.retain(|&(_, t, l)| !(t == i && l == layer));
        self.ssrcs.push((ssrc, i, layer));
        Some((i, layer))
    }
}
