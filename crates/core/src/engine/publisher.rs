//! What a participant publishes: its tracks (codec, simulcast rids,
//! dynacast's view of which layers it sends), which SSRC is which track
//! and layer, which unseen SSRCs may reach its `Rtc` ([`StreamGuard`]),
//! each track's state (muted by the participant, paused when its media
//! stopped), and its side of the shard's own ingress.
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
use crate::room::{PAUSED_AFTER, TrackState};

#[derive(Debug)]
pub(super) struct PublishedTrack {
    pub(super) mid: Mid,
    pub(super) kind: MediaKind,
    /// Last payload type seen and its codec (publishers rarely switch).
    pub(super) codec: Option<(Pt, CodecSpec)>,
    /// Its simulcast rids in offer order (a layer's stable id is its
    /// position); empty without simulcast.
    pub(super) rids: Vec<str0m::media::Rid>,
    /// What dynacast last told its publisher, and when its layers were
    /// last needed.
    pub(super) dynacast: Dynacast,
    /// Whether its media flows: muted, paused.
    pub(super) flow: Flow,
    /// Each layer's dependency descriptor structure (AV1, or VP9 with the
    /// descriptor), once its first descriptor arrives.
    pub(super) dd: [Option<Box<crate::svc::dd::DdReader>>; MAX_LAYERS],
}

/// Dynacast's state for one published track.
#[derive(Debug)]
pub(super) struct Dynacast {
    /// The rids the publisher was last told to send (dynacast), as a bit
    /// per layer; all of them until the first notice.
    pub(super) active: u32,
    /// When some subscriber last needed each layer (dynacast's hold).
    pub(super) last_needed: [Option<Instant>; MAX_LAYERS],
    /// When dynacast last resumed a paused layer because the ones the
    /// publisher was told to send had all gone silent.
    pub(super) probed_at: Option<Instant>,
    /// The spatial layers a scalable (SVC) publisher was last told to
    /// encode (the `svc` event); `None` before the first.
    pub(super) svc_told: Option<u8>,
}

/// Whether a published track's media flows: muted by its participant (its
/// packets are counted and dropped), paused when nothing of it arrived for
/// [`PAUSED_AFTER`] (the room tick decides; the next packet resumes it).
#[derive(Debug, Default)]
pub(super) struct Flow {
    muted: bool,
    paused: bool,
    /// When its last packet arrived (any layer).
    last_rx: Option<Instant>,
}

impl Flow {
    pub(super) fn state(&self) -> TrackState {
        TrackState {
            muted: self.muted,
            paused: self.paused,
        }
    }

    #[inline]
    pub(super) fn muted(&self) -> bool {
        self.muted
    }

    /// Mutes or unmutes it: true if that changed anything.
    pub(super) fn set_muted(&mut self, muted: bool) -> bool {
        std::mem::replace(&mut self.muted, muted) != muted
    }

    /// A packet of it arrived: true if that resumed it (it was paused).
    #[inline]
    pub(super) fn arrived(&mut self, now: Instant) -> bool {
        self.last_rx = Some(now);
        std::mem::take(&mut self.paused)
    }

    /// Whether it sent nothing for [`PAUSED_AFTER`] and is not yet paused:
    /// then it is, from now. A track that never sent is not paused.
    pub(super) fn pause_if_silent(&mut self, now: Instant) -> bool {
        let silent = !self.paused
            && self
                .last_rx
                .is_some_and(|at| now.saturating_duration_since(at) >= PAUSED_AFTER);
        self.paused |= silent;
        silent
    }
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
                    dynacast: Dynacast {
                        active: 1,
                        last_needed: [None; MAX_LAYERS],
                        probed_at: None,
                        svc_told: None,
                    },
                    flow: Flow::default(),
                    dd: Default::default(),
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
                t.dynacast.active = (1 << t.rids.len()) - 1;
                t.dynacast.last_needed = [Some(now); MAX_LAYERS];
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Flow, PAUSED_AFTER};
    use crate::room::TrackState;

    #[test]
    fn a_track_pauses_once_after_its_silence_and_resumes_with_its_next_packet() {
        let t0 = Instant::now();
        let mut f = Flow::default();
        assert!(
            !f.pause_if_silent(t0 + PAUSED_AFTER * 10),
            "never sent: not paused"
        );
        assert!(!f.arrived(t0));
        let ms = Duration::from_millis;
        assert!(!f.pause_if_silent(t0 + PAUSED_AFTER - ms(1)));
        assert!(f.pause_if_silent(t0 + PAUSED_AFTER));
        assert!(!f.pause_if_silent(t0 + PAUSED_AFTER * 2), "told once");
        assert_eq!(
            f.state(),
            TrackState {
                muted: false,
                paused: true
            }
        );
        assert!(f.arrived(t0 + PAUSED_AFTER * 3), "resumed");
        assert!(!f.arrived(t0 + PAUSED_AFTER * 3 + ms(20)));
        assert_eq!(f.state(), TrackState::default());
    }

    #[test]
    fn a_mute_changes_once_and_is_independent_of_the_pause() {
        let t0 = Instant::now();
        let mut f = Flow::default();
        assert!(f.set_muted(true));
        assert!(!f.set_muted(true));
        f.arrived(t0);
        assert!(f.pause_if_silent(t0 + PAUSED_AFTER));
        assert_eq!(
            f.state(),
            TrackState {
                muted: true,
                paused: true
            }
        );
        assert!(f.set_muted(false));
        assert_eq!(
            f.state(),
            TrackState {
                muted: false,
                paused: true
            }
        );
    }
}
