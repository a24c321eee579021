//! Transport figures: str0m's statistics events turned into each
//! participant's [`ParticipantStats`] and the shard's NACK counters.
//!
//! Must not: act on the figures (they are for operators and the API; the
//! allocator in [`super::simulcast`] reads the egress loss, not this file).

use str0m::Event;
use str0m::media::MediaKind;

use super::Engine;
use crate::ids::ParticipantId;
use crate::metrics::{ParticipantStats, SlotLayer};

impl Engine {
    /// Every local participant's latest transport figures.
    pub fn participant_stats(&self) -> Vec<ParticipantStats> {
        self.participants
            .values()
            .map(|p| {
                let mut st = p.stats.clone();
                st.estimate_bps = p.estimate();
                st.climb_estimate_bps = p.climb_estimate();
                st.rtx_history_ms = u64::try_from(p.rtx_history().as_millis()).unwrap_or(u64::MAX);
                st.layers = p
                    .slots
                    .iter()
                    .filter(|s| s.kind == MediaKind::Video && s.source.is_some())
                    .map(|s| SlotLayer {
                        mid: s.mid.to_string(),
                        layer: s.current,
                        target: s.target,
                        switches: s.switches,
                    })
                    .collect();
                st
            })
            .collect()
    }

    /// A statistics event of participant `id`; other events are ignored.
    pub(super) fn on_stats(&mut self, id: ParticipantId, ev: Event) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        match ev {
            Event::PeerStats(st) => {
                p.stats.ingress_loss = st.ingress_loss_fraction;
                p.stats.egress_loss = st.egress_loss_fraction;
                p.stats.rtt_ms = st.rtt.map(|d| d.as_secs_f64() * 1e3);
                p.stats.bytes_in = st.peer_bytes_rx;
                p.stats.bytes_out = st.peer_bytes_tx;
            }
            Event::MediaIngressStats(st) => {
                let clock = match p.tracks.iter().find(|t| t.mid == st.mid).map(|t| t.kind) {
                    Some(MediaKind::Audio) => 48.0,
                    _ => 90.0,
                };
                let jitter = f64::from(st.jitter) / clock;
                p.stats.ingress_jitter_ms =
                    Some(p.stats.ingress_jitter_ms.map_or(jitter, |j| j.max(jitter)));
                let d = p.nack_delta(st.mid, false, st.nacks);
                p.stats.nacks_sent += d;
                self.io.counters.nacks_sent += d;
            }
            Event::MediaEgressStats(st) => {
                let d = p.nack_delta(st.mid, true, st.nacks);
                p.stats.nacks_received += d;
                self.io.counters.nacks_received += d;
            }
            _ => {}
        }
    }
}
