//! Transport figures: str0m's statistics events turned into each
//! participant's [`ParticipantStats`] and the shard's NACK counters.
//!
//! Must not: act on the figures (they are for operators and the API; the
//! allocator in [`super::simulcast`] reads the egress loss, not this file).

use str0m::Event;
use str0m::media::MediaKind;

use super::Engine;
use crate::ids::ParticipantId;
use crate::metrics::{ParticipantStats, SlotLayer, SlotStats};

impl Engine {
    /// Every local participant's latest transport figures.
    pub fn participant_stats(&self) -> Vec<ParticipantStats> {
        self.participants
            .values()
            .map(|p| {
                let mut st = p.session.stats.clone();
                st.estimate_bps = p.subscriber.downlink.estimate();
                st.estimate_source = p.subscriber.downlink.source().map(|s| s.name());
                st.egress_loss = st.egress_loss.or(p.subscriber.downlink.report_loss());
                st.climb_estimate_bps = p.subscriber.downlink.climb_estimate();
                st.rtx_history_ms =
                    u64::try_from(p.subscriber.rtx_history().as_millis()).unwrap_or(u64::MAX);
                st.slots = p
                    .subscriber
                    .slots
                    .iter()
                    .map(|s| {
                        let video = s.kind == MediaKind::Video;
                        SlotStats {
                            mid: s.mid.to_string(),
                            video,
                            source: s.source,
                            shown: !video || (s.view.width > 0 && s.view.height > 0),
                            wanted: s.layer.wanted,
                            target: s.layer.target,
                        }
                    })
                    .collect();
                st.layers = p
                    .subscriber
                    .slots
                    .iter()
                    .filter(|s| s.kind == MediaKind::Video && s.source.is_some())
                    .map(|s| SlotLayer {
                        mid: s.mid.to_string(),
                        layer: s.layer.current,
                        target: s.layer.target,
                        switches: s.layer.switches,
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
                p.session.stats.ingress_loss = st.ingress_loss_fraction;
                p.session.stats.egress_loss = st.egress_loss_fraction;
                p.session.stats.rtt_ms = st.rtt.map(|d| d.as_secs_f64() * 1e3);
                p.session.stats.bytes_in = st.peer_bytes_rx;
                p.session.stats.bytes_out = st.peer_bytes_tx;
            }
            Event::MediaIngressStats(st) => {
                let clock = match p
                    .publisher
                    .tracks
                    .iter()
                    .find(|t| t.mid == st.mid)
                    .map(|t| t.kind)
                {
                    Some(MediaKind::Audio) => 48.0,
                    _ => 90.0,
                };
                let jitter = f64::from(st.jitter) / clock;
                p.session.stats.ingress_jitter_ms =
                    p.session.ingress_jitter(st.mid, st.rid, st.packets, jitter);
                let d = p.session.nack_delta(st.mid, false, st.nacks);
                p.session.stats.nacks_sent += d;
                self.io.counters.nacks_sent += d;
            }
            Event::MediaEgressStats(st) => {
                let d = p.session.nack_delta(st.mid, true, st.nacks);
                p.session.stats.nacks_received += d;
                self.io.counters.nacks_received += d;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use str0m::media::{Mid, Rid};
    use str0m::stats::{MediaEgressStats, MediaIngressStats, PeerStats};

    use super::super::io::fixture::{add, engine, line, participant, track};
    use super::*;

    const ID: u64 = 1;

    /// Participant 1 publishing audio "a" and video "v", with an audio slot
    /// "s0" and video slots "s1", "s2".
    fn setup(t0: Instant) -> Engine {
        let mut e = engine();
        add(
            &mut e,
            t0,
            ID,
            &[line("a", MediaKind::Audio), line("v", MediaKind::Video)],
            &[
                line("s0", MediaKind::Audio),
                line("s1", MediaKind::Video),
                line("s2", MediaKind::Video),
            ],
        );
        e
    }

    fn ingress(mid: &str, jitter: u32, nacks: u64, at: Instant) -> Event {
        stream(mid, None, 0, jitter, nacks, at)
    }

    /// The statistics of stream (`mid`, `rid`) with `packets` received so
    /// far and `jitter` in RTP clock units.
    fn stream(
        mid: &str,
        rid: Option<&str>,
        packets: u64,
        jitter: u32,
        nacks: u64,
        at: Instant,
    ) -> Event {
        Event::MediaIngressStats(MediaIngressStats {
            mid: Mid::from(mid),
            rid: rid.map(Rid::from),
            bytes: packets * 1_000,
            packets,
            firs: 0,
            plis: 0,
            nacks,
            jitter,
            rtt: None,
            loss: None,
            timestamp: at,
            remote: None,
        })
    }

    fn egress(mid: &str, nacks: u64, at: Instant) -> Event {
        Event::MediaEgressStats(MediaEgressStats {
            mid: Mid::from(mid),
            rid: None,
            bytes: 0,
            packets: 0,
            firs: 0,
            plis: 0,
            nacks,
            rtt: None,
            loss: None,
            timestamp: at,
            remote: None,
        })
    }

    fn stats(e: &mut Engine) -> ParticipantStats {
        participant(e, ID).session.stats.clone()
    }

    #[test]
    fn peer_figures_are_taken_as_str0m_reports_them() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        e.on_stats(
            ParticipantId(ID),
            Event::PeerStats(PeerStats {
                peer_bytes_rx: 1_000,
                peer_bytes_tx: 2_000,
                bytes_rx: 1_100,
                bytes_tx: 2_200,
                timestamp: t0,
                bwe_tx: None,
                egress_loss_fraction: Some(0.25),
                ingress_loss_fraction: Some(0.5),
                rtt: Some(Duration::from_micros(42_500)),
                selected_candidate_pair: None,
            }),
        );
        let st = stats(&mut e);
        assert_eq!(
            (st.bytes_in, st.bytes_out),
            (1_000, 2_000),
            "media bytes, not the transport's"
        );
        assert_eq!((st.ingress_loss, st.egress_loss), (Some(0.5), Some(0.25)));
        assert_eq!(st.rtt_ms, Some(42.5));
    }

    #[test]
    fn jitter_is_in_milliseconds_of_each_tracks_clock_and_the_worst_stream_counts() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let id = ParticipantId(ID);
        // 480 ticks of Opus's 48 kHz: 10 ms.
        e.on_stats(id, stream("a", None, 50, 480, 0, t0));
        assert_eq!(stats(&mut e).ingress_jitter_ms, Some(10.0));
        // 1800 ticks of video's 90 kHz: 20 ms, the larger.
        e.on_stats(id, stream("v", Some("q"), 300, 1_800, 0, t0));
        assert_eq!(stats(&mut e).ingress_jitter_ms, Some(20.0));
        // A second later both flowed, video's jitter fell: audio's is the
        // worst now.
        let t1 = t0 + Duration::from_secs(1);
        e.on_stats(id, stream("a", None, 100, 480, 0, t1));
        e.on_stats(id, stream("v", Some("q"), 600, 90, 0, t1));
        assert_eq!(stats(&mut e).ingress_jitter_ms, Some(10.0));
    }

    /// Issue 52: a simulcast publisher on loopback read 2,327 ms (Chromium)
    /// and 37,317 ms (Firefox), for the rest of the call. str0m's estimate
    /// of a stream's jitter (RFC 3550's running average) rises for a while
    /// (until str0m patch 28 it took resends over RTX as samples) and falls
    /// again; a layer paused at the source repeats its last figure in its
    /// reports. The largest figure ever reported stayed.
    #[test]
    fn jitter_is_the_current_figure_of_the_flowing_streams_not_the_largest_ever() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let id = ParticipantId(ID);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Second 1: q and f flow with 1 ms of jitter (90 ticks).
        e.on_stats(id, stream("v", Some("q"), 100, 90, 0, at(1)));
        e.on_stats(id, stream("v", Some("f"), 300, 90, 0, at(1)));
        assert_eq!(stats(&mut e).ingress_jitter_ms, Some(1.0));
        // Second 2: f's estimate read 2,327 ms (resends taken as samples).
        e.on_stats(id, stream("v", Some("q"), 130, 90, 0, at(2)));
        e.on_stats(id, stream("v", Some("f"), 330, 209_430, 0, at(2)));
        assert_eq!(stats(&mut e).ingress_jitter_ms, Some(2_327.0));
        // Second 3: the estimate is back to 2 ms.
        e.on_stats(id, stream("v", Some("q"), 160, 90, 0, at(3)));
        e.on_stats(id, stream("v", Some("f"), 360, 180, 0, at(3)));
        assert_eq!(stats(&mut e).ingress_jitter_ms, Some(2.0));
        // Second 4: f paused again on a figure of 2,327 ms (its last
        // packets, say), which its reports repeat while nothing flows.
        e.on_stats(id, stream("v", Some("q"), 190, 90, 0, at(4)));
        e.on_stats(id, stream("v", Some("f"), 390, 209_430, 0, at(4)));
        e.on_stats(id, stream("v", Some("q"), 220, 90, 0, at(5)));
        e.on_stats(id, stream("v", Some("f"), 390, 209_430, 0, at(5)));
        assert_eq!(
            stats(&mut e).ingress_jitter_ms,
            Some(1.0),
            "a paused layer's stale figure does not count"
        );
        // Nothing flows at all: no figure.
        e.on_stats(id, stream("v", Some("q"), 220, 90, 0, at(6)));
        e.on_stats(id, stream("v", Some("f"), 390, 209_430, 0, at(6)));
        assert_eq!(stats(&mut e).ingress_jitter_ms, None);
    }

    #[test]
    fn nack_totals_become_increments_per_mid_and_direction() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let id = ParticipantId(ID);
        e.on_stats(id, ingress("v", 0, 5, t0));
        e.on_stats(id, ingress("v", 0, 8, t0)); // +3
        e.on_stats(id, ingress("a", 0, 2, t0)); // another mid: its own total
        e.on_stats(id, egress("v", 4, t0)); // the other direction, same mid
        e.on_stats(id, egress("s1", 1, t0));
        e.on_stats(id, egress("v", 4, t0)); // unchanged: +0
        let st = stats(&mut e);
        assert_eq!(st.nacks_sent, 10);
        assert_eq!(st.nacks_received, 5);
        assert_eq!(e.io.counters.nacks_sent, 10, "the shard's counter follows");
        assert_eq!(e.io.counters.nacks_received, 5);
        // A total that went down (a new stream) adds nothing: no wrap.
        e.on_stats(id, ingress("v", 0, 1, t0));
        assert_eq!(stats(&mut e).nacks_sent, 10);
        assert_eq!(e.io.counters.nacks_sent, 10);
    }

    #[test]
    fn other_events_and_unknown_participants_change_nothing() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        e.on_stats(ParticipantId(9), ingress("v", 1_800, 5, t0));
        e.on_stats(ParticipantId(ID), Event::Connected);
        let st = stats(&mut e);
        assert_eq!((st.nacks_sent, st.ingress_jitter_ms), (0, None));
        assert_eq!(e.io.counters.nacks_sent, 0);
    }

    #[test]
    fn the_figures_list_each_video_slot_with_a_source_and_the_estimates() {
        let t0 = Instant::now();
        let mut e = setup(t0);
        let p = participant(&mut e, ID);
        p.subscriber.slots[0].set_source(Some(track(2, "a"))); // audio: not a layer
        p.subscriber.slots[2].set_source(Some(track(2, "v")));
        p.subscriber.slots[2].layer.current = Some(1);
        p.subscriber.slots[2].layer.target = Some(2);
        p.subscriber.slots[2].layer.switches = 3;
        p.subscriber.downlink.note_estimate(t0, 900_000);
        p.subscriber
            .downlink
            .note_estimate(t0 + Duration::from_millis(100), 1_500_000);
        let all = e.participant_stats();
        assert_eq!(all.len(), 1);
        let st = &all[0];
        assert_eq!(st.id, ParticipantId(ID));
        assert_eq!(
            st.layers,
            vec![SlotLayer {
                mid: "s2".into(),
                layer: Some(1),
                target: Some(2),
                switches: 3,
            }]
        );
        assert_eq!(st.estimate_bps, Some(1_500_000), "the latest");
        assert_eq!(
            st.climb_estimate_bps,
            Some(900_000),
            "the lowest of the window"
        );
        assert_eq!(
            Duration::from_millis(st.rtx_history_ms),
            participant(&mut e, ID).subscriber.rtx_history()
        );
    }
}
